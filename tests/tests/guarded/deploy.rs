//! Guarded mode's deployment through the real binaries, as root: tcd as its own system
//! user from a root-owned /etc/tc/config.toml, who may call what (by SO_PEERCRED uid),
//! clients that cannot be pointed anywhere else nor fooled by an impostor daemon, state
//! the human cannot read, and the shim's gates taken from tcd (tighten-only).
//! Each scenario runs in its own mount namespace (see tests/src/guarded.rs).

use tc_tests::guarded;
use tc_tests::security as security_support;

use std::path::Path;

use guarded::*;
use serde_json::{json, Value};

const PROBE: &str = "probe";

/// Not a test of its own: the body [`rpc_as`] re-executes as another uid.
#[test]
fn probe() {
    probe_main();
}

fn skip() -> bool {
    if !can_run() {
        eprintln!("skipped: needs root, setpriv, unshare, useradd and mount");
        return true;
    }
    false
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// tcd refuses to start guarded from a config file or directory anyone but root can
/// write (or a symlink), or as another user than `daemon_user`; it starts from a
/// 0755-root directory and a 0644-root file, as the daemon user.
#[test]
fn guarded_tcd_starts_only_from_a_root_owned_config_as_the_daemon_user() {
    if skip() {
        return;
    }
    let t = open_tempdir();
    let d = user(DAEMON);
    user(HUMAN);
    let etc = t.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    chmod(&etc, 0o755);
    let cfg = etc.join("config.toml");
    std::fs::write(&cfg, system_head()).unwrap();
    chmod(&cfg, 0o644);
    let run_dir = owned_dir(t.path(), "run", &d, 0o755);
    let state = owned_dir(t.path(), "state", &d, 0o700);
    let tcd = |config: &Path| {
        let mut c = as_user(&d, t.path(), bin("tcd"));
        c.arg("--config")
            .arg(config)
            .arg("--socket")
            .arg(run_dir.join("tcd.sock"))
            .arg("--cache-dir")
            .arg(&state);
        c
    };
    chmod(&cfg, 0o664);
    let e = refused_start(tcd(&cfg));
    assert!(
        e.contains("refusing to start guarded") && e.contains("mode 0664"),
        "{e}"
    );
    chmod(&cfg, 0o644);
    chmod(&etc, 0o775);
    let e = refused_start(tcd(&cfg));
    assert!(e.contains("etc: mode 0775"), "{e}");
    chmod(&etc, 0o755);
    std::os::unix::fs::chown(&cfg, Some(d.uid), None).unwrap();
    let e = refused_start(tcd(&cfg));
    assert!(e.contains(&format!("owned by uid {}", d.uid)), "{e}");
    std::os::unix::fs::chown(&cfg, Some(0), None).unwrap();
    let link = etc.join("link.toml");
    std::os::unix::fs::symlink(&cfg, &link).unwrap();
    let e = refused_start(tcd(&link));
    assert!(e.contains("symlink"), "{e}");
    // Root is not the daemon user the clients check for.
    let mut as_root = tcd(&cfg);
    as_root = {
        let argv: Vec<_> = as_root.get_args().skip(4).map(|a| a.to_owned()).collect();
        let mut c = std::process::Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    let e = refused_start(as_root);
    assert!(e.contains("daemon_user"), "{e}");
    // The good layout serves, with the socket reachable by everyone (0666 in a 0755
    // directory the daemon user owns): SO_PEERCRED decides, not file modes.
    let sock = run_dir.join("tcd.sock");
    let p = spawn_serving(tcd(&cfg), t.path().join("tcd.log"), &sock);
    assert_eq!(tc_tests::mode(&sock), 0o666);
    assert_eq!(tc_tests::mode(&run_dir), 0o755);
    assert_eq!(tc_tests::mode(&state), 0o700);
    assert!(p.stderr().contains("guarded mode"), "{}", p.stderr());
}

/// By uid: the human may use tcd but not enroll, rotate or read the audit log; root
/// may do everything; another uid may do nothing and is audited (`tc.auth.denied`);
/// the human cannot read tcd's state. `tcctl status` names the mode.
#[test]
fn who_may_do_what() {
    if skip() || !in_namespace("who_may_do_what") {
        return;
    }
    let d = Deployment::start("");
    let sock = Path::new(tc_core::guarded::SYSTEM_SOCKET);
    let out = d.tcctl_as_human(&["status"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("mode:       guarded"),
        "{}",
        text(&out)
    );

    // ListEvents: a human follows their own events (the service filters by uid).
    for m in [
        "Status",
        "Counters",
        "GetPolicy",
        "ListPending",
        "ListEvents",
    ] {
        let r = rpc_as(&d.human, &d.home, PROBE, sock, m);
        assert_eq!(r.code, "Ok", "human {m}: {r:?}");
    }
    // Each of `methods`, called by `user`, is refused by the permission check itself.
    let not_permitted = |who: &str, user: &User, home: &Path, methods: &[&str]| {
        for m in methods {
            let r = rpc_as(user, home, PROBE, sock, m);
            assert_eq!(
                (r.code.as_str(), r.reason.as_str()),
                ("PermissionDenied", "not_permitted"),
                "{who} {m}"
            );
        }
    };
    not_permitted(
        "human",
        &d.human,
        &d.home,
        &["EnrollFactor", "UnlockFactor", "RotateSecret"],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    for m in ["RotateSecret", "ListEvents", "EnrollFactor", "UnlockFactor"] {
        // Root passes the gate (the factor RPCs may then refuse on their own terms).
        let r = rt.block_on(call(m, sock));
        if let Err(s) = r {
            assert_ne!(s.code(), tonic::Code::PermissionDenied, "root {m}: {s:?}");
        }
    }
    not_permitted(
        "other",
        &d.other,
        &d.other_home,
        &["Status", "GetPolicy", "ListPending"],
    );
    let out = run({
        let mut c = as_user(&d.other, &d.other_home, bin("tcctl"));
        c.arg("status");
        c
    });
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(stderr(&out).contains("not_permitted"), "{}", text(&out));
    // The human's tcctl says so too; root's works. The human's `events` is their own:
    // the refusals of other uids are the daemon's, root's to read.
    let out = d.tcctl_as_human(&["rotate-secret"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(stderr(&out).contains("only root"), "{}", text(&out));
    let out = d.tcctl_as_human(&["events", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!stdout(&out).contains("tc.auth.denied"), "{}", text(&out));
    let out = d.tcctl_as_root(&["events", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let denied: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "tc.auth.denied")
        .collect();
    for (uid, method) in [
        (d.other.uid, "/tc.v1.Confirm/GetPolicy"),
        (d.human.uid, "/tc.v1.Confirm/EnrollFactor"),
    ] {
        let logged = denied
            .iter()
            .any(|e| e["detail"]["uid"] == json!(uid) && e["detail"]["method"] == method);
        assert!(logged, "{uid} {method}: {denied:?}");
    }

    // /var/lib/tc is the daemon user's alone.
    let names: Vec<String> = std::fs::read_dir("/var/lib/tc")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "cache.db"), "{names:?}");
    for target in [
        "/var/lib/tc",
        "/var/lib/tc/cache.db",
        "/var/lib/tc/server-secrets",
    ] {
        let mut c = as_user(&d.human, &d.home, "cat");
        c.arg(target);
        let out = run(c);
        assert!(!out.status.success(), "{target}: {}", text(&out));
        assert!(
            stderr(&out).contains("Permission denied"),
            "{target}: {}",
            text(&out)
        );
    }
    let mut c = as_user(&d.human, &d.home, "ls");
    c.arg("/var/lib/tc");
    let out = run(c);
    assert!(stderr(&out).contains("Permission denied"), "{}", text(&out));
}

/// Under a guarded /etc/tc, `--socket`, `--config`, `TC_CONFIG` and a user file's
/// `daemon.socket` are refused by name; a personal tcd the human starts is never used;
/// an impostor on /run/tc/tcd.sock (a real tcd, as the human) is refused.
#[test]
fn clients_cannot_be_pointed_anywhere_else() {
    if skip() || !in_namespace("clients_cannot_be_pointed_anywhere_else") {
        return;
    }
    let mut d = Deployment::start("");
    // The human's own personal tcd, on a socket of theirs.
    let mine = owned_dir(d.tmp.path(), "mine", &d.human, 0o700);
    let personal_cfg = mine.join("personal.toml");
    std::fs::write(&personal_cfg, "").unwrap();
    let my_sock = mine.join("run/tcd.sock");
    let (human, home) = (d.human.clone(), d.home.clone());
    let personal = |sock: &Path| {
        let mut c = as_user(&human, &home, bin("tcd"));
        c.arg("--config")
            .arg(&personal_cfg)
            .arg("--socket")
            .arg(sock)
            .arg("--cache-dir")
            .arg(mine.join("state"))
            .arg("--ephemeral");
        c
    };
    let p = spawn_serving(personal(&my_sock), mine.join("p.log"), &my_sock);
    let sock_flag = my_sock.display().to_string();
    let cfg_flag = personal_cfg.display().to_string();
    for (args, named) in [
        (
            vec!["--socket", &sock_flag, "status"],
            format!("--socket {sock_flag}"),
        ),
        (
            vec!["--config", &cfg_flag, "status"],
            format!("--config {cfg_flag}"),
        ),
    ] {
        let out = d.tcctl_as_human(&args);
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", text(&out));
        let e = stderr(&out);
        assert!(
            e.contains(&named) && e.contains("not allowed") && e.contains("guarded"),
            "{e}"
        );
    }
    let mut c = as_user(&d.human, &d.home, bin("tcctl"));
    c.arg("status").env("TC_CONFIG", &personal_cfg);
    let out = run(c);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!("TC_CONFIG={cfg_flag}")),
        "{}",
        text(&out)
    );
    // The shim refuses the same way.
    for flag in ["--socket", "--config"] {
        let mut c = as_user(&d.human, &d.home, bin("tc-shim"));
        let v = if flag == "--socket" {
            &sock_flag
        } else {
            &cfg_flag
        };
        c.args(["serve", "v", flag, v]);
        let out = run(c);
        assert!(!out.status.success(), "{}", text(&out));
        assert!(
            stderr(&out).contains(&format!("{flag} {v}")),
            "{}",
            text(&out)
        );
    }
    // A user file pointing daemon.socket at the personal tcd: refused, naming the key.
    d.write_user_config(&format!("[daemon]\nsocket = \"{sock_flag}\"\n"));
    let out = d.tcctl_as_human(&["status"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(stderr(&out).contains("daemon.socket"), "{}", text(&out));
    d.remove_user_config();
    // Plain tcctl talks to the guarded tcd, whatever the human's tcd is doing.
    let out = d.tcctl_as_human(&["status"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("mode:       guarded") && stdout(&out).contains("/run/tc/tcd.sock"),
        "{}",
        text(&out)
    );
    drop(p);

    // An impostor: the human's tcd (a real one) on /run/tc/tcd.sock. (The human cannot
    // write /run/tc; root hands it over to play the case the uid check is for.)
    d.stop_tcd();
    std::os::unix::fs::chown("/run/tc", Some(d.human.uid), Some(d.human.gid)).unwrap();
    let sys_sock = Path::new(tc_core::guarded::SYSTEM_SOCKET);
    let _fake = spawn_serving(personal(sys_sock), mine.join("fake.log"), sys_sock);
    let out = d.tcctl_as_human(&["status"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let e = stderr(&out);
    assert!(
        e.contains(&format!("served by uid {}", d.human.uid)) && e.contains("refusing to trust"),
        "{e}"
    );
    let mut c = as_user(&d.human, &d.home, bin("tc-shim"));
    c.args(["serve", "v"]);
    let out = run(c);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(stderr(&out).contains("refusing to trust"), "{}", text(&out));
}

fn echo_vaults(root: &Path) -> String {
    let server = tc_tests::workspace().join("tests/fixtures/echo_server.py");
    let vault = |id: &str| {
        format!(
            "[[vaults]]\nid = \"{id}\"\nroot = \"{}\"\ncommand = [\"python3\", \"{}\"]\n",
            root.display(),
            server.display()
        )
    };
    format!(
        "{}[[vaults.gates]]\ntool = \"hello\"\ntargets = \"none\"\n{}",
        vault("echo"),
        vault("open")
    )
}

/// One `tools/call hello` through a tc-shim run as the human for `vault`: the result,
/// or the shim's refusal to start (its stderr).
fn call_hello(d: &Deployment, vault: &str) -> Result<Value, String> {
    let log = d.tmp.path().join(format!("shim-{vault}.log"));
    let _ = std::fs::remove_file(&log);
    let c = as_user(&d.human, &d.home, bin("tc-shim"));
    let mut argv: Vec<String> = std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // Shim::start inherits the test's environment: pass the human's through `env`.
    let at = argv.iter().position(|a| a == "--").unwrap() + 1;
    let env = [
        "env",
        "-u",
        "TC_CONFIG",
        "-u",
        "XDG_CONFIG_HOME",
        "-u",
        "XDG_RUNTIME_DIR",
    ];
    let home = format!("HOME={}", d.home.display());
    for (i, a) in env.iter().chain([&home.as_str()]).enumerate() {
        argv.insert(at + i, a.to_string());
    }
    argv.extend(["serve".into(), vault.into()]);
    let mut s = security_support::Shim::start(&argv, "info", Some(&log));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.call("1", "hello", json!({"who": "boss"}))
    }));
    match r {
        Ok(v) => Ok(v),
        Err(_) => {
            let _ = s.child.wait();
            Err(std::fs::read_to_string(&log).unwrap_or_default())
        }
    }
}

fn gated(r: &Value) -> bool {
    r["structuredContent"]["code"].is_string() && r["isError"] == true
}

/// The shim takes its gates from tcd: a user file that drops a gate does not loosen it,
/// one that adds a `when` or changes the command is refused by key, one that adds a gate
/// tightens; and the file in /etc/tc rewritten under a running tcd changes nothing.
#[test]
fn the_shim_takes_its_gates_from_tcd() {
    if skip() || !in_namespace("the_shim_takes_its_gates_from_tcd") {
        return;
    }
    let t = open_tempdir();
    let root = t.path().join("vault");
    std::fs::create_dir(&root).unwrap();
    chmod(&root, 0o755);
    let d = Deployment::start(&echo_vaults(&root));
    let r = call_hello(&d, "echo").unwrap();
    assert!(gated(&r), "system gate: {r}");
    let r = call_hello(&d, "open").unwrap();
    assert!(!gated(&r), "no gate on open: {r}");

    // Dropping the gate in the user's own file: still gated.
    d.write_user_config("[[vaults]]\nid = \"echo\"\n");
    assert!(gated(&call_hello(&d, "echo").unwrap()));
    // Adding a `when` to it: refused, naming the key.
    d.write_user_config(
        "[[vaults]]\nid = \"echo\"\n[[vaults.gates]]\ntool = \"hello\"\nwhen = { equals = { arg = \"who\", value = \"nobody\" } }\ntargets = \"none\"\n",
    );
    let e = call_hello(&d, "echo").unwrap_err();
    assert!(
        e.contains("vaults[0].gates[0]") && e.contains("when"),
        "{e}"
    );
    // Another command for the vault: refused, naming the key.
    d.write_user_config("[[vaults]]\nid = \"echo\"\ncommand = [\"python3\", \"-c\", \"pass\"]\n");
    let e = call_hello(&d, "echo").unwrap_err();
    assert!(e.contains("vaults[0].command"), "{e}");
    // A vault of the user's own: refused.
    d.write_user_config("[[vaults]]\nid = \"mine\"\nroot = \"/\"\n");
    let e = call_hello(&d, "echo").unwrap_err();
    assert!(e.contains("vaults[0].id") && e.contains("mine"), "{e}");
    // Adding a gate tightens.
    d.write_user_config(
        "[[vaults]]\nid = \"open\"\n[[vaults.gates]]\ntool = \"hello\"\ntargets = \"none\"\n",
    );
    assert!(gated(&call_hello(&d, "open").unwrap()));
    d.remove_user_config();

    // The policy is tcd's: /etc/tc rewritten without the gate (tcd not restarted) does
    // not ungate the call.
    write_system_config(&format!(
        "{}{}",
        system_head(),
        echo_vaults(&root).replace(
            "[[vaults.gates]]\ntool = \"hello\"\ntargets = \"none\"\n",
            ""
        )
    ));
    assert!(gated(&call_hello(&d, "echo").unwrap()));
}

/// `systemd/tcd-guarded.service` keeps the user unit's hardening, adds the system
/// service's, runs as `tc` with private state and a reachable runtime directory, and
/// passes `systemd-analyze verify` (where it exists); `systemd/tc.sysusers` makes `tc`.
#[test]
fn the_guarded_unit_and_sysusers_entry() {
    let ws = tc_tests::workspace();
    let unit = std::fs::read_to_string(ws.join("systemd/tcd-guarded.service")).unwrap();
    let user_unit = std::fs::read_to_string(ws.join("systemd/tcd.service")).unwrap();
    let keys: Vec<(&str, &str)> = unit
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect();
    let has = |k: &str, v: &str| keys.iter().any(|(a, b)| *a == k && *b == v);
    for (k, v) in [
        ("User", "tc"),
        ("StateDirectory", "tc"),
        ("StateDirectoryMode", "0700"),
        ("RuntimeDirectory", "tc"),
        ("RuntimeDirectoryMode", "0755"),
        ("ConfigurationDirectory", "tc"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateDevices", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX"),
        ("CapabilityBoundingSet", ""),
        (
            "ExecStart",
            "/usr/local/bin/tcd --config /etc/tc/config.toml",
        ),
    ] {
        assert!(has(k, v), "{k}={v} missing");
    }
    // Every hardening key of the user unit is kept (ProtectHome tightened to yes;
    // ReadWritePaths are the user's %S/%t, replaced by State/RuntimeDirectory).
    for l in user_unit
        .lines()
        .skip_while(|l| !l.starts_with("# Hardening"))
    {
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        if ["ProtectHome", "ReadWritePaths", "WantedBy"].contains(&k) {
            continue;
        }
        assert!(has(k, v), "user unit's {k}={v} is not kept");
    }
    assert!(
        !keys.iter().any(|(k, _)| *k == "PrivateUsers"),
        "breaks SO_PEERCRED"
    );
    if let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .iter()
        .find(|p| Path::new(p).exists())
    {
        let t = tempfile::tempdir().unwrap();
        let copy = t.path().join("tcd-guarded.service");
        let tcd = bin("tcd").display().to_string();
        std::fs::write(&copy, unit.replace("/usr/local/bin/tcd", &tcd)).unwrap();
        let out = std::process::Command::new(analyze)
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify: {}",
            text(&out)
        );
    }
    if let Some(sysusers) = ["/usr/bin/systemd-sysusers", "/bin/systemd-sysusers"]
        .iter()
        .find(|p| Path::new(p).exists())
    {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("etc")).unwrap();
        let out = std::process::Command::new(sysusers)
            .arg(format!("--root={}", t.path().display()))
            .arg(ws.join("systemd/tc.sysusers"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let passwd = std::fs::read_to_string(t.path().join("etc/passwd")).unwrap();
        assert!(
            passwd
                .lines()
                .any(|l| l.starts_with("tc:") && l.contains(":/var/lib/tc:")),
            "{passwd}"
        );
    }
}
