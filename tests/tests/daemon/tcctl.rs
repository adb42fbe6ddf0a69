//! The real `tcctl` binary against the real `tcd`: elicit (refusals, pins, token on
//! stdout only), pending, events, status, metrics, rotate-secret, daemon not running.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tc_tests::*;

const V: &str = "notes";
const T: &str = "write_file";

fn out(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[track_caller]
fn assert_refused(o: &Output) -> String {
    let (stdout, stderr) = out(o);
    assert!(!o.status.success(), "expected failure: {o:?}");
    assert_eq!(stdout, "", "nothing on stdout when refused");
    assert!(!stderr.trim().is_empty(), "a message on stderr");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn elicit_refused_without_a_raised_request() {
    let d = Daemon::start();
    let hash = h("never raised");
    let o = d.tcctl(&["elicit", "--hash", &hash, "--tool", T, "--vault", V]);
    let err = assert_refused(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    let mut c = d.client().await;
    let minted = count_events(&mut c, "tc.elicit.minted").await;
    assert_eq!(minted, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn elicit_prints_only_a_working_token() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, "stdio", "tcctl elicit");
    let fp = h("fp");
    raise_summarised(&mut c, &b, &fp, "write notes/a.md").await;
    let o = d.tcctl(&["elicit", "--hash", &b.args_hash, "--tool", T, "--vault", V]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    let token = stdout.trim_end_matches('\n');
    assert!(!token.contains(char::is_whitespace), "{stdout:?}");
    assert!(token.starts_with("tct_"), "{stdout:?}");
    redeem(&mut c, token, &b, &fp).await.expect("redeem");
    refused(redeem(&mut c, token, &b, &fp).await, Reason::Spent);
}

#[tokio::test(flavor = "multi_thread")]
async fn elicit_caller_and_vault_must_match() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, "http:alice", "caller");
    let fp = h("fp");
    raise_summarised(&mut c, &b, &fp, "x").await;
    // Default caller is stdio: not the blocked one.
    assert_refused(&d.tcctl(&["elicit", "--hash", &b.args_hash, "--tool", T, "--vault", V]));
    assert_refused(&d.tcctl(&[
        "elicit",
        "--hash",
        &b.args_hash,
        "--tool",
        T,
        "--vault",
        "other",
        "--caller",
        "http:alice",
    ]));
    // The config lists no vaults: --vault is required.
    assert_refused(&d.tcctl(&[
        "elicit",
        "--hash",
        &b.args_hash,
        "--tool",
        T,
        "--caller",
        "http:alice",
    ]));
    let o = d.tcctl(&[
        "elicit",
        "--hash",
        &b.args_hash,
        "--tool",
        T,
        "--vault",
        V,
        "--caller",
        "http:alice",
    ]);
    assert!(o.status.success(), "{o:?}");
    let token = String::from_utf8(o.stdout).unwrap();
    redeem(&mut c, token.trim(), &b, &fp).await.expect("redeem");
}

#[tokio::test(flavor = "multi_thread")]
async fn elicit_state_fp_pin() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, "stdio", "pin");
    let (a, bb) = (h("A"), h("B"));
    raise_summarised(&mut c, &b, &a, "x").await;
    raise_summarised(&mut c, &b, &bb, "x").await;
    let elicit = |fp: &str| {
        d.tcctl(&[
            "elicit",
            "--hash",
            &b.args_hash,
            "--tool",
            T,
            "--vault",
            V,
            "--state-fp",
            fp,
        ])
    };
    assert_refused(&elicit(&a));
    assert_refused(&elicit(&h("never stored")));
    let o = elicit(&bb);
    assert!(o.status.success(), "{o:?}");
    let token = String::from_utf8(o.stdout).unwrap();
    redeem(&mut c, token.trim(), &b, &bb)
        .await
        .expect("redeem at B");
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_shows_the_summary() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, "stdio", "pending");
    raise_summarised(&mut c, &b, &h("fp"), "overwrite notes/todo.md (312 bytes)").await;
    let o = d.tcctl(&["pending"]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("overwrite notes/todo.md"), "{stdout}");
    assert!(stdout.contains(&b.args_hash), "{stdout}");
    let o = d.tcctl(&["pending", "--json"]);
    assert!(o.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["args_hash"], b.args_hash);
    assert_eq!(lines[0]["tool"], T);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_json_and_follow() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, "stdio", "events");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let o = d.tcctl(&["events", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let kinds: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["kind"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(kinds, ["tc.elicit.requested", "tc.elicit.minted"]);

    let mut follow = Command::new(bin("tcctl"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("--config")
        .arg(&d.config)
        .args(["events", "--json", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        lines.next().unwrap().unwrap();
    }
    redeem(&mut c, &token, &b, &fp).await.unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(lines.next());
    });
    let line = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("followed event in time")
        .unwrap()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["kind"], "tc.elicit.redeemed");
    follow.kill().unwrap();
    follow.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn status_metrics_and_rotate_secret() {
    let d = Daemon::start();
    let o = d.tcctl(&["status"]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains(&d.socket.display().to_string()), "{stdout}");

    let mut c = d.client().await;
    let b = binding(V, T, "stdio", "rotate");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let o = d.tcctl(&["metrics"]);
    let (stdout, stderr) = out(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("# TYPE")), "{stdout}");
    assert!(
        stdout
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .all(|l| l
                .rsplit_once(' ')
                .is_some_and(|(_, v)| v.parse::<f64>().is_ok())),
        "prometheus samples: {stdout}"
    );

    let o = d.tcctl(&["rotate-secret"]);
    assert!(o.status.success(), "{o:?}");
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Unknown);
    assert!(events(&mut c)
        .await
        .iter()
        .any(|e| e.kind == "tc.secret.rotated"));
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_not_running_is_explained() {
    let mut d = Daemon::start();
    d.stop();
    let t = Instant::now();
    let o = d.tcctl(&["status"]);
    let err = assert_refused(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains(&d.socket.display().to_string()), "{err}");
    assert!(err.contains("systemctl --user start tcd"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10));
    let o = d.tcctl(&["elicit", "--hash", &h("x"), "--tool", T, "--vault", V]);
    assert_refused(&o);
    assert_eq!(o.status.code(), Some(3));
}

/// A socket this user may not open is not "tcd is not running": tcd is running (here,
/// as another user, in its 0700 directory), and starting another one would not help.
#[tokio::test(flavor = "multi_thread")]
async fn a_socket_this_user_cannot_open_is_not_called_not_running() {
    // Only the socket's own directory (0700, tcd's) stops nobody.
    let Some((cmd, d)) = nobody_beside_a_daemon("run tcctl as nobody") else {
        return;
    };
    let o = tcctl_status_under(cmd, &d.socket);
    let err = assert_refused(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(!err.contains("not running"), "{err}");
    assert!(err.contains("ermission denied"), "{err}");
    assert!(err.contains(&d.socket.display().to_string()), "{err}");
}

/// Something that accepts and hangs up is a connection failure: the socket and how to
/// start tcd, exit 3 (the same help as when nothing listens at all).
#[tokio::test(flavor = "multi_thread")]
async fn a_socket_that_hangs_up_is_a_connection_failure() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tcd.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            drop(c);
        }
    });
    let o = Command::new(bin("tcctl"))
        .arg("--socket")
        .arg(&sock)
        .arg("--config")
        .arg("/dev/null")
        .arg("status")
        .output()
        .unwrap();
    let err = assert_refused(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains(&sock.display().to_string()), "{err}");
    assert!(err.contains("systemctl --user start tcd"), "{err}");
}

/// Runs tcctl against `d` with stdout a pipe whose reader is already gone (`| head`
/// that has exited): what tcctl does on EPIPE.
fn tcctl_into_closed_pipe(d: &Daemon, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(bin("tcctl"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("--config")
        .arg(&d.config)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// A reader that went away ends a listing quietly (exit 0, no panic on stderr); it was
/// a panic with a backtrace ("failed printing to stdout").
#[tokio::test(flavor = "multi_thread")]
async fn listings_into_a_closed_pipe_end_quietly() {
    let d = Daemon::start();
    for args in [
        &["status"][..],
        &["metrics"],
        &["pending"],
        &["events"],
        &["policy", "check"],
        &["completions", "bash"],
    ] {
        let o = tcctl_into_closed_pipe(&d, args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {o:?}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The token is the one output that must arrive: a minted token that could not be
/// written is a failure that says to mint again, not a silent exit 0.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_that_cannot_be_written_is_a_failure() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, "stdio", "closed pipe");
    raise_summarised(&mut c, &b, &h("fp"), "write notes/a.md").await;
    let o = tcctl_into_closed_pipe(
        &d,
        &["elicit", "--hash", &b.args_hash, "--tool", T, "--vault", V],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("could not be written"), "{stderr}");
    assert!(stderr.contains("tcctl elicit again"), "{stderr}");
}
