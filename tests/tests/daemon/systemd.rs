//! systemd integration of the real `tcd`: socket activation (`LISTEN_FDS`, driven by
//! systemd's own `systemd-socket-activate`) and `Type=notify` readiness (`READY=1`
//! sent to `NOTIFY_SOCKET` only once the socket answers).

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tc_tests::*;

#[test]
fn socket_activation_serves_the_inherited_socket_and_leaves_it_to_systemd() {
    let activate = std::path::Path::new("/usr/bin/systemd-socket-activate");
    assert!(
        activate.exists(),
        "systemd-socket-activate missing (Debian package systemd)"
    );
    let d = Daemon::prepared(DaemonOpts::default());
    std::fs::create_dir_all(d.socket.parent().unwrap()).unwrap();
    chmod(d.socket.parent().unwrap(), 0o700);
    let log = std::fs::File::create(d.dir.path().join("activated.stderr")).unwrap();
    let mut child = Command::new(activate)
        .arg("-l")
        .arg(&d.socket)
        .args(d.argv())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("systemd-socket-activate");
    // systemd-socket-activate binds first and starts tcd on the first connection.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = d.tcctl(&["status"]);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        out.status.success(),
        "tcctl status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = std::fs::read_to_string(d.dir.path().join("activated.stderr")).unwrap();
    assert!(stderr.contains("activated=true"), "{stderr}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_timeout(&mut child, Duration::from_secs(10)).expect("tcd exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    // The socket belongs to systemd: tcd must not remove it.
    assert!(d.socket.exists(), "an activated socket was removed by tcd");
}

#[test]
fn ready_is_notified_only_once_the_socket_answers() {
    let d = Daemon::prepared(DaemonOpts::default());
    let notify_path = d.dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut child = d
        .command()
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tcd");
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("tcd sent a notification");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    // Ready means ready: the socket answers right now, with no retry.
    let out = d.tcctl(&["status"]);
    assert!(
        out.status.success(),
        "not serving at READY: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
