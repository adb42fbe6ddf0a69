//! End to end: the Rust MCP SDK (`rmcp` 3.11, `TokioChildProcess` transport) as the
//! client → real tc-shim → real server-filesystem, with a real tcd. Each route runs in
//! both eras the SDK speaks: legacy (`ClientLifecycleMode::Initialize`, the SDK's
//! default `serve`) and modern (`ClientLifecycleMode::Discover` at 2026-07-28).
//!
//! - No elicitation capability: `elicit_token` is advertised, a gated `write_file` is
//!   refused with the `tcctl elicit` command, the real `tcctl` mints, the re-sent call
//!   writes once, the spent token writes nothing.
//! - An elicitation capability with an rmcp `ClientHandler::create_elicitation` as the
//!   human (legacy: the shim's `elicitation/create`, vault opt-in
//!   `legacy_elicitation_shim = true`; modern: the SDK's own MRTR driver in
//!   `call_tool`): approve writes exactly once, decline writes nothing; legacy without
//!   the opt-in never prompts and gets the CLI route.
//!
//! Every case checks what the SDK handed back AND the file on disk. The client and the
//! scenes these tests share with tests/tests/http/rmcp_client.rs are `tc_tests::rmcp_client`.

use tc_tests::rmcp_client::{
    assert_approve_writes_once, assert_cli_token_route, assert_decline_writes_nothing, note_env,
    text, Answer, Era, Operator, Rmcp,
};
use tc_tests::shim::*;

use serde_json::json;
use tc_tests::elicit::{disk, events_of};

/// A vault in front of server-filesystem (`write_file` gated on `path`), tcd up,
/// `note.txt` = "v0", and an rmcp client with `handler` through a logged tc-shim.
fn started(era: Era, extra: &str, handler: Operator) -> (Env, Rmcp, std::path::PathBuf) {
    let env = note_env(extra);
    let (argv, log) = env.shim_argv_logged("fs");
    let c = Rmcp::stdio(&argv, era, handler);
    assert_eq!(c.protocol_version(), era.version(), "{era:?}");
    (env, c, log)
}

/// The shim logged the client era the SDK chose (once it knows both eras, i.e. after
/// the first call has reached the downstream).
///
/// Legacy: rmcp's `initialize` asks for its LATEST, 2026-07-28 (a version without
/// `initialize`); server-filesystem answers 2025-11-25 and the SDK settles on that
/// (asserted in [`started`]). The shim's era is the *agreed* version, the one its own
/// `elicitation/create` must be shaped for (it recorded the asked one before).
fn assert_era_logged(era: Era, log: &std::path::Path) {
    let want = match era {
        Era::Legacy => "client era: legacy (2025-11-25)",
        Era::Modern => "client era: modern (2026-07-28)",
    };
    let shim_log = wait_log(log, want);
    assert!(shim_log.contains(want), "{era:?}: shim log:\n{shim_log}");
}

fn cli_token_route(era: Era) {
    let op = Operator::new(None);
    let (env, c, log) = started(era, "", op.clone());
    assert_cli_token_route(
        &env,
        &c,
        &op,
        "from rmcp",
        || assert_era_logged(era, &log),
        |_, _| {},
    );
}

#[test]
fn rmcp_legacy_without_elicitation_uses_the_cli_token_route() {
    cli_token_route(Era::Legacy);
}

#[test]
fn rmcp_modern_without_elicitation_uses_the_cli_token_route() {
    cli_token_route(Era::Modern);
}

/// The vault keys each era needs for the shim to prompt.
fn prompting_vault(era: Era) -> &'static str {
    match era {
        Era::Legacy => "legacy_elicitation_shim = true",
        Era::Modern => "",
    }
}

fn approve_writes_once(era: Era) {
    let op = Operator::new(Some(Answer::Approve));
    let (env, c, log) = started(era, prompting_vault(era), op.clone());
    assert_approve_writes_once(&env, &c, &op, "approved", || assert_era_logged(era, &log));

    // Exactly once: the approval is not reusable, a second identical call asks again
    // (and this human approves again, so it writes again, prompted a second time).
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = c.call(
        "write_file",
        json!({"path": "note.txt", "content": "approved"}),
    );
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(op.prompts().len(), 2, "{:?}", op.prompts());
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("approved"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 2);
}

#[test]
fn rmcp_legacy_elicitation_approve_writes_once() {
    approve_writes_once(Era::Legacy);
}

#[test]
fn rmcp_modern_elicitation_approve_writes_once() {
    approve_writes_once(Era::Modern);
}

fn decline_writes_nothing(era: Era) {
    let op = Operator::new(Some(Answer::Decline));
    let (env, c, log) = started(era, prompting_vault(era), op.clone());
    assert_decline_writes_nothing(&env, &c, &op);
    assert_era_logged(era, &log);
}

#[test]
fn rmcp_legacy_elicitation_decline_writes_nothing() {
    decline_writes_nothing(Era::Legacy);
}

#[test]
fn rmcp_modern_elicitation_decline_writes_nothing() {
    decline_writes_nothing(Era::Modern);
}

/// Legacy era, the capability declared but the vault not opted in: the shim never
/// prompts (the handler is not called), the call gets the CLI route, nothing is written.
#[test]
fn rmcp_legacy_elicitation_without_the_opt_in_uses_the_cli_route() {
    let op = Operator::new(Some(Answer::Approve));
    let (env, c, log) = started(Era::Legacy, "", op.clone());
    let r = c.call("write_file", json!({"path": "note.txt", "content": "x"}));
    assert_era_logged(Era::Legacy, &log);
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert!(text(&r).contains("tcctl elicit"), "{r}");
    assert!(op.prompts().is_empty(), "{:?}", op.prompts());
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
}
