//! A private network namespace for one test (root only): the test binary re-executed
//! under `unshare --net`, loopback up and a veth pair holding [`ADDR`], a non-loopback
//! address nothing outside the namespace can reach (and the host's ports stay free).

use std::process::{Command, Stdio};

/// The namespace's network address (on `tc0`, one end of a veth pair).
pub const ADDR: &str = "10.77.0.1";
/// Marks the process re-executed inside the namespace.
const MARK: &str = "TC_NETNS";

/// Whether this process can make one (root, `unshare`, `ip` from iproute2).
pub fn can_run() -> bool {
    let has = |p: &str| {
        Command::new(p)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    nix::unistd::geteuid().is_root() && has("unshare") && has("ip")
}

/// Inside a new network namespace: `lo` up, and `tc0` (a veth pair's end) up with
/// [`ADDR`]/24.
pub fn set_up() {
    ip(&["link", "set", "lo", "up"]);
    // A veth pair: a dummy interface would do, where the kernel has the module.
    ip(&["link", "add", "tc0", "type", "veth", "peer", "name", "tc1"]);
    ip(&["addr", "add", &format!("{ADDR}/24"), "dev", "tc0"]);
    ip(&["link", "set", "tc0", "up"]);
    ip(&["link", "set", "tc1", "up"]);
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {}", args.join(" "));
}

/// Runs the calling test inside a new network namespace. Outside: re-executes this test
/// binary (`--exact name`) under `unshare --net`, asserts it passed and returns false (the
/// caller returns). Inside: brings up `lo` and `tc0` with [`ADDR`]/24 and returns true.
#[track_caller]
pub fn in_namespace(name: &str) -> bool {
    let name = &crate::test_path(std::panic::Location::caller().file(), name);
    if std::env::var_os(MARK).is_some() {
        set_up();
        return true;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let out = Command::new("unshare")
        .args(["--net", "--"])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(MARK, "1")
        .stdin(Stdio::null())
        .output()
        .expect("unshare");
    let all = crate::guarded::text(&out);
    assert!(
        out.status.success() && all.contains("1 passed"),
        "{name} in its network namespace:\n{all}"
    );
    false
}
