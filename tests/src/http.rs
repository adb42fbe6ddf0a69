//! The HTTP front under test: a real `tc-shim serve VAULT --http` on a free port, and a
//! raw Streamable HTTP client (reqwest) that reads JSON and event-stream answers alike.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use crate::shim::{sc, with_token, Env};

/// A running `tc-shim serve … --http 127.0.0.1:PORT`, killed on drop.
pub struct Front {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Front {
    /// Starts the front for `vault` and waits until it accepts connections.
    pub fn start(env: &Env, vault: &str) -> Front {
        Front::start_with(env, vault, &[])
    }

    /// As [`Front::start`], with extra environment variables for tc-shim.
    pub fn start_with(env: &Env, vault: &str, vars: &[(&str, &str)]) -> Front {
        Front::start_argv(env.shim_argv(vault), env.tmp.path(), vars)
    }

    /// A front from `argv` (a `tc-shim serve VAULT …` command line, without `--http`),
    /// its stderr logged in `logs`; waits until it accepts connections.
    pub fn start_argv(argv: Vec<String>, logs: &Path, vars: &[(&str, &str)]) -> Front {
        let port = crate::free_port();
        let log = logs.join(format!("http-{port}.log"));
        let mut argv = argv;
        argv.push("--http".into());
        argv.push(format!("127.0.0.1:{port}"));
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start tc-shim --http");
        let f = Front { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "front never listened: {}",
                f.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        f
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `within` for tc-shim to exit; its status, if it did.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        crate::wait_timeout(&mut self.child, within)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP answer: status, headers, and the JSON-RPC messages in its body (one for
/// JSON, every `data:` event for an event stream; the last is the answer).
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub messages: Vec<Value>,
    pub text: String,
}

impl Answer {
    /// The last message (the request's answer).
    pub fn last(&self) -> &Value {
        self.messages
            .last()
            .unwrap_or_else(|| panic!("no message in {} {:?}", self.status, self.text))
    }
}

/// A raw client: extra headers per request, blocking on its own runtime.
pub struct Raw {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
}

impl Raw {
    pub fn new(url: &str) -> Raw {
        Raw {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            http: reqwest::Client::new(),
            url: url.to_string(),
            session: None,
        }
    }

    /// POSTs `body` with the transport's required headers plus `extra`.
    pub fn post(&self, body: &Value, extra: &[(&str, &str)]) -> Answer {
        self.post_bytes(body.to_string().into_bytes(), extra)
    }

    pub fn post_bytes(&self, body: Vec<u8>, extra: &[(&str, &str)]) -> Answer {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        self.send(req)
    }

    pub fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        self.rt.block_on(async {
            let r = req.send().await.expect("HTTP request");
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let text = r.text().await.unwrap_or_default();
            let sse = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("text/event-stream"));
            let messages = if sse {
                text.lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .filter_map(|d| serde_json::from_str(d.trim()).ok())
                    .collect()
            } else {
                serde_json::from_str(&text).into_iter().collect()
            };
            Answer {
                status,
                headers,
                messages,
                text,
            }
        })
    }

    pub fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, &self.url);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        req
    }

    /// `initialize` + `notifications/initialized`; keeps the session id.
    pub fn initialize(&mut self) -> Value {
        let a = self.post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}),
            &[],
        );
        assert_eq!(a.status, 200, "{}", a.text);
        let sid = a.headers.get("mcp-session-id").expect("MCP-Session-Id");
        self.session = Some(sid.to_str().unwrap().to_string());
        let n = self.post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[("mcp-protocol-version", "2025-11-25")],
        );
        assert_eq!(n.status, 202, "{}", n.text);
        a.last().clone()
    }

    /// A legacy-session `tools/call`; the result (or the error object).
    pub fn call(&self, id: u64, name: &str, args: Value) -> Value {
        let a = self.post(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": args}}),
            &[("mcp-protocol-version", "2025-11-25")],
        );
        assert_eq!(a.status, 200, "{}", a.text);
        let m = a.last();
        m.get("result")
            .or(m.get("error"))
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// The 2026-07-28 envelope.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    })
}

/// A stateless `tools/call` body and the routing headers that match it.
pub fn modern_call(id: u64, name: &str, params: Value) -> (Value, Vec<(&'static str, String)>) {
    let mut p = params;
    p["name"] = json!(name);
    p["_meta"] = modern_meta();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": p});
    let headers = vec![
        ("mcp-protocol-version", "2026-07-28".to_string()),
        ("mcp-method", "tools/call".to_string()),
        ("mcp-name", name.to_string()),
    ];
    (body, headers)
}

/// A file under the vault root, if it is there.
pub fn disk(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.root.join(rel)).ok()
}

/// A bearer token for caller `sub` of vault `fs`, minted with `tcctl token mint`.
#[track_caller]
pub fn mint_bearer(env: &Env, sub: &str) -> String {
    let o = env
        .tcd
        .tcctl(&["token", "mint", "--sub", sub, "--vault", "fs"]);
    crate::shim::assert_ok(&o);
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// A legacy session of the bearer of `token`; the client and its `Authorization` value.
pub fn bearer_session(front: &Front, token: &str) -> (Raw, String) {
    let mut c = Raw::new(&front.url());
    let bearer = format!("Bearer {token}");
    let a = c.post(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        &[("authorization", &bearer)],
    );
    assert_eq!(a.status, 200, "{}", a.text);
    c.session = Some(a.headers["mcp-session-id"].to_str().unwrap().to_string());
    (c, bearer)
}

/// A `tools/call` on `c`'s session with `bearer`; the result.
pub fn bearer_call(c: &Raw, bearer: &str, id: u64, name: &str, args: Value) -> Value {
    let a = c.post(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}}),
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("authorization", bearer),
        ],
    );
    assert_eq!(a.status, 200, "{}", a.text);
    a.last()["result"].clone()
}

/// `approval` (alice's) used by bob on his own session is refused `binding_mismatch` and
/// writes nothing; alice's own retry runs it (writes `note.txt` = `content`). `id` and
/// `id + 1` are the two calls' ids.
pub fn only_alice_redeems(
    env: &Env,
    alice: (&Raw, &str),
    bob: (&Raw, &str),
    args: &Value,
    approval: &str,
    id: u64,
) {
    let r = bearer_call(bob.0, bob.1, id, "write_file", with_token(args, approval));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(sc(&r)["details"]["reason"], "binding_mismatch", "{r}");
    assert_eq!(disk(env, "note.txt"), None, "bob ran alice's approval");
    let r = bearer_call(
        alice.0,
        alice.1,
        id + 1,
        "write_file",
        with_token(args, approval),
    );
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(
        disk(env, "note.txt").as_deref(),
        args["content"].as_str(),
        "alice's own retry runs it"
    );
}
