//! End to end, approve by request (issue 17 items 1, 2, 6; issue 16 item 5): a Python
//! `mcp` client → real tc-shim → real server-filesystem, real tcd, and the human's real
//! `tcctl approve` / `tcctl decline`. Every case checks what the client sees AND the file
//! on disk (what the server did).

use tc_tests::shim as support;

use tc_tests::elicit;
use tc_tests::guarded::printed as text;

use std::process::Output;

use elicit::*;
use serde_json::{json, Value};
use support::*;
use tc_proto::v1;

/// A personal-mode env whose client has no in-protocol route (legacy, not opted in): the
/// refusal route, where approve by request lives.
fn started() -> (Env, Human) {
    let env = fs_vault("", None);
    let (env, h) = legacy_started(env);
    (env, h)
}

fn write(content: &str) -> Value {
    json!({"path": "note.txt", "content": content})
}

fn tcctl(env: &Env, args: &[&str]) -> Output {
    env.tcd.tcctl(args)
}

/// The request id of an `elicit_required` refusal; checks the refusal asks for
/// `tcctl approve ID` and a plain retry, and still carries the token route.
#[track_caller]
fn asks_approve(r: &Value, args: &Value) -> String {
    assert_elicit_required(r, "write_file", "fs", args);
    let id = request_id(r);
    assert_eq!(id.len(), 8, "{r}");
    let t = r["content"][0]["text"].as_str().unwrap();
    assert!(t.contains(&format!("    tcctl approve {id}\n")), "{t}");
    assert!(t.contains("send exactly the same call again"), "{t}");
    assert!(t.contains("personal mode"), "{t}");
    assert_eq!(sc(r)["recovery"]["approve"], format!("tcctl approve {id}"));
    id
}

#[track_caller]
fn approve_yes(env: &Env, id: &str) {
    let o = tcctl(env, &["approve", id, "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_approved_request_runs_the_identical_retry_once_and_nothing_else() {
    let (env, mut h) = started();
    let r = h.call("write_file", write("v1"));
    let id = asks_approve(&r, &write("v1"));
    // The human sees it waiting, with its id, and approves it in full view.
    let p = tcctl(&env, &["pending"]);
    assert!(
        text(&p).contains(&format!("[{id}] pending")),
        "{}",
        text(&p)
    );
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    for want in [
        "tool:      write_file",
        "vault:     fs",
        "caller:    stdio",
        "\"content\": \"v1\"",
        "note.txt",
        "time left",
    ] {
        assert!(shown.contains(want), "{want}: {shown}");
    }
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));

    // Other arguments: not approved, asked afresh under another id, nothing written.
    let other = h.call("write_file", write("v2"));
    assert_ne!(asks_approve(&other, &write("v2")), id);
    // Another caller presenting the same call: nothing held for it.
    let args_hash = tc_core::hash::args_hash("write_file", &write("v1"));
    let fp = sc(&r)["details"]["state_fp"].as_str().unwrap().to_string();
    let refused = rt().block_on(async {
        let mut c =
            v1::confirm_client::ConfirmClient::new(tc_proto::connect(&env.socket).await.unwrap());
        c.redeem(v1::RedeemRequest {
            binding: Some(v1::Binding {
                vault: "fs".into(),
                tool: "write_file".into(),
                caller: "someone-else".into(),
                args_hash: args_hash.clone(),
            }),
            current_state_fp: fp.clone(),
            approved_request: true,
            ..Default::default()
        })
        .await
    });
    // Ok here would mean: another caller redeemed the approval.
    tc_tests::refused(refused, tc_core::Reason::NotApproved);
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));

    // The identical retry runs, once; the same call after that asks afresh.
    let again = assert_approved_retry_runs_once(&env, &mut h);
    assert_ne!(asks_approve(&again, &write("v1")), id);
    // The approval of a used request cannot be given again.
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{}", text(&o));
}

#[test]
fn a_drifted_target_is_refused_and_the_retry_asks_afresh() {
    let (env, mut h) = started();
    let r = h.call("write_file", write("v1"));
    let id = asks_approve(&r, &write("v1"));
    approve_yes(&env, &id);
    std::fs::write(env.root.join("note.txt"), "changed behind the human's back").unwrap();
    let drift = h.call("write_file", write("v1"));
    assert_eq!(code(&drift).as_deref(), Some("replay_drift"), "{drift}");
    assert_eq!(
        disk(&env, "note.txt").as_deref(),
        Some("changed behind the human's back")
    );
    let fresh = h.call("write_file", write("v1"));
    assert_ne!(asks_approve(&fresh, &write("v1")), id);
}

#[test]
fn a_decline_is_a_hard_stop_with_the_reason_and_is_never_approved_later() {
    let (env, mut h) = started();
    let r = h.call("write_file", write("v1"));
    let id = asks_approve(&r, &write("v1"));
    let o = tcctl(
        &env,
        &["decline", &id, "--reason", "not that file\u{1b}[2J"],
    );
    assert!(o.status.success(), "{}", text(&o));
    for _ in 0..2 {
        let d = h.call("write_file", write("v1"));
        let t = refusal_text(&d, "approval_declined");
        assert!(
            t.contains("DECLINED") && t.contains("not that file⟨U+001B⟩[2J"),
            "{t}"
        );
        assert!(sc(&d).get("recovery").is_none(), "{d}");
    }
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("declined"), "{}", text(&o));
    // Nor through the token route.
    let o = tcctl(
        &env,
        &[
            "elicit",
            "--hash",
            sc(&r)["details"]["args_hash"].as_str().unwrap(),
            "--tool",
            "write_file",
            "--vault",
            "fs",
        ],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("declined"), "{}", text(&o));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    let p = tcctl(&env, &["pending"]);
    assert!(
        text(&p).contains(&format!("[{id}] declined")),
        "{}",
        text(&p)
    );
}

#[test]
fn an_unanswered_request_reads_as_expired_then_a_fresh_one_is_approved() {
    let env = fs_vault("", None);
    set_ttl(&env, 3);
    let (env, mut h) = legacy_started(env);
    let r = h.call("write_file", write("v1"));
    let id = asks_approve(&r, &write("v1"));
    wait_until_expired(&env, &id);
    let e = h.call("write_file", write("v1"));
    let t = refusal_text(&e, "request_expired");
    assert!(
        t.contains("EXPIRED") && t.contains("nobody declined"),
        "{t}"
    );
    assert_eq!(events_of(&env, "tc.elicit.expired"), 1);
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{}", text(&o));
    // The retry after that raises a fresh request, which is approved and runs.
    let fresh = h.call("write_file", write("v1"));
    let id2 = asks_approve(&fresh, &write("v1"));
    assert_ne!(id2, id);
    approve_yes(&env, &id2);
    let ok = h.call("write_file", write("v1"));
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
}

/// Waits (up to 10 s) until `tcctl pending --json` shows the request as expired.
fn wait_until_expired(env: &Env, id: &str) {
    wait_until("the request to expire", || {
        let o = tcctl(env, &["pending", "--json"]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["request_id"] == id && v["status"] == "expired")
            .then_some(())
    });
}

#[test]
fn the_token_route_still_works() {
    let (env, mut h) = started();
    let r = h.call("write_file", write("v1"));
    asks_approve(&r, &write("v1"));
    let token = mint(&env.socket, &r);
    let mut args = write("v1");
    args["elicit_token"] = json!(token);
    let ok = h.call("write_file", args);
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v1"));
}

/// A tcd whose root-owned config says guarded, humans = ["root"] and daemon_user = "root"
/// (the tests run as root; guarded tcd runs only as its daemon user).
fn guarded() -> Env {
    let mut env = fs_vault("legacy_elicitation_shim = true", None);
    let text = std::fs::read_to_string(&env.config).unwrap();
    let text = text.replacen("[daemon]\n", "[daemon]\nmode = \"guarded\"\n", 1)
        + "\n[guarded]\nhumans = [\"root\"]\ndaemon_user = \"root\"\n";
    std::fs::write(&env.config, text).unwrap();
    tc_tests::chmod(&env.config, 0o644);
    tc_tests::chmod(env.config.parent().unwrap(), 0o755);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    env
}

/// `write_file` of note.txt = `content` in guarded mode, the prompt accepted by the
/// client itself: the prompt says approval is `tcctl approve`'s and the call is refused
/// as not obtained. The prompt's message and the refusal.
#[track_caller]
fn own_accept_not_obtained(h: &mut Human, content: &str) -> (String, Value) {
    let (prompt, r) = h.call_answering("write_file", write(content), approve());
    let msg = prompt["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("guarded mode") && msg.contains("tcctl approve "),
        "{msg}"
    );
    assert_eq!(code(&r).as_deref(), Some("approval_not_obtained"), "{r}");
    (msg, r)
}

#[test]
fn guarded_a_clients_own_accept_approves_nothing_on_either_route() {
    let env = guarded();
    let st = tcctl(&env, &["pending"]);
    assert!(st.status.success(), "{}", text(&st));

    // Legacy route: the shim's own elicitation/create, answered by the client itself.
    let mut h = Human::python("legacy", &env.shim_argv("fs"));
    let (msg, r) = own_accept_not_obtained(&mut h, "v1");
    let id = request_id(&r);
    assert!(msg.contains(&format!("tcctl approve {id}")), "{msg}");
    assert_eq!(sc(&r)["recovery"]["approve"], format!("tcctl approve {id}"));
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    drop(h);

    // Modern route: input_required, re-sent with the client's own accept.
    let mut m = Human::python("modern", &env.shim_argv("fs"));
    assert_eq!(m.hello["era"], "modern", "{}", m.hello);
    own_accept_not_obtained(&mut m, "v2");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
    assert_eq!(events_of(&env, "tc.elicit.approved"), 0);

    // `--yes` is refused; so is an approval without a code (the factor is `factor.rs`'s:
    // it fails closed until enrollment exists).
    let o = tcctl(&env, &["approve", &id, "--yes"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--yes is refused in guarded mode"),
        "{}",
        text(&o)
    );
    let refused = rt().block_on(async {
        let mut c =
            v1::confirm_client::ConfirmClient::new(tc_proto::connect(&env.socket).await.unwrap());
        c.approve(v1::ApproveRequest {
            request_id: id.clone(),
            ..Default::default()
        })
        .await
    });
    // Ok here would mean: approved without a factor.
    tc_tests::refused(refused, tc_core::Reason::FactorRequired);
    // A decline in the client is a decline in tcd: that request cannot be approved.
    let mut h = Human::python("legacy", &env.shim_argv("fs"));
    let (_, r) = h.call_answering("write_file", write("v3"), json!({"action": "decline"}));
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    let again = h.call("write_file", write("v3"));
    assert_eq!(
        code(&again).as_deref(),
        Some("approval_declined"),
        "{again}"
    );
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
}
