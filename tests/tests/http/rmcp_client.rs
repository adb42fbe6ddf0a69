//! End to end: the Rust MCP SDK (`rmcp` 3.11, its Streamable HTTP client transport over
//! reqwest 0.12, tests/src/rmcp_http.rs) → real `tc-shim serve --http` (auth `none`)
//! → real server-filesystem, real tcd and tcctl.
//!
//! - Legacy (`ClientLifecycleMode::Initialize`, a session): tools listed with the
//!   optional `elicit_token`, an ungated call passes, the gated `write_file` is an
//!   `isError` result coded `elicit_required` (in `_meta["tc/refusal"]`: the tool has an
//!   `outputSchema`; never a prompt over HTTP), the printed `tcctl elicit` mints, the retry writes once, the spent token not.
//! - Modern (`ClientLifecycleMode::Discover` at 2026-07-28, stateless): the SDK's own
//!   input-required driver in `call_tool` asks the handler; approve writes once, decline
//!   writes nothing.
//!
//! - An answer streamed as SSE (server-everything's progress notifications, then the
//!   result) reaches the SDK whole.
//!
//! Every gated case checks what the SDK handed back AND the file on disk.

use tc_tests::shim as support;

use tc_tests::elicit;

use tc_tests::http;

use tc_tests::rmcp_http as rmcp_client;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elicit::{disk, events_of, fs_vault};
use http::Front;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, Implementation, NumberOrString,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{json, Value};
use support::*;

/// The human at the client: None advertises no elicitation capability (and records
/// any prompt anyway, which must not come); Some(accept?) advertises form elicitation.
#[derive(Clone)]
struct Operator {
    accept: Option<bool>,
    prompts: Arc<Mutex<Vec<Value>>>,
    /// Every `notifications/progress` value, in arrival order.
    progress: Arc<Mutex<Vec<f64>>>,
}

impl Operator {
    fn new(accept: Option<bool>) -> Operator {
        Operator {
            accept,
            prompts: Arc::default(),
            progress: Arc::default(),
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
        Ok(match self.accept {
            Some(true) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params.progress);
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        if self.accept.is_some() {
            caps.elicitation = Some(ElicitationCapability::new());
        }
        ClientConfig::new(caps, Implementation::new("tc-tests-rmcp-http", "0.1.0"))
    }
}

/// Bounds every SDK operation: a hang fails the test instead of stalling it.
const OP_TIMEOUT: Duration = Duration::from_secs(60);

/// An rmcp client of the front, driven synchronously so the test can run the blocking
/// harness (`tcctl`, the daemon's event log) between calls.
struct Rmcp {
    client: Option<RunningService<RoleClient, Operator>>,
    rt: tokio::runtime::Runtime,
}

impl Rmcp {
    fn connect(url: &str, lifecycle: ClientLifecycleMode, handler: Operator) -> Rmcp {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            let transport = rmcp_client::transport(url, None);
            tokio::time::timeout(
                OP_TIMEOUT,
                handler.serve_with_lifecycle(transport, lifecycle),
            )
            .await
            .expect("rmcp handshake within 60 s")
            .unwrap_or_else(|e| panic!("rmcp handshake with the front failed: {e}"))
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

    fn protocol_version(&self) -> String {
        let info = self.client().peer_info().expect("peer info");
        info.protocol_version.to_string()
    }

    fn list(&self) -> Value {
        let tools = self
            .run("list_all_tools", self.client().list_all_tools())
            .expect("tools/list");
        json!({ "tools": serde_json::to_value(tools).unwrap() })
    }

    /// `tools/call` through the SDK's `call_tool`, the result as on the wire.
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
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(OP_TIMEOUT, c.cancel()).await });
        }
    }
}

fn text(r: &Value) -> &str {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {r}"))
}

/// The fs vault behind a front, tcd up, `note.txt` = "v0".
fn started() -> (Env, Front) {
    let mut env = fs_vault("", None);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    let front = Front::start(&env, "fs");
    (env, front)
}

#[test]
fn rmcp_legacy_over_http_gets_elicit_required_and_the_cli_route_writes() {
    let (env, front) = started();
    let op = Operator::new(None);
    let c = Rmcp::connect(&front.url(), ClientLifecycleMode::Initialize, op.clone());
    assert_eq!(c.protocol_version(), "2025-11-25");

    let tools = c.list();
    let wf = tool(&tools, "write_file").unwrap_or_else(|| panic!("{tools}"));
    assert_eq!(
        wf["inputSchema"]["properties"]["elicit_token"]["type"], "string",
        "{wf}"
    );
    assert!(tool(&tools, "read_text_file").is_some(), "{tools}");

    let r = c.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(text(&r), "v0", "{r}");

    // The gated write: a tool result the SDK hands back as is, nothing written. write_file
    // declares an outputSchema, so the refusal object is in `_meta["tc/refusal"]` (an SDK
    // validating structuredContent against that schema would reject it there).
    let args = json!({"path": "note.txt", "content": "from rmcp over http"});
    let r = c.call("write_file", args.clone());
    assert_eq!(r["isError"], true, "{r}");
    assert!(wf.get("outputSchema").is_some(), "{wf}");
    assert_eq!(r["_meta"]["tc/refusal"]["code"], "elicit_required", "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(sc(&r)["details"]["caller"], "http-local", "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));

    let token = tcctl_elicit(&env, &r);
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(text(&r).contains("Successfully wrote"), "{r}");
    assert_eq!(
        disk(&env, "note.txt").as_deref(),
        Some("from rmcp over http")
    );

    // Spent: the removed file stays removed.
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(disk(&env, "note.txt"), None, "a spent token must not write");
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
    assert!(op.prompts().is_empty(), "{:?}", op.prompts());
}

/// A call whose answer is an event stream (progress notifications, then the result):
/// the transport's SSE path, not only its JSON one.
#[test]
fn rmcp_legacy_over_http_gets_a_calls_progress_from_its_event_stream() {
    let mut env = Env::with(&Vault::everything("ev"));
    env.start_tcd();
    let front = Front::start(&env, "ev");
    let op = Operator::new(None);
    let c = Rmcp::connect(&front.url(), ClientLifecycleMode::Initialize, op.clone());
    let args = json!({"duration": 0.3, "steps": 3});
    let mut params = CallToolRequestParams::new("trigger-long-running-operation")
        .with_arguments(args.as_object().unwrap().clone());
    params.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
        NumberOrString::String("p1".into()),
    )));
    let r = c
        .run("call_tool", c.client().call_tool(params))
        .unwrap_or_else(|e| panic!("rmcp call_tool failed: {e}"));
    let r = serde_json::to_value(r).unwrap();
    assert!(text(&r).contains("Long running operation completed"), "{r}");
    let seen = wait_until("three progress notifications", || {
        let p = op.progress.lock().unwrap().clone();
        (p.len() >= 3).then_some(p)
    });
    assert_eq!(seen, [1.0, 2.0, 3.0]);
}

fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// The one prompt the handler saw: a form asking to approve the write of note.txt.
fn one_write_prompt(op: &Operator) {
    let prompts = op.prompts();
    assert_eq!(prompts.len(), 1, "one prompt per gated call: {prompts:?}");
    let p = &prompts[0];
    let msg = p["message"].as_str().unwrap_or_else(|| panic!("{p}"));
    assert!(
        msg.contains("`write_file`") && msg.contains("note.txt"),
        "{msg}"
    );
    assert_eq!(
        p["requestedSchema"]["properties"]["approve"]["type"], "boolean",
        "{p}"
    );
}

#[test]
fn rmcp_modern_over_http_approve_writes_once() {
    let (env, front) = started();
    let op = Operator::new(Some(true));
    let c = Rmcp::connect(&front.url(), modern(), op.clone());
    assert_eq!(c.protocol_version(), "2026-07-28");

    let r = c.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(text(&r), "v0", "{r}");
    assert!(op.prompts().is_empty(), "{:?}", op.prompts());

    let args = json!({"path": "note.txt", "content": "approved over http"});
    let r = c.call("write_file", args);
    assert_eq!(code(&r), None, "{r}");
    assert!(text(&r).contains("Successfully wrote"), "{r}");
    one_write_prompt(&op);
    assert_eq!(
        disk(&env, "note.txt").as_deref(),
        Some("approved over http")
    );
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 1);
}

#[test]
fn rmcp_modern_over_http_decline_writes_nothing() {
    let (env, front) = started();
    let op = Operator::new(Some(false));
    let c = Rmcp::connect(&front.url(), modern(), op.clone());
    assert_eq!(c.protocol_version(), "2026-07-28");
    let r = c.call(
        "write_file",
        json!({"path": "note.txt", "content": "declined"}),
    );
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    one_write_prompt(&op);
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(&env, "tc.elicit.consumed"), 0);
}
