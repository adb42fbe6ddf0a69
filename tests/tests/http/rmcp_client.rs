//! End to end: the Rust MCP SDK (`rmcp` 3.11, its Streamable HTTP client transport over
//! reqwest 0.12, tests/src/rmcp_http.rs) → real `tc-shim serve --http` (auth `none`)
//! → real server-filesystem, real tcd and tcctl. The client and the scenes these tests
//! share with tests/tests/shim/rmcp_client.rs are `tc_tests::rmcp_client`.
//!
//! - Legacy (`ClientLifecycleMode::Initialize`, a session): tools listed with the
//!   optional `elicit_token`, an ungated call passes, the gated `write_file` is an
//!   `isError` result coded `elicit_required` (in `_meta["tc/refusal"]`: the tool has an
//!   `outputSchema`; never a prompt over HTTP), the printed `tcctl elicit` mints, the retry writes
//!   once, the spent token not.
//! - Modern (`ClientLifecycleMode::Discover` at 2026-07-28, stateless): the SDK's own
//!   input-required driver in `call_tool` asks the handler; approve writes once, decline
//!   writes nothing.
//!
//! - An answer streamed as SSE (server-everything's progress notifications, then the
//!   result) reaches the SDK whole.
//!
//! Every gated case checks what the SDK handed back AND the file on disk.

use tc_tests::http::Front;
use tc_tests::rmcp_client::{
    assert_approve_writes_once, assert_cli_token_route, assert_decline_writes_nothing, note_env,
    text, Answer, Era, Operator, Rmcp,
};
use tc_tests::shim::*;

use rmcp::model::{CallToolRequestParams, NumberOrString, ProgressToken, RequestMetaObject};
use serde_json::json;

/// The fs vault behind a front, tcd up, `note.txt` = "v0".
fn started() -> (Env, Front) {
    let env = note_env("");
    let front = Front::start(&env, "fs");
    (env, front)
}

/// [`started`] with a modern-era rmcp client over HTTP whose operator gives `answer`
/// (the client checked to have negotiated 2026-07-28).
#[track_caller]
fn modern_client_answering(answer: Answer) -> (Env, Front, Rmcp, Operator) {
    let (env, front) = started();
    let op = Operator::new(Some(answer));
    let c = Rmcp::http(&front.url(), Era::Modern, op.clone());
    assert_eq!(c.protocol_version(), "2026-07-28");
    (env, front, c, op)
}

#[test]
fn rmcp_legacy_over_http_gets_elicit_required_and_the_cli_route_writes() {
    let (env, front) = started();
    let op = Operator::new(None);
    let c = Rmcp::http(&front.url(), Era::Legacy, op.clone());
    assert_eq!(c.protocol_version(), "2025-11-25");

    // The gated write: a tool result the SDK hands back as is, nothing written. write_file
    // declares an outputSchema, so the refusal object is in `_meta["tc/refusal"]` (an SDK
    // validating structuredContent against that schema would reject it there).
    let refusal = |wf: &serde_json::Value, r: &serde_json::Value| {
        assert_eq!(r["isError"], true, "{r}");
        assert!(wf.get("outputSchema").is_some(), "{wf}");
        assert_eq!(r["_meta"]["tc/refusal"]["code"], "elicit_required", "{r}");
        assert!(r.get("structuredContent").is_none(), "{r}");
        assert_eq!(sc(r)["details"]["caller"], "http-local", "{r}");
    };
    assert_cli_token_route(&env, &c, &op, "from rmcp over http", || {}, refusal);
}

/// A call whose answer is an event stream (progress notifications, then the result):
/// the transport's SSE path, not only its JSON one.
#[test]
fn rmcp_legacy_over_http_gets_a_calls_progress_from_its_event_stream() {
    let mut env = Env::with(&Vault::everything("ev"));
    env.start_tcd();
    let front = Front::start(&env, "ev");
    let op = Operator::new(None);
    let c = Rmcp::http(&front.url(), Era::Legacy, op.clone());
    let args = json!({"duration": 0.3, "steps": 3});
    let mut params = CallToolRequestParams::new("trigger-long-running-operation")
        .with_arguments(args.as_object().unwrap().clone());
    params.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
        NumberOrString::String("p1".into()),
    )));
    let r = c.call_params(params);
    assert!(text(&r).contains("Long running operation completed"), "{r}");
    let seen = wait_until("three progress notifications", || {
        let p = op.progress();
        (p.len() >= 3).then_some(p)
    });
    assert_eq!(seen, [1.0, 2.0, 3.0]);
}

#[test]
fn rmcp_modern_over_http_approve_writes_once() {
    let (env, _front, c, op) = modern_client_answering(Answer::Approve);
    assert_approve_writes_once(&env, &c, &op, "approved over http", || {});
}

#[test]
fn rmcp_modern_over_http_decline_writes_nothing() {
    let (env, _front, c, op) = modern_client_answering(Answer::Decline);
    assert_decline_writes_nothing(&env, &c, &op);
}
