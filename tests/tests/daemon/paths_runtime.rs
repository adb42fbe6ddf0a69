//! End to end (issue 15, item 9): the shim finds the daemon when the MCP client scrubs
//! its environment. A real Python `mcp` SDK client spawns tc-shim with the SDK's default
//! environment (HOME, LOGNAME, PATH, SHELL, TERM, USER: no XDG_RUNTIME_DIR); tcd was
//! started with XDG_RUNTIME_DIR set, as systemd does. The shim must still reach tcd
//! through the user's own /run/user/<uid>.
//!
//! Needs /run/user/<uid> for the test's own uid: it uses the one that exists, or creates
//! it (root, as in CI) and removes it afterwards. Every other test names its socket
//! explicitly, so a /run/user/0 that exists for a while changes nothing for them.

use tc_tests::shim as support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;
use support::*;
use tc_tests::bin;

/// The user's runtime dir for the test; removes what it created.
struct RuntimeDir {
    dir: PathBuf,
    remove: Option<PathBuf>,
}

impl RuntimeDir {
    /// None (the test is skipped, saying why) when there is none and it cannot be made,
    /// or when a real tcd of this user may be using it.
    fn claim() -> Option<RuntimeDir> {
        let uid = nix::unistd::getuid().as_raw();
        let dir = PathBuf::from(format!("/run/user/{uid}"));
        let remove = if !dir.exists() {
            if std::fs::create_dir(&dir).is_err() {
                eprintln!("skipped: {} is missing and cannot be made", dir.display());
                return None;
            }
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            Some(dir.clone())
        } else if dir.join("tc").exists() {
            eprintln!(
                "skipped: {} is in use by a real tcd",
                dir.join("tc").display()
            );
            return None;
        } else {
            Some(dir.join("tc"))
        };
        Some(RuntimeDir { dir, remove })
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        if let Some(p) = &self.remove {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// tcd with XDG_RUNTIME_DIR set (and no socket in the config), killed on drop.
struct Tcd(Child);

impl Tcd {
    fn start(config: &Path, runtime: &Path) -> Tcd {
        let child = Command::new(bin("tcd"))
            .arg("--config")
            .arg(config)
            .arg("--ephemeral")
            .env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn tcd");
        let sock = runtime.join("tc/tcd.sock");
        wait_until("tcd's socket under XDG_RUNTIME_DIR", || {
            sock.exists().then_some(())
        });
        Tcd(child)
    }
}

impl Drop for Tcd {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

#[test]
fn a_client_with_a_scrubbed_environment_reaches_tcd() {
    let Some(rt) = RuntimeDir::claim() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("vault");
    std::fs::create_dir(&root).unwrap();
    let vault = Vault::filesystem("e").gate("write_file", r#"{ paths = ["path"] }"#);
    // No `socket`: every binary takes the default.
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\ncache_dir = {:?}\n\n{}",
            tmp.path().join("cache").display().to_string(),
            vault.toml().replace("$ROOT", &root.display().to_string())
        ),
    )
    .unwrap();
    let _tcd = Tcd::start(&config, &rt.dir);

    // The SDK passes the shim only its default environment (plus TC_LOG): no
    // XDG_RUNTIME_DIR, whatever this process has.
    let shim = vec![
        bin("tc-shim").display().to_string(),
        "serve".into(),
        "e".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let mut c = PyClient::start(&shim);
    let r = c.call("write_file", json!({"path": "a.md", "content": "x"}));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");

    // tcctl with the same scrubbed environment finds it too.
    let out = Command::new(bin("tcctl"))
        .arg("--config")
        .arg(&config)
        .arg("pending")
        .env_clear()
        .env("HOME", tmp.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("write_file"),
        "{out:?}"
    );
}
