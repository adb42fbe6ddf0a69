//! The `tcd` process: file modes, stale and live sockets, signals, restarts, `kill -9`
//! in the middle of redeems, and peers with another uid.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tc_proto::v1;
use tc_tests::*;

#[tokio::test(flavor = "multi_thread")]
async fn socket_secret_and_directory_modes() {
    let d = Daemon::start();
    assert_eq!(mode(&d.socket), 0o600, "socket");
    assert_eq!(mode(d.socket.parent().unwrap()), 0o700, "socket dir");
    assert_eq!(mode(&d.cache_dir), 0o700, "cache dir");
    let secrets = d.cache_dir.join("server-secrets");
    assert_eq!(mode(&secrets), 0o700, "server-secrets dir");
    let key = secrets.join("server.key");
    assert_eq!(mode(&key), 0o600, "server.key");
    assert!(d.stderr().contains("elicit:"), "{}", d.stderr());
    assert!(d.stderr().contains("server-secrets"), "{}", d.stderr());
    // Personal mode says, where the operator looks first, what it does not stop.
    assert!(
        d.stderr().contains("mode: personal (an agent with a shell"),
        "{}",
        d.stderr()
    );
    let mut c = d.client().await;
    let st = c.status(v1::StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(st.protocol, tc_proto::PROTOCOL);
    assert_eq!(st.mode, "personal");
    assert!(!st.ephemeral);
    assert_eq!(st.socket, d.socket.display().to_string());
    // The database holds token hashes, raised requests and the audit log: only this uid
    // reads it, whatever the umask tcd was started with (the test runner's is usually 022).
    for f in ["cache.db", "cache.db-wal", "cache.db-shm"] {
        assert_eq!(mode(&d.cache_dir.join(f)), 0o600, "{f}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn secret_is_created_once_and_reused() {
    let mut d = Daemon::start();
    let key = d.cache_dir.join("server-secrets/server.key");
    let before = std::fs::read(&key).unwrap();
    d.restart();
    assert_eq!(std::fs::read(&key).unwrap(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_socket_is_removed_at_start() {
    let mut d = Daemon::prepared(DaemonOpts::default());
    let run = d.socket.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&run).unwrap();
    chmod(&run, 0o700);
    drop(std::os::unix::net::UnixListener::bind(&d.socket).unwrap());
    assert!(d.socket.exists(), "a dead socket file is left behind");
    d.start_again();
    let mut c = d.client().await;
    c.status(v1::StatusRequest {})
        .await
        .expect("serves on the old path");
    assert!(d.stderr().contains("stale"), "{}", d.stderr());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_in_the_way_is_not_replaced() {
    let d = Daemon::prepared(DaemonOpts::default());
    let run = d.socket.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&run).unwrap();
    chmod(&run, 0o700);
    std::fs::write(&d.socket, "precious").unwrap();
    let out = d.command().output().unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&d.socket).unwrap(), "precious");
}

#[tokio::test(flavor = "multi_thread")]
async fn second_daemon_on_the_same_socket_is_refused() {
    let d = Daemon::start();
    let out = d.command().stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already running"), "{err}");
    // The first one is unharmed, its socket still in place.
    let mut c = d.client().await;
    c.status(v1::StatusRequest {})
        .await
        .expect("first still serves");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_and_sigint_remove_the_socket() {
    let mut d = Daemon::start();
    let st = d.stop();
    assert!(st.success(), "exit {st}");
    assert!(!d.socket.exists(), "socket removed on SIGTERM");
    d.start_again();
    let st = d.signal(nix::sys::signal::Signal::SIGINT);
    assert!(st.success(), "exit {st}");
    assert!(!d.socket.exists(), "socket removed on SIGINT");
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_keeps_tokens_raised_requests_and_events() {
    let mut d = Daemon::start();
    let b = binding("notes", "write_file", "stdio", "restart");
    let fp = h("fp");
    let b2 = binding("notes", "write_file", "stdio", "raised only");
    let (token, n_events) = {
        let mut c = d.client().await;
        let token = raise_and_mint(&mut c, &b, &fp).await;
        raise_summarised(&mut c, &b2, &fp, "pending across restart").await;
        (token, events(&mut c).await)
    };
    d.kill9();
    d.start_again();
    let mut c = d.client().await;
    let after = events(&mut c).await;
    assert_eq!(after, n_events, "events survive");
    let pending = c
        .list_pending(v1::ListPendingRequest::default())
        .await
        .unwrap()
        .into_inner()
        .requests;
    assert!(pending
        .iter()
        .any(|p| p.binding.as_ref() == Some(&b2) && p.summary == "pending across restart"));
    c.mint(v1::MintRequest {
        binding: Some(b2.clone()),
        state_fp: Some(fp.clone()),
        ..Default::default()
    })
    .await
    .expect("raised request survives");
    redeem(&mut c, &token, &b, &fp)
        .await
        .expect("token survives");
    d.restart();
    let mut c = d.client().await;
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Spent);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Before {
    NotTried,
    Ok,
    Lost,
}

/// SIGKILL at a random moment in a redeem loop, restart, re-redeem everything: nothing
/// reported redeemed comes back, nothing redeems twice, the database is intact.
#[tokio::test(flavor = "multi_thread")]
async fn kill9_mid_redeem_never_double_spends() {
    const N: usize = 400;
    const LOOPS: usize = 4;
    let mut d = Daemon::start();
    let fp = h("fp");
    let mut c = d.client().await;
    let mut tokens = Vec::new();
    for i in 0..N {
        let b = binding("notes", "write_file", "stdio", &format!("k{i}"));
        let t = raise_and_mint(&mut c, &b, &fp).await;
        tokens.push((b, t));
    }
    let tokens = Arc::new(tokens);
    let done = Arc::new(AtomicUsize::new(0));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize;
    let kill_at = N / 8 + nanos % (N / 2);
    let pid = nix::unistd::Pid::from_raw(d.pid() as i32);
    let killer = {
        let done = done.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while done.load(Ordering::SeqCst) < kill_at && Instant::now() < deadline {
                std::hint::spin_loop();
            }
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        })
    };
    let mut tasks = Vec::new();
    for l in 0..LOOPS {
        let tokens = tokens.clone();
        let done = done.clone();
        let fp = fp.clone();
        let mut c = d.client().await;
        tasks.push(tokio::spawn(async move {
            let mut out = HashMap::new();
            for i in (l..N).step_by(LOOPS) {
                let (b, t) = &tokens[i];
                match redeem(&mut c, t, b, &fp).await {
                    Ok(_) => {
                        out.insert(i, Before::Ok);
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(s) if reason_of(&s).is_some() => {
                        panic!("token {i} refused before the kill: {s:?}")
                    }
                    Err(_) => {
                        // Transport error: the kill happened; the outcome is unknown.
                        out.insert(i, Before::Lost);
                        break;
                    }
                }
            }
            out
        }));
    }
    let mut before = vec![Before::NotTried; N];
    for t in tasks {
        for (i, r) in t.await.unwrap() {
            before[i] = r;
        }
    }
    killer.join().unwrap();
    d.kill9();
    let oks = before.iter().filter(|b| **b == Before::Ok).count();
    assert!(
        oks >= kill_at && oks < N,
        "killed mid-loop: {oks} ok of {N}"
    );
    d.start_again();
    let mut c = d.client().await;
    let mut ok_after = 0;
    for (i, (b, t)) in tokens.iter().enumerate() {
        let r = redeem(&mut c, t, b, &fp).await;
        match before[i] {
            Before::Ok => {
                refused(r, Reason::Spent);
            }
            Before::Lost => match r {
                Ok(_) => ok_after += 1,
                Err(s) => assert_eq!(reason_of(&s), Some(Reason::Spent), "{s:?}"),
            },
            Before::NotTried => {
                r.unwrap_or_else(|s| panic!("token {i} was never redeemed: {s:?}"));
                ok_after += 1;
            }
        }
    }
    // Every token is now spent, and each was redeemed exactly once in the log.
    for (b, t) in tokens.iter() {
        refused(redeem(&mut c, t, b, &fp).await, Reason::Spent);
    }
    let redeemed = count_events(&mut c, "tc.elicit.redeemed").await;
    assert_eq!(redeemed, N, "{oks} before, {ok_after} after");
    d.stop();
    let db = rusqlite::Connection::open(d.cache_dir.join("cache.db")).unwrap();
    let ic: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ic, "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_with_another_uid_is_refused() {
    let Some((mut cmd, d)) = nobody_beside_a_daemon("run a client as nobody") else {
        return;
    };
    // Make the socket reachable by nobody after startup (tcd tightens only at start),
    // so the refusal under test is SO_PEERCRED, not file permissions.
    chmod(d.socket.parent().unwrap(), 0o711);
    chmod(&d.socket, 0o666);
    let out = cmd
        .arg(env!("CARGO_BIN_EXE_tc-redeemer"))
        .arg("status")
        .arg(&d.socket)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("err PermissionDenied"),
        "stdout {stdout:?} stderr {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = d.client().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let denied = loop {
        let ev = events(&mut c).await;
        if let Some(e) = ev.into_iter().find(|e| e.kind == "tc.auth.denied") {
            break e;
        }
        assert!(Instant::now() < deadline, "no tc.auth.denied event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let detail: serde_json::Value = serde_json::from_str(&denied.detail_json).unwrap();
    assert_eq!(detail["uid"], 65534, "{detail}");
    // Our own uid is still served.
    c.status(v1::StatusRequest {}).await.expect("owner served");
    // The same through tcctl: a failure, nothing on stdout.
    if have_bin("tcctl") {
        let out = tcctl_status_under(as_nobody().unwrap(), &d.socket);
        assert!(!out.status.success(), "{out:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn loose_directories_are_tightened_at_start() {
    let mut d = Daemon::prepared(DaemonOpts::default());
    let run = d.socket.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(&d.cache_dir).unwrap();
    chmod(&run, 0o755);
    chmod(&d.cache_dir, 0o777);
    d.start_again();
    assert_eq!(mode(&run), 0o700);
    assert_eq!(mode(&d.cache_dir), 0o700);
    assert_eq!(mode(&d.socket), 0o600);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_readable_secret_file_is_refused() {
    let mut d = Daemon::start();
    d.stop();
    let key = d.cache_dir.join("server-secrets/server.key");
    chmod(&key, 0o644);
    let out = d.command().stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "tcd must not start with a 0644 key");
    assert!(!d.socket.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_symlinked_socket_directory_is_refused() {
    let d = Daemon::prepared(DaemonOpts::default());
    let real = d.dir.path().join("elsewhere");
    std::fs::create_dir(&real).unwrap();
    chmod(&real, 0o700);
    std::os::unix::fs::symlink(&real, d.socket.parent().unwrap()).unwrap();
    let out = d.command().stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symlink"), "{err}");
}

/// `tcctl events --follow` against `d`, returned once it has printed its first event
/// (so its stream is open on the daemon), with its stdout kept open.
fn following_tcctl(d: &Daemon) -> (std::process::Child, impl Sized) {
    use std::io::BufRead;
    let mut child = Command::new(bin("tcctl"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("--config")
        .arg(&d.config)
        .args(["events", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tcctl");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("read tcctl");
    assert!(line.contains("tc.elicit.requested"), "{line:?}");
    (child, out)
}

/// SIGTERM while clients keep connections open: a following `tcctl events --follow`
/// (a stream that never ends), the same stopped with SIGSTOP (it can answer nothing, not
/// even h2 GOAWAY/PING), and a raw socket that never spoke h2. tcd must still exit 0 and
/// remove its socket; before the fix it waited for those connections forever.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_despite_open_and_stopped_clients() {
    let mut d = Daemon::prepared(DaemonOpts::default());
    let mut tcd = d.spawn_child();
    let mut c = d.client().await;
    let b = binding("notes", "write_file", "stdio", "shutdown");
    raise_summarised(&mut c, &b, &h("fp"), "an event for the followers").await;
    let (mut follower, _follower_out) = following_tcctl(&d);
    let (mut stopped, _stopped_out) = following_tcctl(&d);
    let stopped_pid = nix::unistd::Pid::from_raw(stopped.id() as i32);
    nix::sys::signal::kill(stopped_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let _silent = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();

    let pid = nix::unistd::Pid::from_raw(tcd.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let st = wait_timeout(&mut tcd, Duration::from_secs(20));
    if st.is_none() {
        let _ = tcd.kill();
        let _ = tcd.wait();
    }
    nix::sys::signal::kill(stopped_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    for child in [&mut follower, &mut stopped] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let st = st.expect("tcd did not exit on SIGTERM with clients connected");
    assert!(st.success(), "exit {st}");
    assert!(!d.socket.exists(), "socket removed on SIGTERM");
    drop(c);
}
