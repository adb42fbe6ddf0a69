//! The Rust MCP SDK (`rmcp` 3.11) as a real client of tc, over stdio (`TokioChildProcess`
//! running tc-shim) or Streamable HTTP (the front, through [`crate::rmcp_http`]): the
//! handler standing in for the human, a client driven synchronously, and the scenes the
//! stdio and HTTP tests share (the CLI-token route, approve, decline), each checking what
//! the SDK handed back AND the file on disk.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, Implementation, ProgressNotificationParam,
    ProtocolVersion,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::{IntoTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{json, Value};

use crate::elicit::{disk, events_of, fs_vault};
use crate::shim::{assert_elicit_required, code, sc, tcctl_elicit, tool, with_token, Env};

/// Which lifecycle the rmcp client uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Era {
    /// `initialize` (what `ServiceExt::serve` does).
    Legacy,
    /// `server/discover` at 2026-07-28, per-request `_meta`, MRTR.
    Modern,
}

impl Era {
    pub fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        }
    }

    /// The protocol version the SDK settles on with server-filesystem behind tc.
    pub fn version(self) -> &'static str {
        match self {
            Era::Legacy => "2025-11-25",
            Era::Modern => "2026-07-28",
        }
    }
}

/// What the test's human answers to a prompt.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// `accept` with `{"approve": true}`.
    Approve,
    /// `decline`.
    Decline,
}

/// The rmcp client handler. Without an answer it advertises no elicitation capability
/// (and records any prompt it gets anyway, which must not happen); with one it
/// advertises `elicitation: {}` (form) and answers every prompt so.
#[derive(Clone)]
pub struct Operator {
    answer: Option<Answer>,
    /// Every `elicitation/create` params the SDK handed to `create_elicitation`.
    prompts: Arc<Mutex<Vec<Value>>>,
    /// Every `notifications/progress` value, in arrival order.
    progress: Arc<Mutex<Vec<f64>>>,
}

impl Operator {
    pub fn new(answer: Option<Answer>) -> Operator {
        Operator {
            answer,
            prompts: Arc::default(),
            progress: Arc::default(),
        }
    }

    pub fn prompts(&self) -> Vec<Value> {
        self.prompts.lock().unwrap().clone()
    }

    pub fn progress(&self) -> Vec<f64> {
        self.progress.lock().unwrap().clone()
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

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params.progress);
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

/// Bounds every SDK operation: a hang fails the test instead of stalling it.
const OP_TIMEOUT: Duration = Duration::from_secs(60);

/// An rmcp client, driven synchronously so the test can run the blocking harness
/// (`tcctl`, the daemon's event log) between calls.
pub struct Rmcp {
    client: Option<RunningService<RoleClient, Operator>>,
    rt: tokio::runtime::Runtime,
}

impl Rmcp {
    /// The handshake over the transport `transport()` makes (inside the client's runtime).
    fn connect<T, E, A>(
        what: &str,
        transport: impl FnOnce() -> T,
        lifecycle: ClientLifecycleMode,
        handler: Operator,
    ) -> Rmcp
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            tokio::time::timeout(
                OP_TIMEOUT,
                handler.serve_with_lifecycle(transport(), lifecycle),
            )
            .await
            .expect("rmcp handshake within 60 s")
            .unwrap_or_else(|e| panic!("rmcp handshake with {what} failed: {e}"))
        });
        Rmcp {
            client: Some(client),
            rt,
        }
    }

    /// tc-shim (`argv`) as the client's child process, over stdio.
    pub fn stdio(argv: &[String], era: Era, handler: Operator) -> Rmcp {
        let spawn = || {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            TokioChildProcess::new(cmd).expect("spawn tc-shim")
        };
        Rmcp::connect(
            &format!("tc-shim ({era:?})"),
            spawn,
            era.lifecycle(),
            handler,
        )
    }

    /// The front at `url`, over Streamable HTTP.
    pub fn http(url: &str, era: Era, handler: Operator) -> Rmcp {
        let transport = || crate::rmcp_http::transport(url, None);
        Rmcp::connect("the front", transport, era.lifecycle(), handler)
    }

    pub fn client(&self) -> &RunningService<RoleClient, Operator> {
        self.client.as_ref().unwrap()
    }

    pub fn run<T>(&self, what: &str, f: impl Future<Output = T>) -> T {
        self.rt
            .block_on(async { tokio::time::timeout(OP_TIMEOUT, f).await })
            .unwrap_or_else(|_| panic!("rmcp {what} did not finish within 60 s"))
    }

    /// The protocol version the SDK negotiated.
    pub fn protocol_version(&self) -> String {
        let info = self
            .client()
            .peer_info()
            .expect("peer info after the handshake");
        info.protocol_version.to_string()
    }

    /// `tools/list` (every page), as JSON.
    pub fn list(&self) -> Value {
        let tools = self
            .run("list_all_tools", self.client().list_all_tools())
            .expect("tools/list");
        json!({ "tools": serde_json::to_value(tools).unwrap() })
    }

    /// `tools/call` through the SDK's high-level `call_tool` (which drives MRTR rounds
    /// through the handler), the result as JSON (camelCase, as on the wire).
    pub fn call_params(&self, params: CallToolRequestParams) -> Value {
        let name = params.name.clone();
        let r = self
            .run("call_tool", self.client().call_tool(params))
            .unwrap_or_else(|e| panic!("rmcp call_tool {name} failed: {e}"));
        serde_json::to_value(r).unwrap()
    }

    /// [`Rmcp::call_params`] with `args` (an object).
    pub fn call(&self, name: &str, args: Value) -> Value {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        self.call_params(CallToolRequestParams::new(name.to_string()).with_arguments(args))
    }
}

impl Drop for Rmcp {
    fn drop(&mut self) {
        // Closes the session (stdio: the shim's stdin, and waits for it to exit; rmcp
        // kills it otherwise).
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(OP_TIMEOUT, c.cancel()).await });
        }
    }
}

/// The text of a result's first content block.
pub fn text(r: &Value) -> &str {
    r["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {r}"))
}

/// A vault in front of server-filesystem (`write_file` gated on `path`, `extra` vault
/// keys), tcd up, `note.txt` = "v0".
pub fn note_env(extra: &str) -> Env {
    let mut env = fs_vault(extra, None);
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    env
}

/// The client cannot be prompted, so a gated call takes the CLI-token route: tools/list
/// advertises the optional `elicit_token` on the gated tool only, the ungated read flows
/// (then `after_read`), the gated write of `content` is refused with the `tcctl elicit`
/// command and nothing written (`refusal(write_file's listing, the refusal)` checks what
/// the transport adds), the real `tcctl` mints, the re-sent call writes once, and the
/// spent token writes nothing; the handler was never asked.
pub fn assert_cli_token_route(
    env: &Env,
    c: &Rmcp,
    op: &Operator,
    content: &str,
    after_read: impl FnOnce(),
    refusal: impl FnOnce(&Value, &Value),
) {
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
    after_read();

    // The gated write without a token: refused with the command, nothing written.
    let args = json!({"path": "note.txt", "content": content});
    let r = c.call("write_file", args.clone());
    refusal(wf, &r);
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(disk(env, "note.txt").as_deref(), Some("v0"));

    // The operator runs that command with the real tcctl; the re-sent call writes once.
    let token = tcctl_elicit(env, &r);
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert!(text(&r).contains("Successfully wrote"), "{r}");
    assert_eq!(disk(env, "note.txt").as_deref(), Some(content));

    // The spent token writes nothing (the removed file stays removed).
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = c.call("write_file", with_token(&args, &token));
    assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_eq!(disk(env, "note.txt"), None, "a spent token must not write");

    assert_eq!(events_of(env, "tc.elicit.consumed"), 1);
    assert!(
        op.prompts().is_empty(),
        "a client without the capability was prompted: {:?}",
        op.prompts()
    );
}

/// Asserts the handler saw exactly one prompt, a form asking to approve the write of
/// `note.txt` in the vault `fs`.
pub fn one_write_prompt(op: &Operator) -> Value {
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

/// The human approves (`op` answers so): an ungated call never prompts (then
/// `after_read`), the gated write of `content` asks once and writes once.
pub fn assert_approve_writes_once(
    env: &Env,
    c: &Rmcp,
    op: &Operator,
    content: &str,
    after_read: impl FnOnce(),
) {
    let r = c.call("read_text_file", json!({"path": "note.txt"}));
    assert_eq!(text(&r), "v0", "{r}");
    after_read();
    assert!(op.prompts().is_empty(), "{:?}", op.prompts());

    let r = c.call(
        "write_file",
        json!({"path": "note.txt", "content": content}),
    );
    assert_eq!(code(&r), None, "{r}");
    assert!(text(&r).contains("Successfully wrote"), "{r}");
    one_write_prompt(op);
    assert_eq!(disk(env, "note.txt").as_deref(), Some(content));
    assert_eq!(events_of(env, "tc.elicit.consumed"), 1);
}

/// The human declines (`op` answers so): the gated write is refused as declined, told not
/// to retry, after one prompt, and nothing is written.
pub fn assert_decline_writes_nothing(env: &Env, c: &Rmcp, op: &Operator) {
    let r = c.call(
        "write_file",
        json!({"path": "note.txt", "content": "declined"}),
    );
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert!(
        text(&r).contains("DECLINED") && text(&r).contains("Do not retry"),
        "{r}"
    );
    assert!(sc(&r).get("recovery").is_none(), "{r}");
    one_write_prompt(op);
    assert_eq!(disk(env, "note.txt").as_deref(), Some("v0"));
    assert_eq!(events_of(env, "tc.elicit.declined"), 1);
    assert_eq!(events_of(env, "tc.elicit.consumed"), 0);
}
