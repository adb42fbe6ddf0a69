//! Issue 16's judged-by scenario, as root through the real binaries: tcd as its daemon user
//! from a root-owned /etc/tc/config.toml, a gate on server-filesystem's write_file, the
//! human's TOTP enrolled by root on a pty, then an AGENT running as the human's uid
//! WITHOUT the secret tries every way around the gate, and the human, with codes this
//! test computes from the enrolled secret, approves once. Each test runs in its own
//! mount namespace (tests/src/guarded.rs).

use tc_tests::elicit;
use tc_tests::guarded;
use tc_tests::shim as support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use guarded::{as_user, on_pty as pty, owned_dir, run, text, write, Scene, Setup, User};
use guarded::{printed as all, PYTHON};
use serde_json::Value;
use support::{bin, code, filesystem_server, sc};
use tc_tests::pty::{right_code, wrong_code};

/// tcctl's exit codes.
const FAILURE: i32 = 1;
const REFUSED: i32 = 4;
/// Marks this binary re-executed as another uid to call Approve with guessed codes.
const PROBE: &str = "TC_AGENT_PROBE";

/// A guarded deployment with vault `fs` (server-filesystem, write_file gated, legacy
/// in-protocol prompts on) over a root the human owns, holding note.txt = "v0", for the
/// test `name` in its namespace (None: the test returns).
#[track_caller]
fn scene(name: &str) -> Option<Scene> {
    let setup = Setup {
        legacy_prompts: true,
        ..Setup::default()
    };
    setup.start_in_namespace(name, &[PYTHON])
}

/// What the agent and the human do at tcctl and tcd's socket, besides the agent's calls.
trait AtTheTerminal {
    fn tcctl_as(&self, u: &User, home: &Path, args: &[&str]) -> Output;
    fn approve_on_pty(&self, u: &User, home: &Path, id: &str, code: &str) -> (i32, String);
    fn elicit_on_pty(&self, cmd: &str, typed: &str) -> (i32, String);
    fn approve_rpc_as(&self, u: &User, home: &Path, id: &str, codes: &[String]) -> Vec<String>;
}

impl AtTheTerminal for Scene {
    /// `tcctl args` as `u`, in a new session: no controlling terminal.
    fn tcctl_as(&self, u: &User, home: &Path, args: &[&str]) -> Output {
        let mut c = as_user(u, home, "setsid");
        c.arg("-w").arg(bin("tcctl")).args(args);
        run(c)
    }

    /// `tcctl approve ID` on a pty as `u`, answering y and `code`; a refusal for the
    /// wrong-code delay (the code was not checked) is retried.
    fn approve_on_pty(&self, u: &User, home: &Path, id: &str, code: &str) -> (i32, String) {
        let tcctl = bin("tcctl").display().to_string();
        for _ in 0..50 {
            let mut p = pty(Some((u, home)), &[&tcctl, "approve", id]);
            p.wait_for("Approve this call? [y/N] ");
            p.type_line("y");
            p.wait_for("Code from your authenticator app: ");
            p.type_line(code);
            let (rc, out) = p.finish();
            assert!(!out.contains(code), "the code was echoed:\n{out}");
            if !out.contains("factor_delay") {
                return (rc, out);
            }
        }
        panic!("always refused for the delay");
    }

    /// The exact `tcctl elicit` line `cmd` on a pty as the human, who types `typed`.
    fn elicit_on_pty(&self, cmd: &str, typed: &str) -> (i32, String) {
        let mut words: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        words[0] = bin("tcctl").display().to_string();
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        for _ in 0..50 {
            let mut p = pty(Some((&self.d.human, &self.d.home)), &args);
            p.wait_for("[y/N]");
            p.type_line("y");
            p.wait_for("6-digit code");
            p.type_line(typed);
            let (rc, out) = p.finish();
            if !out.contains("factor_delay") {
                return (rc, out);
            }
        }
        panic!("always refused for the delay");
    }

    /// The Approve RPC of request `id` with each of `codes` in turn, made by this test
    /// binary re-executed as `u` (the agent's own gRPC client: no terminal involved);
    /// the refusal reason of each ("-" for success).
    fn approve_rpc_as(&self, u: &User, home: &Path, id: &str, codes: &[String]) -> Vec<String> {
        let exe = std::env::current_exe().unwrap();
        let mut c = as_user(u, home, exe);
        c.args([
            "--exact",
            &tc_tests::test_path(file!(), "agent_probe"),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PROBE, format!("{id} {}", codes.join(" ")));
        let out = run(c);
        let v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split("APPROVE-RESULT ").nth(1))
            .map(String::from)
            .collect();
        assert_eq!(v.len(), codes.len(), "{}", text(&out));
        v
    }
}

/// The request id of a guarded `elicit_required` refusal; returns it and the exact
/// `tcctl elicit` line of its recovery.
#[track_caller]
fn refused_id(r: &Value) -> (String, String) {
    let id = guarded::refused_id(r);
    let s = sc(r);
    assert_eq!(
        s["recovery"]["approve"],
        format!("tcctl approve {id}"),
        "{r}"
    );
    let cmd = s["recovery"]["command"].as_str().unwrap().to_string();
    assert!(cmd.starts_with("tcctl elicit --hash "), "{cmd}");
    (id, cmd)
}

/// Not a test of its own: what [`AtTheTerminal::approve_rpc_as`] runs as another uid.
#[test]
fn agent_probe() {
    let Ok(spec) = std::env::var(PROBE) else {
        return;
    };
    let mut words = spec.split(' ');
    let id = words.next().unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for code in words {
        let reason = rt.block_on(async {
            let sock = Path::new(tc_core::guarded::SYSTEM_SOCKET);
            let ch = tc_proto::connect(sock).await.expect("connect");
            let mut c = tc_proto::v1::confirm_client::ConfirmClient::new(ch);
            loop {
                let r = c
                    .approve(tc_proto::v1::ApproveRequest {
                        request_id: id.clone(),
                        factor: Some(tc_proto::v1::Factor { totp: code.into() }),
                        ..Default::default()
                    })
                    .await;
                match r {
                    Ok(_) => return "-".to_string(),
                    Err(s) => match tc_proto::reason(&s).map(|r| r.to_string()) {
                        // The delay refuses without checking the code: wait it out.
                        Some(r) if r == "factor_delay" => {
                            tokio::time::sleep(Duration::from_millis(20)).await
                        }
                        r => return r.unwrap_or_else(|| format!("{:?}", s.code())),
                    },
                }
            }
        });
        println!("APPROVE-RESULT {reason}");
    }
}

/// Items 1, 5 and 7 of the agent, then the human: the exact `tcctl elicit` line and
/// `tcctl approve` without a terminal, without a code, with a wrong code, with `--yes`;
/// its own in-protocol accept; all refused and nothing written. A uid not in `humans`
/// is refused with a valid code, which the human then uses: the identical retry runs
/// once, the next is refused, and the agent replaying the used code is refused and
/// raises `tc.factor.replayed`.
#[test]
fn an_agent_cannot_approve_and_the_human_approves_once() {
    let Some(s) = scene("an_agent_cannot_approve_and_the_human_approves_once") else {
        return;
    };
    let secret = s.enroll();
    let (human, home) = (&s.d.human, &s.d.home);
    let mut agent = s.agent();
    let (id, cmd) = refused_id(&agent.call_tool(1, "write_file", write("v1")));

    // The exact elicit line, in a new session without a terminal, even the right code on
    // the pipe (never read from there, never sent).
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let mut c = as_user(human, home, "setsid");
    c.arg("-w").arg(bin("tcctl")).args(&words[1..]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let piped = right_code(&secret);
    // tcctl may refuse (no terminal) before the code is written: a closed pipe is fine,
    // it is never read from there either way.
    let _ = writeln!(child.stdin.take().unwrap(), "{piped}");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(REFUSED), "{}", all(&o));
    assert!(
        all(&o).contains("no terminal") && o.stdout.is_empty(),
        "{}",
        all(&o)
    );
    // `tcctl approve ID` without a terminal, and with --yes.
    let o = s.tcctl_as(human, home, &["approve", &id]);
    assert_eq!(o.status.code(), Some(FAILURE), "{}", all(&o));
    assert!(all(&o).contains("no terminal"), "{}", all(&o));
    let o = s.tcctl_as(human, home, &["approve", &id, "--yes"]);
    assert_eq!(o.status.code(), Some(FAILURE), "{}", all(&o));
    assert!(
        all(&o).contains("--yes is refused in guarded mode"),
        "{}",
        all(&o)
    );
    assert_eq!(
        s.events("tc.factor.failed"),
        0,
        "nothing reached the factor"
    );
    // On a pty: no code, then a wrong one, to both commands.
    let (rc, out) = s.elicit_on_pty(&cmd, "");
    assert!(rc == REFUSED && out.contains("no code"), "{out}");
    let (rc, out) = s.elicit_on_pty(&cmd, &wrong_code(&secret, 1));
    assert!(rc == REFUSED && out.contains("factor_invalid"), "{out}");
    let (rc, out) = s.approve_on_pty(human, home, &id, &wrong_code(&secret, 2));
    assert!(rc == REFUSED && out.contains("factor_invalid"), "{out}");
    assert_eq!(s.events("tc.factor.failed"), 2);
    assert_eq!(s.events("tc.minted"), 0);

    // Its own in-protocol prompt, answered accept + approve=true: not approved.
    let mut h = elicit::Human::python("legacy", &s.d.shim_argv("fs", &[], &[]));
    let (prompt, r) = h.call_answering("write_file", write("v1"), elicit::approve());
    assert!(
        prompt["message"].as_str().unwrap().contains("guarded mode"),
        "{prompt}"
    );
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    drop(h);
    let r = agent.call_tool(2, "write_file", write("v1"));
    assert_eq!(
        refused_id(&r).0,
        id,
        "still the same request, still pending"
    );
    assert_eq!(s.note(), "v0");
    assert_eq!(s.events("tc.elicit.approved"), 0);

    // A uid not in `humans`, with the valid code of the moment: refused, by tcctl on a
    // pty and by its own Approve RPC; the code is not spent (the human uses it next).
    let code_t = right_code(&secret);
    let (other, other_home) = (&s.d.other, &s.d.other_home);
    let tcctl = bin("tcctl").display().to_string();
    let mut p = pty(Some((other, other_home)), &[&tcctl, "approve", &id]);
    p.type_line("y");
    p.type_line(&code_t);
    let (rc, out) = p.finish();
    assert!(rc == REFUSED && out.contains("not_permitted"), "{out}");
    let r = s.approve_rpc_as(other, other_home, &id, std::slice::from_ref(&code_t));
    assert_eq!(r, ["not_permitted"]);

    // The human approves with it, once; the identical retry runs once.
    let (rc, out) = s.approve_on_pty(human, home, &id, &code_t);
    assert!(rc == 0 && out.contains(&format!("approved {id}")), "{out}");
    let ok = agent.call_tool(3, "write_file", write("v1"));
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.note(), "v1");
    std::fs::write(s.root.join("note.txt"), "v0").unwrap();
    let (id2, _) = refused_id(&agent.call_tool(4, "write_file", write("v1")));
    assert_ne!(id2, id);
    assert_eq!(s.note(), "v0");
    assert_eq!(s.events("tc.elicit.approved"), 1);
    assert_eq!(s.events("tc.elicit.consumed"), 1);

    // The agent replays the code the human used (read over their shoulder).
    assert_eq!(s.events("tc.factor.replayed"), 0);
    let (rc, out) = s.approve_on_pty(human, home, &id2, &code_t);
    assert!(rc == REFUSED && out.contains("factor_replayed"), "{out}");
    assert_eq!(s.events("tc.factor.replayed"), 1);
    refused_id(&agent.call_tool(5, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");
    assert_eq!(s.events("tc.elicit.approved"), 1);
}

/// Items 2, 3, 4 and 8 of the agent: tcd's state unreadable, its own config cannot
/// loosen the gate, a personal tcd of its own is never used, tcd cannot be traced.
#[test]
fn an_agent_cannot_read_loosen_reroute_or_trace() {
    let Some(s) = scene("an_agent_cannot_read_loosen_reroute_or_trace") else {
        return;
    };
    let (human, home) = (s.d.human.clone(), s.d.home.clone());
    let mut agent = s.agent();
    refused_id(&agent.call_tool(1, "write_file", write("v1")));

    // 2: tcd's state.
    let state = [
        "/var/lib/tc/cache.db",
        "/var/lib/tc/server-secrets/server.key",
    ];
    for f in state {
        assert!(Path::new(f).is_file(), "{f} missing");
    }
    let py = "import errno, os, sys\n\
              for p in sys.argv[1:]:\n\
              \x20   try:\n\
              \x20       open(p, 'rb').read(1); print(p, 'READ')\n\
              \x20   except OSError as e: print(p, errno.errorcode[e.errno])\n\
              try: os.listdir('/var/lib/tc'); print('ls READ')\n\
              except OSError as e: print('ls', errno.errorcode[e.errno])\n";
    let mut c = as_user(&human, &home, PYTHON);
    c.args(["-c", py]).args(state);
    let o = run(c);
    let want = format!("{} EACCES\n{} EACCES\nls EACCES\n", state[0], state[1]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), want, "{}", text(&o));

    // 3: its own config drops the gate: still gated, nothing written.
    s.d.write_user_config("[[vaults]]\nid = \"fs\"\n");
    let before = std::fs::read_to_string(home.join(".config/tc/config.toml")).unwrap();
    let mut a2 = s.agent();
    refused_id(&a2.call_tool(1, "write_file", write("v1")));
    drop(a2);
    assert_eq!(s.note(), "v0");
    // ... adds a `when` that does not hold: the shim refuses the file, naming the key.
    s.d.write_user_config(
        "[[vaults]]\nid = \"fs\"\n[[vaults.gates]]\ntool = \"write_file\"\n\
         when = { equals = { arg = \"path\", value = \"never.txt\" } }\n\
         targets = { paths = [\"path\"] }\n",
    );
    let after = std::fs::read_to_string(home.join(".config/tc/config.toml")).unwrap();
    let mut c = Command::new("setpriv");
    let argv = s.d.shim_argv("fs", &[], &[]);
    c.args(&argv[1..]).stdin(Stdio::null());
    let o = run(c);
    assert!(!o.status.success(), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("vaults[0].gates[0]") && e.contains("when"),
        "{e}"
    );
    assert_eq!(s.note(), "v0");
    let now = std::fs::read_to_string(home.join(".config/tc/config.toml")).unwrap();
    assert!(
        now == after && now != before,
        "the shim left the user's file as it was"
    );
    s.d.remove_user_config();

    // 4: a personal tcd of its own, whose config has the vault without a gate.
    let mine = owned_dir(s.d.tmp.path(), "mine", &human, 0o700);
    let my_sock = mine.join("tcd.sock");
    let my_cfg = mine.join("personal.toml");
    let r = s.root.display();
    std::fs::write(
        &my_cfg,
        format!(
            "[daemon]\nsocket = \"{}\"\n[[vaults]]\nid = \"fs\"\nroot = \"{r}\"\n\
             command = [\"node\", \"{}\", \"{r}\"]\n",
            my_sock.display(),
            filesystem_server().display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&my_cfg, Some(human.uid), Some(human.gid)).unwrap();
    let mut c = as_user(&human, &home, bin("tcd"));
    c.arg("--config").arg(&my_cfg).arg("--socket").arg(&my_sock);
    c.arg("--cache-dir")
        .arg(mine.join("state"))
        .arg("--ephemeral");
    let _mine = guarded::spawn_serving(c, mine.join("tcd.log"), &my_sock);
    let (sock, cfg) = (my_sock.display().to_string(), my_cfg.display().to_string());
    for (env, flags, named) in [
        (
            vec![],
            vec!["--socket", sock.as_str()],
            format!("--socket {sock}"),
        ),
        (
            vec![],
            vec!["--config", cfg.as_str()],
            format!("--config {cfg}"),
        ),
        (
            vec![format!("TC_CONFIG={cfg}")],
            vec![],
            format!("TC_CONFIG={cfg}"),
        ),
    ] {
        let argv = s.d.shim_argv("fs", &env, &flags);
        let o = run({
            let mut c = Command::new("setpriv");
            c.args(&argv[1..]).stdin(Stdio::null());
            c
        });
        assert!(!o.status.success(), "{named}: {}", text(&o));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(&named) && e.contains("guarded"), "{named}: {e}");
    }
    assert_eq!(s.note(), "v0");

    // 8: tcd cannot be traced nor its environment read.
    let pid = s.d.tcd.as_ref().unwrap().child.id();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "tcd");
    let py = "import ctypes, errno, sys\n\
              libc = ctypes.CDLL(None, use_errno=True)\n\
              pid = int(sys.argv[1])\n\
              r = libc.ptrace(16, pid, None, None)\n\
              print('ptrace', r, errno.errorcode.get(ctypes.get_errno()))\n\
              try: open('/proc/%d/environ' % pid, 'rb').read(); print('environ READ')\n\
              except OSError as e: print('environ', errno.errorcode[e.errno])\n";
    let mut c = as_user(&human, &home, PYTHON);
    c.args(["-c", py, &pid.to_string()]);
    let o = run(c);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "ptrace -1 EPERM\nenviron EACCES\n",
        "{}",
        text(&o)
    );
    // Still serving, untouched, and the gate still holds.
    refused_id(&agent.call_tool(2, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");
}

/// Item 6: ten wrong codes in a row (one on a pty, nine from the agent's own gRPC
/// client) lock the factor; the right code is then refused, the agent cannot unlock,
/// root can; then the right code approves and the retry runs.
#[test]
fn guessing_locks_until_root_unlocks() {
    let Some(s) = scene("guessing_locks_until_root_unlocks") else {
        return;
    };
    let secret = s.enroll();
    let (human, home) = (&s.d.human, &s.d.home);
    let mut agent = s.agent();
    let (id, _) = refused_id(&agent.call_tool(1, "write_file", write("v1")));

    let (rc, out) = s.approve_on_pty(human, home, &id, &wrong_code(&secret, 0));
    assert!(rc == REFUSED && out.contains("factor_invalid"), "{out}");
    let guesses: Vec<String> = (1..10).map(|i| wrong_code(&secret, i)).collect();
    let got = s.approve_rpc_as(human, home, &id, &guesses);
    let mut want = vec!["factor_invalid"; 8];
    want.push("factor_locked");
    assert_eq!(got, want);
    assert_eq!(s.events("tc.factor.failed"), 10);
    assert_eq!(s.events("tc.factor.locked"), 1);

    let right = right_code(&secret);
    let (rc, out) = s.approve_on_pty(human, home, &id, &right);
    assert!(rc == REFUSED && out.contains("factor_locked"), "{out}");
    refused_id(&agent.call_tool(2, "write_file", write("v1")));
    assert_eq!(s.note(), "v0");
    let o = s.tcctl_as(human, home, &["unlock", "--user", guarded::HUMAN]);
    assert_eq!(o.status.code(), Some(REFUSED), "{}", all(&o));
    assert!(all(&o).contains("only root"), "{}", all(&o));
    assert_eq!(s.events("tc.factor.unlocked"), 0);

    let o = s.d.tcctl_as_root(&["unlock", "--user", guarded::HUMAN]);
    assert!(o.status.success(), "{}", all(&o));
    assert_eq!(s.events("tc.factor.unlocked"), 1);
    let (rc, out) = s.approve_on_pty(human, home, &id, &right);
    assert!(rc == 0 && out.contains(&format!("approved {id}")), "{out}");
    let ok = agent.call_tool(3, "write_file", write("v1"));
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.note(), "v1");
}
