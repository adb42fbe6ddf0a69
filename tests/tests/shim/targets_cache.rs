//! End to end: Python `mcp` client → real tc-shim → real server-filesystem, real tcd,
//! approvals through the real `tcctl elicit`: drift is seen with the stat cache warm.
//!
//! `move_file` (moving a folder) is gated by a `tree` (every file and link under the
//! folder) or a `matching` target. Each test ages its files past the racy window, raises
//! the request twice (the second fingerprint must read no file: the shim's debug log
//! says so, proving the cache warm), approves it, changes one thing, and checks that
//! the approved call is refused as drift with nothing moved.

use tc_tests::shim as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// The shim's racy window (targets/cache.rs `RACY`) plus a margin: files changed more
/// recently than this are never served from the cache, so the tests age theirs first.
const AGE: Duration = Duration::from_millis(2300);

fn env_with(targets: &str) -> Env {
    Env::with(&Vault::filesystem("fs").gate("move_file", targets))
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// The shim's argv with its fingerprint log on (`TC_LOG`), and the log file.
fn logged_shim(env: &Env) -> (Vec<String>, PathBuf) {
    let (mut argv, log) = env.shim_argv_logged("fs");
    // argv: sh -c <script> sh <log> <shim argv…>; `env` goes before the shim.
    argv.splice(
        5..5,
        [
            "env".to_string(),
            "TC_LOG=info,tc_shim::engine::judge::targets=debug".into(),
        ],
    );
    (argv, log)
}

/// The `read=` counts of the fingerprints the shim logged so far, once there are `n`.
fn reads(log: &Path, n: usize) -> Vec<usize> {
    wait_until(&format!("{n} fingerprints in {}", log.display()), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let got: Vec<usize> = text
            .lines()
            .filter(|l| l.contains("state fingerprint"))
            .filter_map(|l| l.split(" read=").nth(1)?.split(' ').next()?.parse().ok())
            .collect();
        (got.len() >= n).then_some(got)
    })
}

/// A fresh gated env with `files` under `inbox/`, aged; the shim running.
fn warm(targets: &str, files: &[(&str, &str)]) -> (Env, PyClient, PathBuf) {
    let mut env = env_with(targets);
    env.start_tcd();
    for (rel, content) in files {
        write(&env.root, &format!("inbox/{rel}"), content);
    }
    std::thread::sleep(AGE);
    let (argv, log) = logged_shim(&env);
    let c = PyClient::start(&argv);
    (env, c, log)
}

/// Raises twice (the second from the cache alone), approves, runs `change`, and checks
/// the approved call is drift: refused, nothing moved.
fn drift_with_cache_warm(targets: &str, files: &[(&str, &str)], change: impl FnOnce(&Path)) {
    let (env, mut c, log) = warm(targets, files);
    let args = json!({"source": "inbox", "destination": "archive"});
    let raise = |c: &mut PyClient| {
        let r = c.call("move_file", args.clone());
        assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
        r
    };
    let first = raise(&mut c);
    let second = raise(&mut c);
    let state = |r: &Value| sc(r)["details"]["state_fp"].clone();
    assert_eq!(state(&first), state(&second));
    let r = reads(&log, 2);
    assert_eq!(r[0], files.len(), "cold: every file read: {r:?}");
    assert_eq!(r[1], 0, "warm: no file read: {r:?}");

    let token = tcctl_elicit(&env, &second);
    change(&env.root.join("inbox"));
    let r = c.call("move_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
    assert!(env.root.join("inbox").is_dir() && !env.root.join("archive").exists());
    let kinds = event_kinds(&env.socket);
    assert_eq!(count(&kinds, "replay_drift"), 1, "{kinds:?}");
}

const TREE: &str = r#"{ tree = { root = "source", glob = "*" } }"#;
const FILES: &[(&str, &str)] = &[
    ("a.md", "alpha"),
    ("b.md", "bravo"),
    ("sub/c.md", "charlie"),
];

/// `touch -m -d @<the file's old mtime>`: the real tool, to the nanosecond.
fn touch_back(p: &Path, mtime: std::time::SystemTime) {
    let d = mtime.duration_since(std::time::UNIX_EPOCH).unwrap();
    let at = format!("@{}.{:09}", d.as_secs(), d.subsec_nanos());
    let ok = Command::new("touch")
        .args(["-m", "-d", &at])
        .arg(p)
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(std::fs::metadata(p).unwrap().modified().unwrap(), mtime);
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn targets_cache_a_changed_byte_is_drift() {
    drift_with_cache_warm(TREE, FILES, |d| {
        std::fs::write(d.join("b.md"), "bravO").unwrap();
    });
}

#[test]
fn targets_cache_a_file_touched_back_to_its_old_mtime_is_drift() {
    drift_with_cache_warm(TREE, FILES, |d| {
        let was = mtime(&d.join("sub/c.md"));
        std::fs::write(d.join("sub/c.md"), "CHARLIE").unwrap();
        touch_back(&d.join("sub/c.md"), was);
    });
}

#[test]
fn targets_cache_a_replaced_file_with_the_same_size_and_mtime_is_drift() {
    drift_with_cache_warm(TREE, FILES, |d| {
        let was = mtime(&d.join("a.md"));
        std::fs::write(d.join("a.new"), "ALPHA").unwrap();
        touch_back(&d.join("a.new"), was);
        std::fs::rename(d.join("a.new"), d.join("a.md")).unwrap();
        let m = std::fs::metadata(d.join("a.md")).unwrap();
        assert_eq!((m.len(), m.modified().unwrap()), (5, was));
    });
}

#[test]
fn targets_cache_a_new_file_under_the_tree_is_drift() {
    drift_with_cache_warm(TREE, FILES, |d| {
        std::fs::write(d.join("sub/new.md"), "new").unwrap();
    });
}

#[test]
fn targets_cache_a_removed_file_is_drift() {
    drift_with_cache_warm(TREE, FILES, |d| {
        std::fs::remove_file(d.join("b.md")).unwrap();
    });
}

#[test]
fn targets_cache_a_file_turned_into_a_link_is_drift() {
    // The link leads to identical bytes: only the change of kind tells them apart.
    drift_with_cache_warm(TREE, FILES, |d| {
        std::fs::write(d.join("sub/same"), "charlie").unwrap();
        std::fs::remove_file(d.join("sub/c.md")).unwrap();
        std::os::unix::fs::symlink("same", d.join("sub/c.md")).unwrap();
    });
}

/// `matching`: whether `b.md` contains the value was cached for its old content; its
/// new content (same size, mtime set back) does, and that is drift.
#[test]
fn targets_cache_matching_new_content_is_searched_again() {
    let targets = r#"{ matching = { root = "source", contains = "source" } }"#;
    let files = &[("a.md", "see inbox here"), ("b.md", "nothing!....")];
    drift_with_cache_warm(targets, files, |d| {
        let was = mtime(&d.join("b.md"));
        std::fs::write(d.join("b.md"), "see inbox!!!").unwrap();
        touch_back(&d.join("b.md"), was);
    });
}
