//! Storage faults under the real `tcd` and tc-shim: the cache dir's disk fills up while
//! the daemon runs, is full at its first start, or is read-only. The daemon refuses
//! clearly (a non-zero exit naming the problem, or refusals that say "disk full or
//! read-only"), gated calls fail closed, nothing panics, and once space is back the
//! same confirmation works.
//!
//! The cache dir is a small tmpfs mounted by the test (needs root; else skipped with the
//! reason printed). Downstream: `slow_server.py` (stdlib Python).

use tc_tests::shim as support;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use support::*;

use super::shim::{calls_of, shred_approved, slow_env};

/// A tmpfs mounted on a test directory; lazily unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a `size_kb` tmpfs on `dir`, or says why it cannot.
    fn mount(dir: &Path, size_kb: u32) -> Result<Tmpfs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("mounting a tmpfs needs root".into());
        }
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kb}k,mode=0700")])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }

    fn remount(&self, opt: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,{opt}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(st.success(), "remount {opt}");
    }

    /// Fills every free page with `filler`.
    fn fill(&self) {
        let mut f = File::create(self.0.join("filler")).unwrap();
        let page = [0u8; 4096];
        loop {
            match f.write(&page) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(nix::libc::ENOSPC), "{e}");
                    break;
                }
            }
        }
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

macro_rules! tmpfs_or_skip {
    ($dir:expr, $kb:expr) => {
        match Tmpfs::mount($dir, $kb) {
            Ok(t) => t,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        }
    };
}

/// Runs `tcd` (keyed) expecting it to refuse to start; returns its stderr.
fn tcd_refuses(env: &mut Env) -> String {
    env.tcd.opts.ephemeral = false;
    let (st, text) = env.tcd.start_refused();
    assert!(!st.success() && st.code().is_some(), "{st}\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(!env.socket.exists(), "no socket left behind");
    text
}

/// How many `shred`s reached the downstream.
fn shreds(root: &Path) -> usize {
    calls_of(root, "shred")
}

/// Ungated works, gated fails closed because no daemon is there.
fn gated_unavailable(c: &mut RawClient, id: u64, env: &Env) {
    let r = c.call_tool(id, "peek", json!({"name": "a"}));
    assert_eq!(code(&r), None, "{r}");
    let r = c.call_tool(id + 1, "shred", json!({"name": "a"}));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    assert_eq!(shreds(&env.root), 0);
}

#[test]
fn faults_disk_full_while_running_refuses_writes_fails_closed_and_recovers() {
    let mut env = slow_env();
    let fs = tmpfs_or_skip!(&env.cache, 4096);
    env.start_tcd_keyed();
    let (mut c, a, token) = shred_approved(&env, "a");

    fs.fill();
    let r = c.call_tool(2, "peek", a.clone());
    assert_eq!(code(&r), None, "ungated calls do not need the disk: {r}");
    // Redeeming must write (the spend): refused, nothing forwarded, the token unspent.
    // The answer says what failed and that the token is still good (no fresh approval).
    let r = c.call_tool(3, "shred", with_token(&a, &token));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "daemon_error", "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("disk full or read-only")
            && text.contains("NOT run")
            && text.contains("stays valid")
            && !text.contains("WITHOUT elicit_token"),
        "{text}"
    );
    // Raising a new request must write too: refused the same way, not an elicit_required.
    let r = c.call_tool(4, "shred", json!({"name": "c"}));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    assert_text_at(&r, "/content/0/text", "disk full or read-only");
    assert_eq!(shreds(&env.root), 0);
    assert!(env.root.join("items/a").exists());
    // The daemon is still up and answers what needs no write.
    assert!(env.tcd.try_wait().is_none());
    let status = env.tcd.tcctl(&["status"]);
    assert!(status.status.success(), "{status:?}");

    // Space comes back: the same token authorizes the call, once.
    fs.free();
    let r = c.call_tool(5, "shred", with_token(&a, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(r["content"][0]["text"], "shredded a", "{r}");
    let r = c.call_tool(6, "shred", with_token(&a, &token));
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(shreds(&env.root), 1);
    env.stop_tcd();
    let log = std::fs::read_to_string(env.tcd.latest_stderr_path()).unwrap();
    assert!(!log.contains("panicked"), "{log}");
    assert!(log.contains("database cannot be written"), "{log}");
    let db = rusqlite::Connection::open(env.cache.join("cache.db")).unwrap();
    let ic: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ic, "ok");
}

#[test]
fn faults_disk_full_at_first_start_refuses_clearly_then_starts_once_freed() {
    let mut env = slow_env();
    let fs = tmpfs_or_skip!(&env.cache, 256);
    fs.fill();
    let text = tcd_refuses(&mut env);
    assert!(text.contains("No space left on device"), "{text}");
    let mut c = RawClient::start(&env.shim_argv("slow"));
    c.initialize();
    gated_unavailable(&mut c, 1, &env);

    // Freed: the half-made first start left nothing that blocks the next one.
    fs.free();
    env.start_tcd_keyed();
    let r = c.call_tool(3, "shred", json!({"name": "a"}));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
}

#[test]
fn faults_read_only_cache_dir_refuses_clearly_and_the_token_survives() {
    let mut env = slow_env();
    let fs = tmpfs_or_skip!(&env.cache, 4096);
    env.start_tcd_keyed();
    let (first_client, a, token) = shred_approved(&env, "a");
    drop(first_client);
    env.stop_tcd();

    // A running tcd keeps its database open for writing, so the kernel refuses to remount
    // under it (EBUSY): read-only is met at start, e.g. after a reboot into a broken mount.
    fs.remount("ro");
    let text = tcd_refuses(&mut env);
    assert!(
        text.contains(&env.cache.join("cache.db").display().to_string()),
        "the error names the database: {text}"
    );
    assert!(
        text.contains("is not writable: EROFS"),
        "the error says why: {text}"
    );
    let mut c = RawClient::start(&env.shim_argv("slow"));
    c.initialize();
    gated_unavailable(&mut c, 2, &env);
    let r = c.call_tool(4, "shred", with_token(&a, &token));
    assert_eq!(code(&r).as_deref(), Some("confirmation_unavailable"), "{r}");
    assert_eq!(shreds(&env.root), 0);

    fs.remount("rw");
    env.start_tcd_keyed();
    let r = c.call_tool(5, "shred", with_token(&a, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(shreds(&env.root), 1);
}
