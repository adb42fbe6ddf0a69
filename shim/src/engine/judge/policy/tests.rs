//! Tests of the policy: resolving paths, `when` conditions, the ACL and floors; and
//! [`policy`], the one-vault policy other stages' tests build theirs with.

use super::*;
use serde_json::json;
use std::path::Path;

/// A policy for one vault `v` at `root`, `extra` added to its table.
pub(in crate::engine) fn policy(root: &Path, extra: &str) -> Policy {
    let text = format!(
        "[[vaults]]\nid = \"v\"\nroot = \"{}\"\n{extra}",
        root.display()
    );
    let c = tc_core::Config::parse(&text, Path::new("/t.toml")).unwrap();
    Policy::new(&c.vaults[0]).unwrap()
}

#[test]
fn a_rootless_remote_vault_discovers_no_paths_and_takes_only_absolute_ones() {
    let text = "[[vaults]]\nid = \"r\"\nurl = \"https://h/mcp\"\n[[vaults.gates]]\n\
                tool = \"commit\"\ntargets = { git = \"repo_path\" }\n";
    let c = tc_core::Config::parse(text, Path::new("/t.toml")).unwrap();
    let p = Policy::new(&c.vaults[0]).unwrap();
    let def = json!({"name": "read", "inputSchema": {"properties": {"path": {"type": "string"}}}});
    assert!(
        p.path_args("read", Some(&def), None).is_empty(),
        "the server's paths are not ours"
    );
    let specs = p.path_args("commit", None, p.gate_entry("commit"));
    assert_eq!(
        specs.len(),
        1,
        "the git target's argument is still a local path"
    );
    assert!(p.resolve("repo_path", "relative/repo").is_err());
    assert!(p.resolve("repo_path", "/srv/../etc").is_err());
    assert_eq!(
        p.resolve("repo_path", "/srv/repo").unwrap(),
        Path::new("/srv/repo")
    );
}

#[test]
fn resolves_and_refuses_escapes() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root, "");
    assert_eq!(p.resolve("path", "a/b.txt").unwrap(), root.join("a/b.txt"));
    assert_eq!(
        p.resolve("path", root.join("x").to_str().unwrap()).unwrap(),
        root.join("x")
    );
    assert!(matches!(
        p.resolve("path", "../x"),
        Err(PolicyError::InvalidInput { .. })
    ));
    assert!(p.resolve("path", "/etc/passwd").is_err());
    std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
    assert!(p.resolve("path", "out/passwd").is_err());
}

#[test]
fn when_conditions_and_acl() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::write(root.join("here.txt"), "x").unwrap();
    let p = policy(
        &root,
        "[[vaults.gates]]\ntool = \"move_file\"\nwhen = { cross_folder = [\"source\", \"destination\"] }\ntargets = { paths = [\"source\", \"destination\"] }\n\
         [[vaults.gates]]\ntool = \"write_file\"\nwhen = { exists = \"path\" }\ntargets = { paths = [\"path\"] }\n\
         [[vaults.gates]]\ntool = \"run\"\nwhen = { equals = { arg = \"mode\", value = \"force\" } }\ntargets = \"none\"\n\
         [vaults.acl]\ndeny = [\"private/**\"]\nread_only = [\"ro/**\"]\n",
    );
    let mv = p.gate_entry("move_file").unwrap();
    assert!(!p
        .applies(mv, &json!({"source": "a/x", "destination": "a/y"}))
        .unwrap());
    assert!(p
        .applies(mv, &json!({"source": "a/x", "destination": "b/x"}))
        .unwrap());
    let wf = p.gate_entry("write_file").unwrap();
    assert!(p.applies(wf, &json!({"path": "here.txt"})).unwrap());
    assert!(!p.applies(wf, &json!({"path": "new.txt"})).unwrap());
    let run = p.gate_entry("run").unwrap();
    assert!(p.applies(run, &json!({"mode": "force"})).unwrap());
    assert!(!p.applies(run, &json!({"mode": "soft"})).unwrap());
    let paths = p
        .resolve_all("t", None, &json!({"path": "private/k"}), None)
        .unwrap();
    assert!(matches!(
        p.check_acl(&paths, true),
        Err(PolicyError::Acl { list: "deny", .. })
    ));
    let paths = p
        .resolve_all("t", None, &json!({"path": "ro/k"}), None)
        .unwrap();
    assert!(p.check_acl(&paths, true).is_ok());
    assert!(p.check_acl(&paths, false).is_err());
}

/// `a/link.md -> ../b/report.md`: moving the link within `a` moves `b/report.md`
/// out of `b`; `when` is judged where the path leads too.
#[test]
fn when_conditions_see_through_links() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::write(root.join("b/report.md"), "r").unwrap();
    std::os::unix::fs::symlink("../b/report.md", root.join("a/link.md")).unwrap();
    std::os::unix::fs::symlink("b", root.join("bee")).unwrap();
    let p = policy(
        &root,
        "[[vaults.gates]]\ntool = \"mv\"\nwhen = { cross_folder = [\"source\", \"destination\"] }\ntargets = { paths = [\"source\", \"destination\"] }\n\
         [[vaults.gates]]\ntool = \"wf\"\nwhen = { equals = { arg = \"path\", value = \"b/report.md\" } }\ntargets = { paths = [\"path\"] }\n",
    );
    let mv = p.gate_entry("mv").unwrap();
    assert!(p
        .applies(
            mv,
            &json!({"source": "a/link.md", "destination": "a/report.md"})
        )
        .unwrap());
    // A folder link: `bee/report.md` is `b/report.md`, moved to `a`.
    assert!(p
        .applies(mv, &json!({"source": "a/x.md", "destination": "a/y.md"}))
        .is_ok_and(|g| !g));
    // Written folders differ, real ones do not: either saying so gates.
    assert!(p
        .applies(
            mv,
            &json!({"source": "b/report.md", "destination": "bee/r2.md"})
        )
        .unwrap());
    let wf = p.gate_entry("wf").unwrap();
    for raw in [
        "b/report.md",
        "./b/report.md",
        "b//report.md",
        "a/link.md",
        "bee/report.md",
    ] {
        assert!(p.applies(wf, &json!({"path": raw})).unwrap(), "{raw}");
    }
    assert!(!p.applies(wf, &json!({"path": "b/other.md"})).unwrap());
}

#[test]
fn refuses_home_paths() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(&root, "");
    for raw in ["~", "~/x", "~/vault/x.md", "~user/x"] {
        match p.resolve("path", raw) {
            Err(PolicyError::InvalidInput { why, .. }) => {
                assert!(why.contains("does not expand home directories"), "{why}")
            }
            other => panic!("{raw}: {other:?}"),
        }
    }
    // Only a leading `~` is special (server-filesystem expands only that).
    assert_eq!(p.resolve("path", "a/~b").unwrap(), root.join("a/~b"));
}

#[test]
fn unicode_equivalent_names_resolve_to_the_real_entry() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let nfc = "caf\u{e9}";
    let nfd = "cafe\u{301}";
    std::fs::create_dir(root.join(nfc)).unwrap();
    std::fs::write(root.join(nfc).join(format!("{nfc}.md")), "x").unwrap();
    let p = policy(
        &root,
        "[[vaults.gates]]\ntool = \"write_file\"\nwhen = { exists = \"path\" }\ntargets = { paths = [\"path\"] }\n",
    );
    let real = root.join(nfc).join(format!("{nfc}.md"));
    assert_eq!(p.resolve("path", &format!("{nfd}/{nfd}.md")).unwrap(), real);
    // A new file under an equivalent folder keeps its own name, under the real folder.
    assert_eq!(
        p.resolve("path", &format!("{nfd}/new.md")).unwrap(),
        root.join(nfc).join("new.md")
    );
    let wf = p.gate_entry("write_file").unwrap();
    assert!(p
        .applies(wf, &json!({"path": format!("{nfc}/{nfd}.md")}))
        .unwrap());
    // Two existing spellings equivalent to a third: ambiguous, refused.
    std::fs::write(root.join("\u{1ec7}"), "a").unwrap();
    std::fs::write(root.join("e\u{323}\u{302}"), "b").unwrap();
    assert!(matches!(
        p.resolve("path", "\u{ea}\u{323}"),
        Err(PolicyError::Name {
            why: crate::engine::judge::policy::NameError::Ambiguous { .. },
            ..
        })
    ));
    // Told as before the error was typed: the argument, then why, with the folder.
    let e = p.resolve("path", "\u{ea}\u{323}").unwrap_err().to_string();
    assert!(
        e.starts_with("argument \"path\": ")
            && e.contains(" is ambiguous in : several entries")
            && e.ends_with("use the exact name"),
        "{e}"
    );
}

#[test]
fn equals_compares_numbers_by_value() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let p = policy(
        &root,
        "[[vaults.gates]]\ntool = \"t\"\nwhen = { equals = { arg = \"depth\", value = 1 } }\ntargets = \"none\"\n\
         [[vaults.gates]]\ntool = \"b\"\nwhen = { equals = { arg = \"force\", value = true } }\ntargets = \"none\"\n",
    );
    let t = p.gate_entry("t").unwrap();
    assert!(p.applies(t, &json!({"depth": 1})).unwrap());
    assert!(p.applies(t, &json!({"depth": 1.0})).unwrap());
    assert!(!p.applies(t, &json!({"depth": 1.5})).unwrap());
    assert!(!p.applies(t, &json!({"depth": "1"})).unwrap());
    let b = p.gate_entry("b").unwrap();
    assert!(p.applies(b, &json!({"force": true})).unwrap());
    assert!(!p.applies(b, &json!({"force": "true"})).unwrap());
}

#[test]
fn array_arguments_count_every_element() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::write(root.join("keep.md"), "x").unwrap();
    let p = policy(
        &root,
        "[[vaults.gates]]\ntool = \"del\"\nwhen = { exists = \"paths\" }\ntargets = { paths = [\"paths\"] }\n\
         [[vaults.gates]]\ntool = \"mv\"\nwhen = { cross_folder = [\"source\", \"destination\"] }\ntargets = { paths = [\"source\", \"destination\"] }\n",
    );
    let del = p.gate_entry("del").unwrap();
    assert!(p
        .applies(del, &json!({"paths": ["nope.md", "keep.md"]}))
        .unwrap());
    assert!(!p
        .applies(del, &json!({"paths": ["nope.md", "gone.md"]}))
        .unwrap());
    assert!(matches!(
        p.applies(del, &json!({"paths": ["keep.md", "../x"]})),
        Err(PolicyError::InvalidInput { .. })
    ));
    let mv = p.gate_entry("mv").unwrap();
    assert!(p
        .applies(mv, &json!({"source": ["a/x", "b/y"], "destination": "a/z"}))
        .unwrap());
    assert!(!p
        .applies(mv, &json!({"source": ["a/x", "a/y"], "destination": "a/z"}))
        .unwrap());
    assert!(p
        .applies(mv, &json!({"source": "a/x", "destination": ["a/y", "c/y"]}))
        .unwrap());
    assert!(matches!(
        p.applies(
            mv,
            &json!({"source": ["a/x", "/etc/x"], "destination": "a/z"})
        ),
        Err(PolicyError::InvalidInput { .. })
    ));
}

#[test]
fn acl_follows_symlinks_inside_the_root() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::create_dir(root.join("private")).unwrap();
    std::fs::write(root.join("private/secret.md"), "s").unwrap();
    std::os::unix::fs::symlink("private", root.join("link")).unwrap();
    let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
    for raw in ["link/secret.md", "link/new.md"] {
        let paths = p
            .resolve_all("t", None, &json!({"path": raw}), None)
            .unwrap();
        assert!(
            matches!(
                p.check_acl(&paths, true),
                Err(PolicyError::Acl { list: "deny", .. })
            ),
            "{raw}"
        );
    }
    std::fs::write(root.join("open.md"), "o").unwrap();
    std::os::unix::fs::symlink("open.md", root.join("alias.md")).unwrap();
    let paths = p
        .resolve_all("t", None, &json!({"path": "alias.md"}), None)
        .unwrap();
    assert!(p.check_acl(&paths, true).is_ok());
}

/// A symlink whose target does not exist yet leads where a write through it would
/// create the file: out of the root is an escape, into a denied folder is denied.
#[test]
fn dangling_symlinks_are_judged_by_their_target() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap().join("vault");
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::os::unix::fs::symlink("../outside/new.md", root.join("out")).unwrap();
    std::os::unix::fs::symlink("nowhere/../../x.md", root.join("sneaky")).unwrap();
    std::os::unix::fs::symlink("private/new.md", root.join("in")).unwrap();
    std::os::unix::fs::symlink("loop_b", root.join("loop_a")).unwrap();
    std::os::unix::fs::symlink("loop_a", root.join("loop_b")).unwrap();
    let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
    for raw in ["out", "sneaky", "loop_a"] {
        assert!(
            matches!(
                p.resolve("path", raw),
                Err(PolicyError::InvalidInput { .. })
            ),
            "{raw}: {:?}",
            p.resolve("path", raw)
        );
    }
    assert_denied(&p, "in");
}

/// The call `t(path)` resolves, and the ACL's `deny` refuses it.
#[track_caller]
fn assert_denied(p: &Policy, path: &str) {
    let paths = p
        .resolve_all("t", None, &json!({ "path": path }), None)
        .unwrap();
    assert!(
        matches!(
            p.check_acl(&paths, true),
            Err(PolicyError::Acl { list: "deny", .. })
        ),
        "{paths:?}"
    );
}

/// Attacker's read of grants (grants-attack branch): a dangling link whose target has
/// `..` after a symlinked folder. `notes/lx` → `../private/sub/../../notes/x.md` with
/// `private/sub` → `d1/d2`: read as text it is notes/x.md; the kernel steps through
/// `private/sub` first and a write lands in private/notes/x.md, which the ACL denies and
/// no `notes/**` grant covers. It was judged (ACL and grants) as notes/x.md.
#[test]
fn a_dangling_link_is_walked_as_the_kernel_walks_it_not_read_as_text() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap().join("vault");
    for dir in ["notes", "private/d1/d2", "private/notes"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink("d1/d2", root.join("private/sub")).unwrap();
    let target = "../private/sub/../../notes/x.md";
    std::os::unix::fs::symlink(target, root.join("notes/lx")).unwrap();
    let real = super::resolve::real_path(&root.join("notes/lx")).unwrap();
    assert_eq!(real, root.join("private/notes/x.md"));
    let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
    assert_denied(&p, "notes/lx");
}

#[test]
fn folder_globs_cover_the_folder_itself() {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    std::fs::create_dir(root.join("private")).unwrap();
    let p = policy(
        &root,
        "[vaults.acl]\ndeny = [\"private/**\"]\nread_only = [\"**/ro/**\"]\n",
    );
    for raw in ["private", "private/", "./private"] {
        let paths = p
            .resolve_all("t", None, &json!({"path": raw}), None)
            .unwrap();
        match p.check_acl(&paths, true) {
            Err(PolicyError::Acl { list, glob, .. }) => {
                assert_eq!((list, glob.as_str()), ("deny", "private/**"))
            }
            other => panic!("{raw}: {other:?}"),
        }
    }
    let paths = p
        .resolve_all("t", None, &json!({"path": "privateer/x"}), None)
        .unwrap();
    assert!(p.check_acl(&paths, true).is_ok());
    let paths = p
        .resolve_all("t", None, &json!({"path": "a/ro"}), None)
        .unwrap();
    assert!(p.check_acl(&paths, true).is_ok());
    assert!(p.check_acl(&paths, false).is_err());
}

#[test]
fn floors_and_hint() {
    let def = json!({"name": "write_file", "annotations": {"destructiveHint": true},
        "inputSchema": {"properties": {"path": {}, "content": {}}}});
    assert!(is_floor(Some(&def)));
    assert!(!is_floor(Some(&json!({"name": "x"}))));
    assert_eq!(
        missing_gate_hint("write_file", Some(&def)),
        "[[vaults.gates]] tool = \"write_file\" targets = { paths = [\"path\"] }"
    );
}
