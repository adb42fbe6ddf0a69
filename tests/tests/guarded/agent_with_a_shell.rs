//! Review 3 (an attacker's read of guarded mode): an agent with a shell as the human's uid,
//! without the TOTP secret, gets a gated call run that nobody approved. Each test runs in
//! its own mount namespace with a guarded tcd as its daemon user (tests/src/guarded.rs),
//! a gate on server-filesystem's `write_file`, and a tc-shim run as the human.

use tc_tests::guarded;
use tc_tests::shim as support;

use std::path::Path;
use std::process::{Command, Stdio};

use guarded::{as_user, run, text, write, Scene, Setup};
use serde_json::{json, Value};
use support::{bin, code, sc};

/// Marks this binary re-executed as the human to call SealState (the agent's own client).
const PROBE: &str = "TC_REVIEW3_PROBE";
/// The `inner` bytes the probe seals.
const PROBE_INNER: &str = "TC_REVIEW3_INNER";

/// A guarded deployment with vault `fs` (server-filesystem, `write_file` gated) over a
/// root the human owns, holding note.txt = "v0", for the test `name` in its namespace
/// (None: the test returns).
#[track_caller]
fn scene(name: &str) -> Option<Scene> {
    Setup::default().start_in_namespace(name, &[])
}

/// What the agent with a shell does besides calling tools: start the shim itself, and
/// call tcd's SealState with its own gRPC client.
trait AgentShell {
    fn shim_starts(&self) -> Result<(), String>;
    fn seal_as_human(&self, args: &Value, state_fp: &str, inner: &str) -> String;
}

impl AgentShell for Scene {
    /// The shim with nothing on stdin: Err(stderr) if it refused to start.
    fn shim_starts(&self) -> Result<(), String> {
        let argv = self.d.shim_argv("fs", &[], &[]);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).stdin(Stdio::null());
        let o = run(c);
        if o.status.success() {
            Ok(())
        } else {
            Err(text(&o))
        }
    }

    /// SealState for `write_file(args)` at `state_fp` with `inner`, called by this test
    /// binary re-executed as the human: what the agent's own gRPC client gets.
    fn seal_as_human(&self, args: &Value, state_fp: &str, inner: &str) -> String {
        let exe = std::env::current_exe().unwrap();
        let mut c = as_user(&self.d.human, &self.d.home, exe);
        let hash = tc_core::hash::args_hash("write_file", args);
        c.args([
            "--exact",
            &tc_tests::test_path(file!(), "review3_probe"),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PROBE, format!("{hash} {state_fp}"))
        .env(PROBE_INNER, inner);
        let out = run(c);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.split("SEALED ").nth(1))
            .unwrap_or_else(|| panic!("the probe sealed nothing:\n{}", text(&out)))
            .to_string()
    }
}

/// Not a test of its own: what [`AgentShell::seal_as_human`] runs as the human.
#[test]
fn review3_probe() {
    let Ok(spec) = std::env::var(PROBE) else {
        return;
    };
    let (hash, fp) = spec.split_once(' ').unwrap();
    let inner = std::env::var(PROBE_INNER).unwrap().into_bytes();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let blob = rt.block_on(async {
        let sock = Path::new(tc_core::guarded::SYSTEM_SOCKET);
        let ch = tc_proto::connect(sock).await.expect("connect");
        let mut c = tc_proto::v1::confirm_client::ConfirmClient::new(ch);
        c.seal_state(tc_proto::v1::SealStateRequest {
            binding: Some(tc_proto::v1::Binding {
                vault: "fs".into(),
                tool: "write_file".into(),
                caller: "stdio".into(),
                args_hash: hash.into(),
            }),
            state_fp: fp.into(),
            inner,
        })
        .await
        .expect("SealState as the human")
        .into_inner()
        .request_state
    });
    println!("SEALED {blob}");
}

/// The human's own file `user_config` adds a gate: if the shim starts anyway, the agent's `call`
/// (id, tool, arguments) must leave note.txt as it was (`ran` says what it would have
/// done); the shim must refuse the file, naming `key`, and nothing is written.
#[track_caller]
fn the_user_file_is_refused(
    s: &Scene,
    user_config: &str,
    call: (u64, &str, Value),
    ran: &str,
    key: &str,
) {
    s.d.write_user_config(user_config);
    if s.shim_starts().is_ok() {
        let mut agent = s.agent();
        let r = agent.call_tool(call.0, call.1, call.2);
        assert_eq!(s.note(), "v0", "{ran}: {r}");
    }
    let e = s.shim_starts().unwrap_err();
    assert!(e.contains(key), "{e}");
    assert_eq!(s.note(), "v0");
}

/// Finding 1 (critical): SealState is open to the humans (the shim needs it), so the
/// agent seals `{"approved": true}` as a downstream round of the gated call and sends the
/// call back with it: the shim took the round as one of an approved call and forwarded
/// it. Fixed: a round of an approved call must carry this shim process's own MAC.
#[test]
fn review3_a_forged_round_of_an_approved_call_runs_nothing() {
    let Some(s) = scene("review3_a_forged_round_of_an_approved_call_runs_nothing") else {
        return;
    };
    let mut agent = s.agent();
    let args = write("pwned");
    let r = agent.call_tool(1, "write_file", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let fp = sc(&r)["details"]["state_fp"]
        .as_str()
        .unwrap_or_else(|| panic!("no state_fp in the refusal: {r}"))
        .to_string();
    let blob = s.seal_as_human(&args, &fp, r#"{"state":null,"approved":true}"#);
    let r = agent.request(
        json!(2),
        "tools/call",
        json!({"name": "write_file", "arguments": args, "requestState": blob}),
    );
    assert_eq!(s.note(), "v0", "the forged round ran the gated call: {r}");
    let r = r.get("result").cloned().unwrap_or(r);
    assert_eq!(r["isError"], true, "{r}");
    // Nothing was approved, and the gate still asks.
    let r = agent.call_tool(3, "write_file", write("pwned"));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(s.note(), "v0");
}

/// Finding 2 (high): the user's own file may add gates; a gate with a `when` that never
/// holds on a destructive tool the system does not gate (server-filesystem's `edit_file`
/// is disabled by the destructiveHint floor) turned "disabled" into "runs unconfirmed".
/// Fixed: a gate the user adds cannot carry `when`.
#[test]
fn review3_a_user_gate_cannot_switch_off_the_floor() {
    let Some(s) = scene("review3_a_user_gate_cannot_switch_off_the_floor") else {
        return;
    };
    // The floor, before the agent touches its file: edit_file is disabled.
    let edit = json!({"path": "note.txt", "edits": [{"oldText": "v0", "newText": "pwned"}]});
    let mut agent = s.agent();
    let r = agent.call_tool(1, "edit_file", edit.clone());
    assert_eq!(code(&r).as_deref(), Some("gate_not_configured"), "{r}");
    drop(agent);
    the_user_file_is_refused(
        &s,
        "[[vaults]]\nid = \"fs\"\n[[vaults.gates]]\ntool = \"edit_file\"\n\
         when = { equals = { arg = \"dryRun\", value = \"never\" } }\n\
         targets = { paths = [\"path\"] }\n",
        (2, "edit_file", edit),
        "edit_file ran unconfirmed",
        "vaults[0].gates[0].when",
    );
}

/// Finding 3 (critical): a gate the user adds may fingerprint its target with a `probe`,
/// which the shim runs on the downstream, unconfirmed, with arguments templated from the
/// call: a probe of `write_file` on a harmless tool wrote the file with no approval.
/// Fixed: a gate the user adds cannot declare a probe.
#[test]
fn review3_a_user_gate_cannot_probe_with_a_gated_tool() {
    let Some(s) = scene("review3_a_user_gate_cannot_probe_with_a_gated_tool") else {
        return;
    };
    the_user_file_is_refused(
        &s,
        "[[vaults]]\nid = \"fs\"\n[[vaults.gates]]\ntool = \"list_allowed_directories\"\n\
         targets = { probe = { tool = \"write_file\", arguments = { path = \"$path\", content = \"$content\" } } }\n",
        (1, "list_allowed_directories", write("pwned")),
        "the probe ran write_file unconfirmed",
        "vaults[0].gates[0].targets.probe",
    );
}

/// Finding 4 (high): in guarded mode `tcctl elicit` asked for the human's code showing
/// only tool, vault, caller and an args_hash: nothing a human can check. The agent relays
/// the `tcctl elicit` line of a call it chose and describes it as something else; the code
/// the human types mints a token for the hidden call. Now `tcctl elicit` (guarded) looks
/// the raised request up and shows it in full, as `tcctl approve` does, with a y/N, before
/// it asks for the code; a hash with no raised request is refused before any code.
#[test]
fn review3_elicit_shows_the_call_before_asking_for_the_code() {
    let Some(s) = scene("review3_elicit_shows_the_call_before_asking_for_the_code") else {
        return;
    };
    let mut agent = s.agent();
    let r = agent.call_tool(1, "write_file", write("HIDDEN-PAYLOAD"));
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let cmd = sc(&r)["recovery"]["command"].as_str().unwrap().to_string();
    let mut words: Vec<&str> = cmd.split_whitespace().collect();
    let tcctl = bin("tcctl").display().to_string();
    words[0] = &tcctl;
    let mut p = guarded::on_pty(Some(s.h1()), &words);
    let shown = p.wait_for("[y/N]");
    assert!(
        shown.contains("HIDDEN-PAYLOAD") && !shown.contains("6-digit code"),
        "the code is asked for a call the human cannot see:\n{shown}"
    );
    // The human, seeing it, says no: nothing is asked, nothing minted.
    p.type_line("n");
    let (rc, out) = p.finish();
    assert_ne!(rc, 0, "{out}");
    assert!(!out.contains("6-digit code"), "{out}");
}
