//! End to end: tc-shim (stdio front) in front of a remote server over Streamable HTTP (a
//! vault with `url`): real server-everything (`streamableHttp`) and a Python `MCPServer`
//! (`streamable-http`), a stdlib recorder for the headers, a real tcd and tcctl.

use tc_tests::shim as support;

use tc_tests::http;

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// A server process on a free port, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(mut cmd: Command, port: u16) -> Server {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the remote server");
        let mut s = Server { child, port };
        wait_until("the remote server to listen", || {
            assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        s
    }

    /// server-everything with its Streamable HTTP transport.
    fn everything() -> Server {
        let port = tc_tests::free_port();
        let mut cmd = Command::new("node");
        cmd.arg(everything_server())
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        Server::start(cmd, port)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `[[vaults]]` entry for a remote server, no root.
fn remote_vault(id: &str, url: &str, extra: &str) -> String {
    format!("[[vaults]]\nid = \"{id}\"\nurl = \"{url}\"\n{extra}")
}

/// tc-shim's stdio as a JSON-RPC client, its stderr in `log`; stdin can be closed.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Client {
    fn start(env: &Env, vault: &str, extra_env: &[(&str, &str)]) -> (Client, std::path::PathBuf) {
        let (argv, log) = env.shim_argv_logged(vault);
        let mut cmd = argv_command(&argv);
        cmd.envs(extra_env.iter().copied());
        let mut child = spawn_piped(&mut cmd, Stdio::inherit()).expect("spawn tc-shim");
        let stdin = child.stdin.take();
        let lines = lines_of(child.stdout.take().unwrap());
        let c = Client {
            child,
            stdin,
            lines,
        };
        (c, log)
    }

    fn send(&mut self, msg: &Value) {
        let w = self.stdin.as_mut().expect("stdin open");
        writeln!(w, "{msg}").unwrap();
        w.flush().unwrap();
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let l = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer from tc-shim within 60s");
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["id"], id, "answers come in order here: {v}");
        v
    }

    fn initialize(&mut self) -> Value {
        let r = self.request(
            json!("init"),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.request(
            json!(id),
            "tools/call",
            json!({"name": tool, "arguments": args}),
        )
    }

    /// Closes stdin and waits for tc-shim to exit.
    fn close(&mut self) -> std::process::ExitStatus {
        self.stdin.take();
        tc_tests::wait_timeout(&mut self.child, Duration::from_secs(30)).expect("tc-shim exits")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn http_downstream_everything_passes_calls_and_gates_them() {
    let mut server = Server::everything();
    // A key in the url's query (as some hosted servers take one) is never shown.
    let mut env = Env::new(&remote_vault(
        "ev",
        &format!("{}?key=QUERYSECRET", server.url()),
        "\n[[vaults.gates]]\ntool = \"get-sum\"\ntargets = \"none\"\n",
    ));
    env.start_tcd();
    let (mut c, log) = Client::start(&env, "ev", &[]);

    let init = c.initialize();
    assert!(init["result"]["serverInfo"]["name"].is_string(), "{init}");
    let list = c.request(json!(2), "tools/list", json!({}));
    assert!(tool(&list["result"], "echo").is_some(), "{list}");
    assert!(tool(&list["result"], "get-sum").is_some(), "{list}");

    // Ungated: through the gate to the remote server and back.
    let r = c.call(3, "echo", json!({"message": "hi over http"}));
    assert_eq!(text(&r), "Echo: hi over http", "{r}");

    // Gated: elicit_required, the human's tcctl, the retry with the token runs it.
    let args = json!({"a": 2, "b": 3});
    let r = c.call(4, "get-sum", args.clone());
    assert_elicit_required(&r["result"], "get-sum", "ev", &args);
    let token = tcctl_elicit(&env, &r["result"]);
    let r = c.call(5, "get-sum", with_token(&args, &token));
    assert_eq!(r["result"]["isError"], Value::Null, "{r}");
    assert!(text(&r).contains('5'), "the remote server ran it: {r}");
    assert!(
        wait_log(&log, "no local root").contains("gates bind to git, probe or none"),
        "the shim says what a root-less vault cannot do"
    );

    // The server goes away: a clear error under the call's id, not a hang.
    server.stop();
    let r = c.call(6, "echo", json!({"message": "anyone?"}));
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("remote MCP server") && msg.contains("cannot be reached"),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["reason"], "unreachable", "{r}");
    assert!(
        msg.contains("/mcp?…") && !msg.contains("QUERYSECRET"),
        "{r}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("/mcp?…") && !logged.contains("QUERYSECRET"));
}

#[test]
fn http_downstream_oversize_answer_is_refused_by_the_governor() {
    let server = Server::everything();
    let mut env = Env::new(&format!(
        "[governor]\nmax_response_bytes = 1024\n\n{}",
        remote_vault("ev", &server.url(), "")
    ));
    env.start_tcd();
    let (mut c, _log) = Client::start(&env, "ev", &[]);
    c.initialize();
    c.request(json!(2), "tools/list", json!({}));
    let big = "x".repeat(8000);
    let r = c.call(3, "echo", json!({"message": big}));
    assert_eq!(code(&r["result"]).as_deref(), Some("overflow"), "{r}");
    assert!(
        !r.to_string().contains(&big),
        "the answer was not passed on"
    );
    // A small answer still passes.
    let r = c.call(4, "echo", json!({"message": "small"}));
    assert_eq!(text(&r), "Echo: small", "{r}");
}

/// The recorder's log: one JSON object per HTTP request.
fn records(log: &Path) -> Vec<Value> {
    json_lines(log).into_iter().map(Result::unwrap).collect()
}

#[test]
fn http_downstream_sends_bearer_and_session_headers_and_never_logs_the_token() {
    let port = tc_tests::free_port();
    let tmp = tempfile::tempdir().unwrap();
    let rec_log = tmp.path().join("requests.jsonl");
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("http_recorder.py"))
        .arg(port.to_string())
        .arg(&rec_log);
    let server = Server::start(cmd, port);
    let secret = format!(
        "tok-{}",
        tc_tests::h(&format!("{port}{}", std::process::id()))
    );
    let mut env = Env::new(&remote_vault(
        "rec",
        &server.url(),
        "[vaults.headers]\nX-Tenant = \"t1\"\n[vaults.bearer]\nenv = \"TC_TEST_REMOTE_TOKEN\"\n",
    ));
    env.start_tcd();
    let (mut c, log) = Client::start(
        &env,
        "rec",
        &[
            ("TC_TEST_REMOTE_TOKEN", secret.as_str()),
            ("TC_LOG", "trace"),
        ],
    );
    let init = c.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "recorder", "{init}");
    let list = c.request(json!(2), "tools/list", json!({}));
    assert!(
        tool(&list["result"], "noop").is_some(),
        "an SSE answer with a comment: {list}"
    );
    wait_until("the GET stream attempt", || {
        records(&rec_log)
            .iter()
            .any(|r| r["http"] == "GET")
            .then_some(())
    });
    assert!(c.close().success());

    let recs = records(&rec_log);
    let want = format!("Bearer {secret}");
    for r in &recs {
        assert_eq!(r["headers"]["authorization"], want.as_str(), "{r}");
        assert_eq!(r["headers"]["x-tenant"], "t1", "{r}");
    }
    let post = |m: &str| {
        recs.iter()
            .find(|r| r["body"]["method"] == m)
            .unwrap_or_else(|| panic!("no {m} in {recs:?}"))
    };
    let init_h = &post("initialize")["headers"];
    assert!(init_h.get("mcp-session-id").is_none(), "{init_h}");
    assert!(init_h["accept"]
        .as_str()
        .is_some_and(|a| a.contains("application/json") && a.contains("text/event-stream")));
    for m in ["notifications/initialized", "tools/list"] {
        let h = &post(m)["headers"];
        assert_eq!(h["mcp-session-id"], "sess-1", "{m}: {h}");
        assert_eq!(h["mcp-protocol-version"], "2025-11-25", "{m}: {h}");
    }
    let delete = recs
        .iter()
        .find(|r| r["http"] == "DELETE")
        .expect("the session is deleted at shutdown");
    assert_eq!(delete["headers"]["mcp-session-id"], "sess-1");

    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("TRACE") || logged.contains("DEBUG"),
        "verbose logging was on"
    );
    assert!(!logged.contains(&secret), "the token is in tc-shim's log");
}

/// The Python `MCPServer` fixture (`http_py_server.py`) on a free port.
fn python_server() -> Server {
    python_server_on(tc_tests::free_port())
}

fn python_server_on(port: u16) -> Server {
    let mut cmd = Command::new(peers().join("venv/bin/python"));
    cmd.arg(fixture("http_py_server.py")).arg(port.to_string());
    Server::start(cmd, port)
}

#[test]
fn http_downstream_python_mcpserver_passes_calls_in_both_eras() {
    let server = python_server();
    let mut env = Env::new(&remote_vault(
        "py",
        &server.url(),
        "\n[[vaults.gates]]\ntool = \"wipe\"\ntargets = \"none\"\n",
    ));
    env.start_tcd();
    // 2025-11-25: a session.
    let (mut c, _log) = Client::start(&env, "py", &[]);
    let init = c.initialize();
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    let list = c.request(json!(2), "tools/list", json!({}));
    assert!(tool(&list["result"], "shout").is_some(), "{list}");
    let r = c.call(3, "shout", json!({"text": "quiet"}));
    assert_eq!(text(&r), "QUIET", "{r}");
    assert!(c.close().success());

    // 2026-07-28: stateless requests; the server checks the mirror headers against the
    // body (-32020 on a mismatch), so passing proves they are right.
    let (mut c, _log) = Client::start(&env, "py", &[]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    });
    let d = c.request(json!(1), "server/discover", json!({"_meta": meta}));
    assert!(d["result"]["supportedVersions"].is_array(), "{d}");
    let r = c.request(
        json!(2),
        "tools/call",
        json!({"name": "shout", "arguments": {"text": "modern"}, "_meta": meta}),
    );
    assert_eq!(text(&r), "MODERN", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    // Gated: our input_required round, then the accepted retry reaches the server.
    let args = json!({"name": "db"});
    let r = c.request(
        json!(3),
        "tools/call",
        json!({"name": "wipe", "arguments": args, "_meta": meta}),
    );
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let state = r["result"]["requestState"].as_str().expect("requestState");
    let r = c.request(
        json!(4),
        "tools/call",
        json!({"name": "wipe", "arguments": args, "_meta": meta, "requestState": state,
               "inputResponses": {"confirm": {"action": "accept", "content": {"approve": true}}}}),
    );
    assert_eq!(text(&r), "wiped db", "{r}");
    assert!(c.close().success());
}

/// A remote that forgets the session (restarted: the Python SDK answers 404 for an id it
/// does not know) ends the HTTP front's session too: the call that found out gets a clear
/// error, the front's session id then reads 404 (the spec's signal to initialize again),
/// and the client's new session gets a new session at the remote. tc-shim never
/// re-initializes on its own behind a client's back.
#[test]
fn a_remote_that_forgets_the_session_ends_the_front_session_and_a_new_one_works() {
    let port = tc_tests::free_port();
    let mut server = python_server_on(port);
    let mut env = Env::new(&remote_vault("py", &server.url(), ""));
    env.start_tcd();
    let front = http::Front::start(&env, "py");
    let mut c = http::Raw::new(&front.url());
    // `Raw::call` gives the result itself.
    let said = |r: Value| {
        r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    c.initialize();
    assert_eq!(said(c.call(1, "shout", json!({"text": "a"}))), "A");
    let before = c.session.clone().unwrap();

    server.stop();
    let _server = python_server_on(port);
    let e = c.call(2, "shout", json!({"text": "b"}));
    assert_eq!(e["data"]["reason"], "session_gone", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("initialize again"),
        "{e}"
    );
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "shout", "arguments": {"text": "c"}}});
    let a = c.post(&call, &[("mcp-protocol-version", "2025-11-25")]);
    assert_eq!(
        a.status, 404,
        "the front's session outlived the remote's: {}",
        a.text
    );

    // A new session, as the spec asks of a client on 404: initialize without the old id.
    c.session = None;
    c.initialize();
    assert_ne!(c.session.as_deref(), Some(before.as_str()));
    assert_eq!(said(c.call(4, "shout", json!({"text": "d"}))), "D");
}

/// SEP-2243: a tool's `x-mcp-header` argument rides in `Mcp-Param-{Name}`. The Python SDK's
/// 2026-07-28 transport refuses a call whose header is missing or disagrees with the body,
/// so its answers show tc mirrors it (plain and base64); the HTTP front refuses a caller
/// whose header says something else than the body it judges.
#[test]
fn x_mcp_header_arguments_are_mirrored_to_the_remote_and_checked_at_the_front() {
    let server = python_server();
    let mut env = Env::new(&remote_vault("py", &server.url(), ""));
    env.start_tcd();
    let meta = http::modern_meta();
    let (mut c, _log) = Client::start(&env, "py", &[]);
    let list = c.request(json!(1), "tools/list", json!({"_meta": meta}));
    let deploy = tool(&list["result"], "deploy").expect("deploy is listed");
    assert_eq!(
        deploy["inputSchema"]["properties"]["region"]["x-mcp-header"], "Region",
        "{deploy}"
    );
    // A conforming client drops a tool whose declarations are invalid; tc also refuses
    // to call it (it could not send the headers the remote expects).
    assert!(tool(&list["result"], "mislabeled").is_none(), "{list}");
    let r = c.request(
        json!(5),
        "tools/call",
        json!({"name": "mislabeled", "arguments": {"count": "1"}, "_meta": meta}),
    );
    assert_eq!(r["error"]["data"]["reason"], "invalid_tool_schema", "{r}");
    for (id, region) in [(2, "eu-west1"), (3, "zürich "), (4, "=?base64?eA==?=")] {
        let r = c.request(
            json!(id),
            "tools/call",
            json!({"name": "deploy", "arguments": {"region": region, "query": "q"}, "_meta": meta}),
        );
        assert_eq!(text(&r), format!("q in {region}"), "{r}");
    }
    assert!(c.close().success());

    let front = http::Front::start(&env, "py");
    let raw = http::Raw::new(&front.url());
    // No tools/list first: the engine lists the tool and checks the headers inside its
    // admission bound.
    let args = json!({"arguments": {"region": "eu-west1", "query": "q"}});
    let (body, base) = http::modern_call(7, "deploy", args);
    let post = |extra: &[(&str, &str)]| {
        let mut h: Vec<(&str, &str)> = base.iter().map(|(k, v)| (*k, v.as_str())).collect();
        h.extend_from_slice(extra);
        raw.post(&body, &h)
    };
    for (extra, why) in [
        (&[][..], "missing"),
        (&[("mcp-param-region", "us-east1")][..], "does not match"),
        (&[("Mcp-Param-Region", "=?base64?!!?=")][..], "not valid"),
    ] {
        let a = post(extra);
        assert_eq!(a.status, 400, "{extra:?}: {}", a.text);
        assert_eq!(a.last()["error"]["code"], -32020, "{}", a.text);
        assert!(a.text.contains(why), "{extra:?}: {}", a.text);
    }
    let a = post(&[("Mcp-Param-Region", "eu-west1")]);
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        a.last()["result"]["content"][0]["text"],
        "q in eu-west1",
        "{}",
        a.text
    );
}

/// An https remote: tc-shim's own TLS (rustls, the public roots) trusts a private CA only
/// when the vault names it in `ca_file`; without it the handshake is refused, clearly.
#[test]
fn an_https_remote_is_trusted_through_ca_file_and_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = tc_tests::free_port();
    let mut cmd = Command::new(peers().join("venv/bin/python"));
    cmd.arg(fixture("https_py_server.py"))
        .arg(port.to_string())
        .arg(dir.path());
    let _server = Server::start(cmd, port);
    let url = format!("https://localhost:{port}/mcp");
    let ca = dir.path().join("ca.pem");

    let trusted = format!("ca_file = \"{}\"\n", ca.display());
    let mut env = Env::new(&remote_vault("tls", &url, &trusted));
    env.start_tcd();
    let (mut c, _log) = Client::start(&env, "tls", &[]);
    let init = c.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "py-tls", "{init}");
    let r = c.call(2, "shout", json!({"text": "over tls"}));
    assert_eq!(text(&r), "OVER TLS", "{r}");
    assert!(c.close().success());

    let mut env = Env::new(&remote_vault("tls", &url, ""));
    env.start_tcd();
    let (mut c, _log) = Client::start(&env, "tls", &[]);
    let init = c.initialize();
    let msg = init["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("cannot be reached") && msg.contains("UnknownIssuer"),
        "{init}"
    );
    assert_eq!(init["error"]["data"]["reason"], "unreachable", "{init}");
    assert!(c.close().success());
}
