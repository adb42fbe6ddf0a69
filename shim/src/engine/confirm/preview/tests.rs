//! The preview's cases: a diff, a new file, binary, oversized, denied, escaping, links.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::engine::judge::policy::tests::policy;

const GATE: &str = "[[vaults.gates]]\ntool = \"write_file\"\ntargets = { paths = [\"path\"] }\n\
                    preview = { diff = { path = \"path\", content = \"content\" } }\n\
                    [vaults.acl]\ndeny = [\"private/**\"]\n";

fn root() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap().join("vault");
    std::fs::create_dir_all(root.join("private")).unwrap();
    (d, root)
}

fn show(root: &Path, path: &str, content: &str) -> String {
    let p = policy(root, GATE);
    let gate = p.gate_entry("write_file").unwrap().clone();
    preview(&p, &gate, &json!({"path": path, "content": content}))
}

#[test]
fn an_existing_file_gets_a_unified_diff() {
    let (_d, root) = root();
    std::fs::write(root.join("a.md"), "one\ntwo\nthree\n").unwrap();
    assert_eq!(
        show(&root, "a.md", "one\n2\nthree\nfour\n"),
        "--- a.md\n+++ a.md (after the write)\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n three\n+four\n"
    );
    // What it would be is what is diffed: nothing was written.
    assert_eq!(
        std::fs::read_to_string(root.join("a.md")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        show(&root, "a.md", "one\ntwo\nthree\n"),
        "no change: the write leaves a.md as it is (3 lines)"
    );
    let p = show(&root, "a.md", "one\ntwo\nthree");
    assert!(
        p.ends_with("-three\n+three\n\\ No newline at end of file\n"),
        "{p}"
    );
}

#[test]
fn a_new_file_is_said_with_its_content() {
    let (_d, root) = root();
    assert_eq!(
        show(&root, "sub/new.md", "a\nb\n"),
        "new file, 2 lines\n--- /dev/null\n+++ sub/new.md (after the write)\n@@ -0,0 +1,2 @@\n+a\n+b\n"
    );
    assert_eq!(show(&root, "empty.md", ""), "new file, empty: empty.md");
}

#[test]
fn binary_files_are_said_not_shown() {
    let (_d, root) = root();
    std::fs::write(root.join("nul.bin"), b"PK\0\x03secret").unwrap();
    std::fs::write(root.join("latin1.txt"), b"caf\xe9\n").unwrap();
    std::fs::write(root.join("text.md"), "x\n").unwrap();
    let p = show(&root, "nul.bin", "hello\n");
    assert_eq!(
        p,
        "binary file, not shown: nul.bin (now: 10 bytes; after the write: 6 bytes)"
    );
    assert!(show(&root, "latin1.txt", "x").starts_with("binary file, not shown: latin1.txt"));
    assert_eq!(
        show(&root, "text.md", "a\0b"),
        "binary file, not shown: text.md (now: 2 bytes; after the write: 3 bytes)"
    );
    assert_eq!(
        show(&root, "new.bin", "\0"),
        "binary file, not shown: new.bin (now: a new file; after the write: 1 bytes)"
    );
}

#[test]
fn oversized_inputs_and_diffs_are_said_not_shown() {
    let (_d, root) = root();
    let big = "x".repeat(INPUT_MAX as usize + 1);
    std::fs::write(root.join("big.md"), &big).unwrap();
    assert_eq!(
        show(&root, "big.md", "a"),
        format!("too large to preview: the file is {} bytes", big.len())
    );
    assert_eq!(
        show(&root, "small.md", &big),
        format!(
            "too large to preview: the new content is {} bytes",
            big.len()
        )
    );
    // Inputs within the limit whose diff is not.
    let lines: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    assert!(lines.len() as u64 <= INPUT_MAX);
    let p = show(&root, "fresh.md", &lines);
    assert!(
        p.starts_with("too large to preview: the diff is "),
        "{}",
        &p[..80]
    );
    assert!(p.len() < 100);
}

#[test]
fn a_denied_path_is_never_read() {
    let (_d, root) = root();
    std::fs::write(root.join("private/key.md"), "SECRET-DENIED\n").unwrap();
    std::os::unix::fs::symlink("private/key.md", root.join("alias.md")).unwrap();
    std::os::unix::fs::symlink("private", root.join("dir")).unwrap();
    for path in ["private/key.md", "alias.md", "dir/key.md", "dir/new.md"] {
        let p = show(&root, path, "new\n");
        assert!(
            p.starts_with("no preview: ") && p.contains("denied by the vault ACL"),
            "{path}: {p}"
        );
        assert!(!p.contains("SECRET"), "{path}: {p}");
    }
}

#[test]
fn links_out_of_the_root_show_nothing_from_outside() {
    let (d, root) = root();
    let outside = d.path().join("outside.md");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("out.md")).unwrap();
    std::os::unix::fs::symlink(d.path(), root.join("up")).unwrap();
    std::os::unix::fs::symlink("../nowhere.md", root.join("dangling.md")).unwrap();
    for path in [
        "out.md",
        "up/outside.md",
        "dangling.md",
        "../outside.md",
        "/etc/passwd",
    ] {
        let p = show(&root, path, "new\n");
        assert!(p.starts_with("no preview: "), "{path}: {p}");
        assert!(
            !p.contains("OUTSIDE-SECRET") && !p.contains("root:"),
            "{path}: {p}"
        );
    }
}

#[test]
fn a_link_inside_the_root_is_diffed_where_it_leads() {
    let (_d, root) = root();
    std::fs::create_dir(root.join("notes")).unwrap();
    std::fs::write(root.join("notes/real.md"), "old\n").unwrap();
    std::os::unix::fs::symlink("notes/real.md", root.join("link.md")).unwrap();
    assert_eq!(
        show(&root, "link.md", "new\n"),
        "link.md is a symlink: the write changes notes/real.md\n\
         --- link.md\n+++ link.md (after the write)\n@@ -1 +1 @@\n-old\n+new\n"
    );
}

#[test]
fn what_cannot_be_previewed_says_why() {
    let (_d, root) = root();
    let p = policy(&root, GATE);
    let gate = p.gate_entry("write_file").unwrap().clone();
    assert_eq!(
        preview(&p, &gate, &json!({"path": "a.md"})),
        "no preview: argument \"content\" is missing or not a string"
    );
    assert_eq!(
        preview(&p, &gate, &json!({"path": 7, "content": "x"})),
        "no preview: argument \"path\" is missing or not a string"
    );
    std::fs::create_dir(root.join("folder")).unwrap();
    assert_eq!(
        show(&root, "folder", "x"),
        "no preview: folder is not a regular file"
    );
    // A FIFO is refused without blocking on it.
    nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_eq!(
        show(&root, "fifo", "x"),
        "no preview: fifo is not a regular file"
    );
    let plain = policy(
        &root,
        "[[vaults.gates]]\ntool = \"w\"\ntargets = \"none\"\n",
    );
    let g = plain.gate_entry("w").unwrap().clone();
    assert_eq!(
        preview(&plain, &g, &json!({"path": "a.md", "content": "x"})),
        ""
    );
}

#[test]
fn a_name_with_a_newline_cannot_add_lines() {
    let (_d, root) = root();
    let name = "a.md\n@@ -1 +1 @@\n+forged";
    let p = show(&root, name, "x\n");
    let kinds: Vec<_> = tc_core::preview::lines(&p)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    use tc_core::preview::LineKind::*;
    assert_eq!(kinds, vec![Note, Header, Header, Hunk, Added], "{p}");
    assert!(
        p.contains(r#"+++ "a.md\n@@ -1 +1 @@\n+forged" (after the write)"#),
        "{p}"
    );
}

/// A link swapped in after the path was judged is caught by judging the file opened.
#[test]
fn a_link_swapped_in_after_judging_shows_nothing() {
    let (d, root) = root();
    let outside = d.path().join("outside.md");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    std::fs::write(root.join("private/key.md"), "DENIED-SECRET\n").unwrap();
    let p = policy(&root, GATE);
    for (name, to) in [
        ("late.md", outside.clone()),
        ("later.md", root.join("private/key.md")),
    ] {
        let judged = p.resolve("path", name).unwrap();
        assert!(p.check_acl(std::slice::from_ref(&judged), false).is_ok());
        std::os::unix::fs::symlink(&to, &judged).unwrap();
        let why = read_current(&p, "path", &judged).unwrap_err();
        assert!(
            matches!(&why, NoPreview::Changed(r) if r == name),
            "{why:?}"
        );
        assert_eq!(
            why.to_string(),
            format!("no preview: {name} changed while it was read")
        );
    }
}
