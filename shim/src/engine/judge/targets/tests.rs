//! Tests of the target fingerprints: what is bound (content, type, existence, links)
//! and what is not, per kind; and that a huge file is hashed in bounded memory.

use super::*;
use std::path::Path;

fn policy(root: &Path) -> Policy {
    policy_with(root, "")
}

fn policy_with(root: &Path, keys: &str) -> Policy {
    let text = format!(
        "[[vaults]]\nid = \"v\"\nroot = \"{}\"\n{keys}",
        root.display()
    );
    let c = tc_core::Config::parse(&text, Path::new("/t.toml")).unwrap();
    Policy::new(&c.vaults[0]).unwrap()
}

#[test]
fn paths_fp_tracks_content_type_and_existence() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    let t = Targets::Paths(vec!["path".into()]);
    let a = json!({"path": "f.txt"});
    let missing = local_fp(&p, &t, &a).unwrap();
    std::fs::write(root.join("f.txt"), "one").unwrap();
    let one = local_fp(&p, &t, &a).unwrap();
    assert_ne!(missing, one);
    assert_eq!(one, local_fp(&p, &t, &a).unwrap());
    std::fs::write(root.join("f.txt"), "two").unwrap();
    assert_ne!(one, local_fp(&p, &t, &a).unwrap());
    assert!(tc_core::hash::is_sha256_hex(&one));
    assert!(tc_core::hash::is_sha256_hex(&none_fp()));
}

/// A path swapped for a link to identical bytes, or a folder on the way swapped for a
/// link to an identical folder, is drift; a state without links keeps its fingerprint.
#[test]
fn links_are_part_of_the_state() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    let t = Targets::Paths(vec!["path".into()]);
    std::fs::write(root.join("f.md"), "same").unwrap();
    std::fs::write(root.join("g.md"), "same").unwrap();
    let a = json!({"path": "f.md"});
    let plain = local_fp(&p, &t, &a).unwrap();
    let doc = json!([{"arg": "path", "path": "f.md", "state": fs::path_state(&p.fp_cache, &root.join("g.md")).unwrap()}]);
    assert_eq!(
        plain,
        fp_of("paths", doc),
        "a plain file's state is unchanged"
    );
    std::fs::remove_file(root.join("f.md")).unwrap();
    std::os::unix::fs::symlink("g.md", root.join("f.md")).unwrap();
    assert_ne!(plain, local_fp(&p, &t, &a).unwrap(), "file -> link");

    for (d1, d2) in [("d1", "d2"), ("t1", "t2")] {
        std::fs::create_dir_all(root.join(d1)).unwrap();
        std::fs::create_dir_all(root.join(d2)).unwrap();
        std::fs::write(root.join(d1).join("n.md"), "n").unwrap();
        std::fs::write(root.join(d2).join("n.md"), "n").unwrap();
    }
    let a = json!({"path": "d1/n.md", "dir": "t1"});
    let tree = Targets::Tree {
        root: "dir".into(),
        glob: "*.md".into(),
    };
    let (f1, t1) = (
        local_fp(&p, &t, &a).unwrap(),
        local_fp(&p, &tree, &a).unwrap(),
    );
    for d in ["d1", "t1"] {
        std::fs::remove_dir_all(root.join(d)).unwrap();
        std::os::unix::fs::symlink(d.replace('1', "2"), root.join(d)).unwrap();
    }
    assert_ne!(
        f1,
        local_fp(&p, &t, &a).unwrap(),
        "folder on the way -> link"
    );
    assert_ne!(t1, local_fp(&p, &tree, &a).unwrap(), "tree root -> link");
}

/// A folder `sub` with `a.md` holding `[[x]]` and `b.txt`; `tree` binds its `*.md`,
/// `matching` what holds `[[x]]` (the call's arguments `args`).
struct Scene {
    _d: tempfile::TempDir,
    root: std::path::PathBuf,
    p: Policy,
    tree: Targets,
    m: Targets,
    args: Value,
}

fn scene() -> Scene {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/a.md"), "links [[x]]").unwrap();
    std::fs::write(root.join("sub/b.txt"), "plain").unwrap();
    let p = policy(&root);
    let tree = Targets::Tree {
        root: "dir".into(),
        glob: "*.md".into(),
    };
    let m = Targets::Matching {
        root: "dir".into(),
        contains: "needle".into(),
    };
    let args = json!({"dir": "sub", "needle": "[[x]]"});
    Scene {
        _d: d,
        root,
        p,
        tree,
        m,
        args,
    }
}

#[test]
fn tree_and_matching() {
    // `_d` bound, not `..`: the folder lives as long as the test.
    let Scene {
        _d,
        root,
        p,
        tree,
        m,
        args,
    } = scene();
    let t1 = local_fp(&p, &tree, &args).unwrap();
    std::fs::write(root.join("sub/b.txt"), "changed").unwrap();
    assert_eq!(
        t1,
        local_fp(&p, &tree, &args).unwrap(),
        "non-matching file is not bound"
    );
    std::fs::write(root.join("sub/c.md"), "new").unwrap();
    assert_ne!(
        t1,
        local_fp(&p, &tree, &args).unwrap(),
        "added file is drift"
    );
    let m1 = local_fp(&p, &m, &args).unwrap();
    std::fs::write(root.join("sub/c.md"), "still no link").unwrap();
    assert_eq!(m1, local_fp(&p, &m, &args).unwrap());
    std::fs::write(root.join("sub/c.md"), "now [[x]]").unwrap();
    let m2 = local_fp(&p, &m, &args).unwrap();
    assert_ne!(m1, m2);

    // An empty value to look for is refused, not bound to nothing.
    let empty = json!({"dir": "sub", "needle": ""});
    assert!(matches!(
        local_fp(&p, &m, &empty),
        Err(TargetError::EmptyArg(a)) if a == "needle"
    ));
}

/// Links are state too (never followed): adding or retargeting one is drift.
#[test]
fn links_under_tree_and_matching_are_state() {
    // `_d` bound, not `..`: the folder lives as long as the test.
    let Scene {
        _d,
        root,
        p,
        tree,
        m,
        args,
    } = scene();
    std::fs::write(root.join("sub/b.txt"), "changed").unwrap();
    std::fs::write(root.join("sub/c.md"), "now [[x]]").unwrap();
    let m2 = local_fp(&p, &m, &args).unwrap();
    let t2 = local_fp(&p, &tree, &args).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("sub/l.md")).unwrap();
    let t3 = local_fp(&p, &tree, &args).unwrap();
    assert_ne!(t2, t3, "a matching link added is drift");
    assert_ne!(
        m2,
        local_fp(&p, &m, &args).unwrap(),
        "any link added is drift"
    );
    std::fs::remove_file(root.join("sub/l.md")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("sub/l.md")).unwrap();
    assert_ne!(t3, local_fp(&p, &tree, &args).unwrap(), "retargeted link");
    std::os::unix::fs::symlink("x", root.join("sub/l.txt")).unwrap();
    let t4 = local_fp(&p, &tree, &args).unwrap();
    std::fs::remove_file(root.join("sub/l.txt")).unwrap();
    assert_eq!(t4, local_fp(&p, &tree, &args).unwrap(), "non-matching link");
}

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .unwrap();
    kb.trim().parse::<u64>().unwrap() * 1024
}

#[test]
fn a_huge_file_is_hashed_in_bounded_memory() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    // Sparse: costs no disk, but reading it whole would cost 256 MiB of memory.
    let size = 256u64 << 20;
    std::fs::File::create(root.join("big.bin"))
        .unwrap()
        .set_len(size)
        .unwrap();
    let before = peak_rss();
    let st = fs::path_state(&p.fp_cache, &root.join("big.bin")).unwrap();
    let m = Targets::Matching {
        root: "dir".into(),
        contains: "needle".into(),
    };
    let fp = local_fp(&p, &m, &json!({"dir": ".", "needle": "x"})).unwrap();
    let grew = peak_rss().saturating_sub(before);
    assert_eq!(st["len"], size);
    assert!(tc_core::hash::is_sha256_hex(&fp));
    assert!(grew < 64 << 20, "peak memory grew by {grew} bytes");
}

#[test]
fn a_match_across_read_chunks_is_found() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    let m = Targets::Matching {
        root: "dir".into(),
        contains: "needle".into(),
    };
    let args = json!({"dir": ".", "needle": "[[link]]"});
    let none = local_fp(&p, &m, &args).unwrap();
    // The value straddles the 64 KiB read boundary.
    let mut content = vec![b'.'; (64 << 10) - 3];
    content.extend_from_slice(b"[[link]]");
    content.extend_from_slice(&[b'.'; 100]);
    std::fs::write(root.join("a.md"), &content).unwrap();
    assert_ne!(none, local_fp(&p, &m, &args).unwrap(), "straddling match");
    content[(64 << 10) - 3] = b'(';
    std::fs::write(root.join("a.md"), &content).unwrap();
    assert_eq!(none, local_fp(&p, &m, &args).unwrap(), "no match any more");
}

#[test]
fn same_size_and_mtime_but_new_content_is_drift() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    let t = Targets::Paths(vec!["path".into()]);
    let a = json!({"path": "f.txt"});
    let f = root.join("f.txt");
    std::fs::write(&f, "aaaa").unwrap();
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    let one = local_fp(&p, &t, &a).unwrap();
    std::fs::write(&f, "bbbb").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let m = std::fs::metadata(&f).unwrap();
    assert_eq!((m.len(), m.modified().unwrap()), (4, mtime));
    assert_ne!(one, local_fp(&p, &t, &a).unwrap());
}

#[test]
fn fifos_sockets_and_devices_are_never_opened_and_are_told_apart() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    nix::unistd::mkfifo(&root.join("sub/a.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let r = root.clone();
    std::thread::spawn(move || {
        let p = policy(&r);
        let kinds: Vec<Value> = ["fifo", "sock", "/dev/zero"]
            .iter()
            .map(|n| fs::path_state(&p.fp_cache, &r.join(n)).unwrap()["kind"].clone())
            .collect();
        let tree = Targets::Tree {
            root: "dir".into(),
            glob: "*".into(),
        };
        let fp = local_fp(&p, &tree, &json!({"dir": "sub"})).map(|_| ());
        tx.send((kinds, fp.is_ok())).unwrap();
    });
    let (kinds, tree_ok) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("fingerprinting special files must not block");
    assert_eq!(
        kinds,
        [json!("fifo"), json!("socket"), json!("char-device")]
    );
    assert!(tree_ok, "a FIFO in a walked tree is skipped, not opened");
}

#[test]
fn a_walk_counts_folders_against_the_cap() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy_with(&root, "max_target_files = 50\n");
    let max = p.max_target_files;
    assert_eq!(max, 50);
    for i in 0..=max {
        std::fs::create_dir(root.join(format!("d{i}"))).unwrap();
    }
    let tree = Targets::Tree {
        root: "dir".into(),
        glob: "*.md".into(),
    };
    assert!(matches!(
        local_fp(&p, &tree, &json!({"dir": "."})),
        Err(TargetError::TooMany(m)) if m == max
    ));
}

/// Names are bytes: two names that are not UTF-8 must not read as the same text,
/// or renaming one to the other is not drift.
#[test]
fn names_that_are_not_utf8_are_told_apart() {
    use std::os::unix::ffi::OsStrExt;
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    std::fs::create_dir(root.join("sub")).unwrap();
    let name = |b: &[u8]| root.join("sub").join(std::ffi::OsStr::from_bytes(b));
    std::fs::write(name(b"\xff.md"), "same").unwrap();
    let tree = Targets::Tree {
        root: "dir".into(),
        glob: "*.md".into(),
    };
    let listing = Targets::Paths(vec!["dir".into()]);
    let args = json!({"dir": "sub"});
    let t1 = local_fp(&p, &tree, &args).unwrap();
    let l1 = local_fp(&p, &listing, &args).unwrap();
    std::fs::rename(name(b"\xff.md"), name(b"\xfe.md")).unwrap();
    assert_ne!(t1, local_fp(&p, &tree, &args).unwrap(), "tree: renamed");
    assert_ne!(
        l1,
        local_fp(&p, &listing, &args).unwrap(),
        "listing: renamed"
    );
    // Valid UTF-8 names are bound as they are.
    assert_eq!(lossless(b"caf\xc3\xa9.md"), "café.md");
}

/// The streamed states are the documents they were: a tree's, a matching's and a
/// git target's fingerprint is SHA-256 of the canonical JSON of the same document.
#[test]
fn streamed_fingerprints_are_the_documents_they_were() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    std::fs::create_dir_all(root.join("s/a")).unwrap();
    std::fs::write(root.join("s/a/x.md"), "x [[k]]").unwrap();
    std::fs::write(root.join("s/a.md"), "a").unwrap();
    std::os::unix::fs::symlink("a.md", root.join("s/l.md")).unwrap();
    let sha = |rel: &str| sha256_hex(&std::fs::read(root.join(rel)).unwrap());
    let args = json!({"dir": "s", "needle": "[[k]]"});
    let tree = Targets::Tree {
        root: "dir".into(),
        glob: "*.md".into(),
    };
    let doc = json!({"glob": "*.md", "files": [
        ["a.md", sha("s/a.md")], ["a/x.md", sha("s/a/x.md")], ["l.md", "symlink:a.md"],
    ]});
    assert_eq!(local_fp(&p, &tree, &args).unwrap(), fp_of("tree", doc));
    let m = Targets::Matching {
        root: "dir".into(),
        contains: "needle".into(),
    };
    let doc = json!({"contains": "[[k]]", "files": [
        ["a/x.md", sha("s/a/x.md")], ["l.md", "symlink:a.md"],
    ]});
    assert_eq!(local_fp(&p, &m, &args).unwrap(), fp_of("matching", doc));
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let doc = json!({"head": "ref:refs/heads/main", "index": []});
    let g = Targets::Git(None);
    assert_eq!(local_fp(&p, &g, &args).unwrap(), fp_of("git", doc));
}

/// With every hash cached, a file rewritten to the same size and touched back to
/// its old mtime, or swapped for another with the same size and mtime, is drift.
#[test]
fn a_warm_cache_is_not_fooled_by_size_and_mtime() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root);
    for n in ["a", "b"] {
        std::fs::write(root.join(format!("{n}.md")), "aaaa").unwrap();
    }
    std::thread::sleep(cache::RACY + std::time::Duration::from_millis(200));
    let tree = Targets::Tree {
        root: "dir".into(),
        glob: "*.md".into(),
    };
    let paths = Targets::Paths(vec!["f".into()]);
    let args = json!({"dir": ".", "f": "a.md"});
    let (t0, p0) = (
        local_fp(&p, &tree, &args).unwrap(),
        local_fp(&p, &paths, &args).unwrap(),
    );
    assert_eq!(p.fp_cache.len(), 2, "both hashes are cached");
    let mtime = std::fs::metadata(root.join("a.md"))
        .unwrap()
        .modified()
        .unwrap();
    let back = |f: &std::path::Path| {
        let f = std::fs::File::options().write(true).open(f).unwrap();
        f.set_modified(mtime).unwrap();
    };
    std::fs::write(root.join("a.md"), "bbbb").unwrap();
    back(&root.join("a.md"));
    assert_ne!(
        t0,
        local_fp(&p, &tree, &args).unwrap(),
        "tree: touched back"
    );
    assert_ne!(
        p0,
        local_fp(&p, &paths, &args).unwrap(),
        "paths: touched back"
    );
    std::fs::write(root.join("a.md"), "aaaa").unwrap();
    assert_eq!(t0, local_fp(&p, &tree, &args).unwrap());
    std::fs::write(root.join("new"), "cccc").unwrap();
    back(&root.join("new"));
    std::fs::rename(root.join("new"), root.join("b.md")).unwrap();
    assert_ne!(t0, local_fp(&p, &tree, &args).unwrap(), "tree: replaced");
}

#[test]
fn probe_templating() {
    let t = json!({"names": "$entityNames", "fixed": "$", "n": [ "$k" ]});
    let a = json!({"entityNames": ["a", "b"], "k": 1});
    assert_eq!(
        probe_arguments(&t, &a),
        json!({"names": ["a", "b"], "fixed": "$", "n": [1]})
    );
}
