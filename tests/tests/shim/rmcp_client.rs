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
//! Every case checks what the SDK handed back AND the file on disk.

use tc_tests::shim as support;

use tc_tests::elicit;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elicit::{disk, events_of, fs_vault};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, Implementation, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{json, Value};
use support::*;

/// Which lifecycle the rmcp client uses.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Era {
    /// `initialize` (what `ServiceExt::serve` does).
    Legacy,
    /// `server/discover` at 2026-07-28, per-request `_meta`, MRTR.
    Modern,
}

impl Era {
    fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        }
    }
}

/// What the test's human answers to a prompt.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// `accept` with `{"approve": true}`.
    Approve,
    /// `decline`.
    Decline,
}

/// The rmcp client handler. Without an answer it advertises no elicitation capability
/// (and counts any prompt it gets anyway, which must not happen); with one it
/// advertises `elicitation: {}` (form) and answers every prompt so.
#[derive(Clone)]
struct Operator {
    answer: Option<Answer>,
    /// Every `elicitation/create` params the SDK handed to `create_elicitation`.
    prompts: Arc<Mutex<Vec<Value>>>,
}

impl Operator {
    fn new(answer: Option<Answer>) -> Operator {
        Operator {
            answer,
            prompts: Arc::default(),
        }
    }

    fn prompts(&self) -> Vec<Value> {
        self.prompts.lock().unwrap().clone()
    }
}

impl ClientHandler for Operator {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.prompts
            .lock()
            .unwrap()
            .push(serde_json::to_value(&request).expect("serialize the prompt"));
        Ok(match self.answer {
            Some(Answer::Approve) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            Some(Answer::Decline) | None => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    fn get_info(&self) -> ClientConfig {
        // (`ClientCapabilities::builder` exists only with rmcp's `server` feature.)
        let mut caps = ClientCapabilities::default();
        if self.answer.is_some() {
            caps.elicitation = Some(ElicitationCapability::new());
        }
        ClientConfig::new(caps, Implementation::new("tc-tests-rmcp", "0.1.0"))
    }
}

/// An rmcp client running tc-shim as its child process, driven synchronously so the
/// test can call the blocking harness (`tcctl`, the daemon's event log) between calls.
struct Rmcp {
    client: Option<RunningService<RoleClient, Operator>>,
    rt: tokio::runtime::Runtime,
}

/// Bounds every SDK operation: a hang fails the test instead of stalling it.
const OP_TIMEOUT: Duration = Duration::from_secs(60);

impl Rmcp {
    fn start(argv: &[String], era: Era, handler: Operator) -> Rmcp {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            let transport = TokioChildProcess::new(cmd).expect("spawn tc-shim");
            tokio::time::timeout(
                OP_TIMEOUT,
                handler.serve_with_lifecycle(transport, era.lifecycle()),
            )
            .await
            .expect("rmcp handshake within 60 s")
            .unwrap_or_else(|e| panic!("rmcp {era:?} handshake with tc-shim failed: {e}"))
        });
        Rmcp {
            client: Some(client),
            rt,
        }
    }

    fn client(&self) -> &RunningService<RoleClient, Operator> {
        self.client.as_ref().unwrap()
    }

    fn run<T>(&self, what: &str, f: impl Future<Output = T>) -> T {
        self.rt
            .block_on(async { tokio::time::timeout(OP_TIMEOUT, f).await })
            .unwrap_or_else(|_| panic!("rmcp {what} did not finish within 60 s"))
    }

    /// The protocol version the SDK negotiated.
    fn protocol_version(&self) -> String {
        let info = self
            .client()
            .peer_info()
            .expect("peer info after the handshake");
        info.protocol_version.to_string()
    }

    /// `tools/list` (every page), as JSON.
    fn list(&self) -> Value {
        let tools = self
            .run("list_all_tools", self.client().list_all_tools())
            .expect("tools/list");
        json!({ "tools": serde_json::to_value(tools).unwrap() })
    }

    /// `tools/call` through the SDK's high-level `call_tool` (which drives MRTR rounds
    /// through the handler), the result as JSON (camelCase, as on the wire).
    fn call(&self, name: &str, args: Value) -> Value {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(args);
        let r = self
            .run("call_tool", self.client().call_tool(params))
            .unwrap_or_else(|e| panic!("rmcp call_tool {name} failed: {e}"));
        serde_json::to_value(r).unwrap()
    }
}

impl Drop for Rmcp {
    fn drop(&mut self) {
        // Closes the shim's stdin and waits for it to exit (rmcp kills it otherwise).
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(OP_TIMEOUT, c.cancel()).await });
        }
    }
}

/// The text of a result's first content block.
fn text(r: &Value) -> &str {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {r}"))
}

fn want_version(era: Era) -> &'static str {
    match era {
        Era::Legacy => "2025-11-25",
        Era::Modern => "2026-07-28",
    }
}

/// A vault in front of server-filesystem (`write_file` gated on `path`), tcd up,
/// `note.txt` = "v0", and an rmcp client with `handler` through a logged tc-shim.
fn started(era: Era, extra: &str, handler: Operator) -> (Env, Rmcp, std::path::PathBuf) {
    let mut env = fs_vault(extra, None);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let (argv, log) = env.shim_argv_logged("fs");
    let c = Rmcp::start(&argv, era, handler);
    assert_eq!(c.protocol_version(), want_version(era), "{era:?}");
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

    // tools/list: the gated tool advertises the optional elicit_token, an ungated one not.
    let tools = c.list();
    let wf = tool(&tools, "write_file").unwrap_or_else(|| panic!("{tools}"));
    assert_eq!(
        wf["inputSchema"]["properties"]["elicit_token"]["type"], "string",
        "{wf}"
    );
    let required = wf["inputSchema"]["required"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !required.contains(&json!("elicit_token")),
        "elicit_token must be optional: {wf}"
    );
    let rt = tool(&tools, "read_text_file").unwrap_or_else(|| panic!("{tools}"));
    assert!(
        rt["inputSchema"]["properties"]
            .get("elicit_token")
            .is_none(),
        "{rt}"
    );

    // The ungated read flows to the server.
    let r = c.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(text(&r), "v0", "{r}");
    assert_era_logged(era, &log);

    // The gated write without a token: refused with the command, nothing written.
    let args = json!({"path": "note.txt", "content": "from rmcp"});
    let r = c.call("write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));

    // The operator runs that command with the real tcctl; the re-sent call writes once.
    let token = tcctl_elicit(&env, &r);
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(text(&r).contains("Successfully wrote"), "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("from rmcp"));

    // The spent token writes nothing (the removed file stays removed).
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(disk(&env, "note.txt"), None, "a spent token must not write");

    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    assert!(
        op.prompts().is_empty(),
        "a client without the capability was prompted: {:?}",
        op.prompts()
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

/// Asserts the handler saw exactly one prompt, a form asking to approve the write.
fn one_write_prompt(op: &Operator) -> Value {
    let prompts = op.prompts();
    assert_eq!(prompts.len(), 1, "one prompt per gated call: {prompts:?}");
    let p = prompts[0].clone();
    assert_eq!(p["mode"], "form", "{p}");
    let msg = p["message"].as_str().unwrap_or_else(|| panic!("{p}"));
    assert!(
        msg.contains("`write_file`") && msg.contains("`fs`") && msg.contains("note.txt"),
        "{msg}"
    );
    assert_eq!(
        p["requestedSchema"]["properties"]["approve"]["type"], "boolean",
        "{p}"
    );
    p
}

fn approve_writes_once(era: Era) {
    let op = Operator::new(Some(Answer::Approve));
    let (env, c, log) = started(era, prompting_vault(era), op.clone());

    // An ungated call never prompts.
    let r = c.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(text(&r), "v0", "{r}");
    assert_era_logged(era, &log);
    assert!(op.prompts().is_empty(), "{:?}", op.prompts());

    let r = c.call(
        "write_file",
        json!({"path": "note.txt", "content": "approved"}),
    );
    assert_eq!(code(&r), None, "{r}");
    assert!(text(&r).contains("Successfully wrote"), "{r}");
    one_write_prompt(&op);
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("approved"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);

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
    let r = c.call(
        "write_file",
        json!({"path": "note.txt", "content": "declined"}),
    );
    assert_era_logged(era, &log);
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert!(
        text(&r).contains("DECLINED") && text(&r).contains("Do not retry"),
        "{r}"
    );
    assert!(sc(&r).get("recovery").is_none(), "{r}");
    one_write_prompt(&op);
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.declined"), 1);
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
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
