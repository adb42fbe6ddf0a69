//! End to end, the Streamable HTTP front: a raw HTTP client → real `tc-shim serve --http`
//! → real server-filesystem, real tcd. Both eras on one endpoint; the gate, the CLI route
//! and the 2026-07-28 round trip through HTTP; the front door's refusals. Every gated
//! case checks the file on disk too.

use tc_tests::shim as support;

use tc_tests::elicit;

use tc_tests::http;

use elicit::fs_vault;
use http::*;
use serde_json::{json, Value};
use support::*;

fn started(extra: &str) -> (Env, Front) {
    let mut env = fs_vault(extra, None);
    env.start_tcd();
    let front = Front::start(&env, "fs");
    (env, front)
}

#[test]
fn a_legacy_session_gets_elicit_required_and_the_cli_route_runs_the_call() {
    let (env, front) = started("");
    let mut c = Raw::new(&front.url());
    let init = c.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let list = c.post(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        &[("mcp-protocol-version", "2025-11-25")],
    );
    assert!(
        tool(&list.last()["result"], "write_file").is_some(),
        "{}",
        list.text
    );

    let args = json!({"path": "note.txt", "content": "over http"});
    let r = c.call(2, "write_file", args.clone());
    // Never a server-initiated elicitation on HTTP: the CLI route, bound to http-local.
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(sc(&r)["details"]["caller"], "http-local", "{r}");
    assert_eq!(
        disk(&env, "note.txt"),
        None,
        "the gated call ran unapproved"
    );

    let token = tcctl_elicit(&env, &r);
    let r = c.call(3, "write_file", with_token(&args, &token));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("over http"));
    // The token is spent.
    let r = c.call(4, "write_file", with_token(&args, &token));
    assert!(code(&r).is_some(), "a spent token ran again: {r}");
}

/// The front's threads (`workers.rs`): one session used over a fresh connection per
/// request meets every thread in turn (connections are handed round robin), while its
/// engine stays on the thread that took `initialize`. Its calls, gated and approved, run
/// as on one connection; SIGTERM ends the front, and a GET stream held open is ended by
/// the front first (it once kept the graceful shutdown waiting for ever).
#[test]
fn one_session_over_connections_on_every_worker_thread() {
    let mut env = fs_vault("", None);
    env.start_tcd();
    let mut front = Front::start_with(&env, "fs", &[("TC_HTTP_WORKERS", "3")]);
    // `start_with` returned once the port took a connection, and the front opens it only
    // once every thread is running (named) and serving.
    let threads = thread_names(front.pid());
    for t in ["tc-http-1", "tc-http-2"] {
        assert!(threads.iter().any(|n| n == t), "no thread {t}: {threads:?}");
    }
    let mut first = Raw::new(&front.url());
    first.initialize();
    let fresh = || {
        let mut c = Raw::new(&front.url());
        c.session = first.session.clone();
        c
    };
    let args = json!({"path": "spread.txt", "content": "from every thread"});
    let r = fresh().call(1, "write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(
        disk(&env, "spread.txt"),
        None,
        "the gated call ran unapproved"
    );
    let token = tcctl_elicit(&env, &r);
    let r = fresh().call(2, "write_file", with_token(&args, &token));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(
        disk(&env, "spread.txt").as_deref(),
        Some("from every thread")
    );
    for id in 3..9 {
        let r = fresh().call(id, "read_text_file", json!({"path": "spread.txt"}));
        assert_eq!(r["content"][0]["text"], "from every thread", "{r}");
    }
    // A GET stream held open does not keep the front from ending.
    let stream = open_get_stream(&front, first.session.as_deref().unwrap());
    drop(first);
    let st = front
        .terminate(std::time::Duration::from_secs(10))
        .expect("tc-shim did not exit on SIGTERM");
    assert!(st.success(), "{st:?}: {}", front.stderr());
    assert!(
        !front.stderr().contains("still open"),
        "the stop waited out its drain instead of ending the stream: {}",
        front.stderr()
    );
    // …and it was ended by the front (the chunked body's last chunk), not cut off.
    let mut rest = Vec::new();
    let mut stream = stream;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let _ = std::io::Read::read_to_end(&mut stream, &mut rest);
    assert!(
        rest.ends_with(b"0\r\n\r\n"),
        "the GET stream was not ended cleanly: {:?}",
        String::from_utf8_lossy(&rest)
    );
}

/// A legacy session's GET stream on a connection of its own, its headers read, held open.
fn open_get_stream(front: &Front, sid: &str) -> std::net::TcpStream {
    use std::io::{BufRead, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", front.port)).unwrap();
    write!(
        s,
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n",
        front.port
    )
    .unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.contains(" 200 "), "GET stream: {status:?}");
    s
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn the_front_door_refuses_rebinding_foreign_origins_and_query_tokens() {
    let (_env, front) = started("");
    let mut c = Raw::new(&front.url());
    c.initialize();
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    let v = ("mcp-protocol-version", "2025-11-25");
    assert_eq!(c.post(&ping, &[v]).status, 200);
    assert_eq!(c.post(&ping, &[v, ("host", "evil.example")]).status, 403);
    assert_eq!(
        c.post(&ping, &[v, ("origin", "http://evil.example")])
            .status,
        403
    );
    let local = format!("http://localhost:{}", front.port);
    assert_eq!(c.post(&ping, &[v, ("origin", local.as_str())]).status, 200);

    let q = Raw::new(&format!("{}?access_token=abc", front.url()));
    let a = q.post(&ping, &[v]);
    assert_eq!(a.status, 400, "{}", a.text);
    assert!(a.text.contains("query string"), "{}", a.text);

    // Content negotiation, framing and sessions.
    for (content_type, accept, status) in [
        ("application/json", "application/json", 406),
        ("text/plain", "application/json, text/event-stream", 415),
    ] {
        let a = c.send(
            c.request(reqwest::Method::POST)
                .header("content-type", content_type)
                .header("accept", accept)
                .body(ping.to_string()),
        );
        assert_eq!(a.status, status, "{content_type} / {accept}: {}", a.text);
    }
    let a = c.post(&json!([ping]), &[v]);
    assert_eq!(a.status, 400, "{}", a.text);
    let a = c.post_bytes(b"{\"jsonrpc\":".to_vec(), &[v]);
    assert_eq!(a.status, 400, "{}", a.text);
    assert_eq!(a.last()["error"]["code"], -32700, "{}", a.text);
    let mut stranger = Raw::new(&front.url());
    stranger.session = Some("00".repeat(16));
    assert_eq!(stranger.post(&ping, &[v]).status, 404);
    let none = Raw::new(&front.url());
    assert_eq!(none.post(&ping, &[v]).status, 400);
}

#[test]
fn delete_ends_the_session_and_the_modern_era_has_no_get_stream() {
    let (_env, front) = started("");
    let mut c = Raw::new(&front.url());
    c.initialize();
    let a = c.send(c.request(reqwest::Method::DELETE));
    assert_eq!(a.status, 200, "{}", a.text);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(c.post(&ping, &[]).status, 404);
    assert_eq!(c.send(c.request(reqwest::Method::DELETE)).status, 404);
    let a = c.send(
        c.request(reqwest::Method::GET)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2026-07-28"),
    );
    assert_eq!(a.status, 405, "{}", a.text);
    assert_eq!(a.headers.get("allow").unwrap(), "POST");
}

#[test]
fn a_body_over_the_cap_is_refused_with_413() {
    let (_env, front) = started("[vaults.http]\nmax_body_bytes = 1024\n");
    let mut c = Raw::new(&front.url());
    c.initialize();
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "x", "content": "a".repeat(4096)}}});
    let a = c.post(&big, &[("mcp-protocol-version", "2025-11-25")]);
    assert_eq!(a.status, 413, "{}", a.text);
}

#[test]
fn the_modern_round_trip_runs_over_http_and_headers_must_match_the_body() {
    let (env, front) = started("");
    let c = Raw::new(&front.url());
    let args = json!({"path": "note.txt", "content": "modern"});
    let (body, headers) = modern_call(1, "write_file", json!({"arguments": args}));
    let hdrs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // An intermediary shown read_text_file while the body writes: refused, nothing ran.
    let mut lying = hdrs.clone();
    lying[2] = ("mcp-name", "read_text_file");
    let a = c.post(&body, &lying);
    assert_eq!(a.status, 400, "{}", a.text);
    assert_eq!(a.last()["error"]["code"], -32020, "{}", a.text);

    let a = c.post(&body, &hdrs);
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.last()["id"], 1, "the client's id comes back: {}", a.text);
    let r = &a.last()["result"];
    assert_eq!(r["resultType"], "input_required", "{r}");
    let state = r["requestState"]
        .as_str()
        .expect("requestState")
        .to_string();
    assert_eq!(disk(&env, "note.txt"), None);

    let resend = |id: u64, answer: Value| -> Value {
        let (b, h) = modern_call(
            id,
            "write_file",
            json!({"arguments": args,
            "requestState": state, "inputResponses": {"confirm": answer}}),
        );
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let a = c.post(&b, &h);
        assert_eq!(a.status, 200, "{}", a.text);
        a.last()["result"].clone()
    };
    let r = resend(2, json!({"action": "accept", "content": {"approve": true}}));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("modern"));
}

/// Route 3u over HTTP: a 2026-07-28 caller that declares URL mode, with `[approvals]
/// listen` set, gets its request's page link inside `input_required` (no request of the
/// shim's own is needed); the re-sent call runs once the human approved that request, and
/// its state is spent. A legacy session declaring URL mode on the same front still gets
/// the CLI route, even on a vault that opts in to the legacy prompts: over HTTP the shim
/// sends no request of its own.
#[test]
fn a_modern_url_caller_gets_the_page_link_and_runs_once_approved() {
    let port = tc_tests::free_port();
    let mut env = fs_vault("legacy_elicitation_shim = true", None);
    let text = std::fs::read_to_string(&env.config).unwrap();
    let text = format!("{text}\n[approvals]\nlisten = \"127.0.0.1:{port}\"\n");
    std::fs::write(&env.config, text).unwrap();
    env.start_tcd();
    let front = Front::start(&env, "fs");
    let c = Raw::new(&front.url());
    let args = json!({"path": "linked.txt", "content": "approved on the page"});
    let call = |id: u64, extra: Value| -> Value {
        let mut params = json!({"arguments": args});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        let (mut body, headers) = modern_call(id, "write_file", params);
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"elicitation": {"url": {}}});
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let a = c.post(&body, &h);
        assert_eq!(a.status, 200, "{}", a.text);
        a.last()["result"].clone()
    };
    let r = call(1, json!({}));
    assert_eq!(r["resultType"], "input_required", "{r}");
    let prompt = &r["inputRequests"]["confirm"]["params"];
    assert_eq!(prompt["mode"], "url", "{r}");
    let prefix = format!("http://127.0.0.1:{port}/requests/");
    let id = prompt["url"]
        .as_str()
        .and_then(|u| u.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no page link: {r}"))
        .to_string();
    let state = r["requestState"]
        .as_str()
        .expect("requestState")
        .to_string();
    assert_eq!(disk(&env, "linked.txt"), None, "ran before any approval");

    tcctl_approve(&env, &id);
    let resent =
        json!({"requestState": state, "inputResponses": {"confirm": {"action": "accept"}}});
    let r = call(2, resent.clone());
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(
        disk(&env, "linked.txt").as_deref(),
        Some("approved on the page")
    );
    // The state is spent: the same round 2 again runs nothing.
    std::fs::remove_file(env.root.join("linked.txt")).unwrap();
    let r = call(3, resent);
    assert!(code(&r).is_some(), "a spent state ran again: {r}");
    assert_eq!(disk(&env, "linked.txt"), None);

    let mut legacy = Raw::new(&front.url());
    let init = legacy.post(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        &[],
    );
    let sid = init.headers.get("mcp-session-id").expect("MCP-Session-Id");
    legacy.session = Some(sid.to_str().unwrap().to_string());
    let v = [("mcp-protocol-version", "2025-11-25")];
    let n = legacy.post(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &v,
    );
    assert_eq!(n.status, 202, "{}", n.text);
    let r = legacy.call(1, "write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(disk(&env, "linked.txt"), None);
}

#[test]
fn a_modern_decline_over_http_is_a_hard_stop() {
    let (env, front) = started("");
    let c = Raw::new(&front.url());
    let args = json!({"path": "note.txt", "content": "never"});
    let (body, headers) = modern_call(1, "write_file", json!({"arguments": args}));
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = c.post(&body, &h);
    let state = a.last()["result"]["requestState"]
        .as_str()
        .expect("state")
        .to_string();
    let (b, h2) = modern_call(
        2,
        "write_file",
        json!({"arguments": args,
        "requestState": state, "inputResponses": {"confirm": {"action": "decline"}}}),
    );
    let h2: Vec<(&str, &str)> = h2.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = c.post(&b, &h2).last()["result"].clone();
    assert_eq!(code(&r).as_deref(), Some("approval_declined"), "{r}");
    assert_eq!(disk(&env, "note.txt"), None, "the declined call ran");
}

#[test]
fn auth_none_on_a_public_bind_is_refused_at_startup() {
    let env = fs_vault("", None);
    let mut argv = env.shim_argv("fs");
    argv.push("--http".into());
    argv.push(format!("0.0.0.0:{}", tc_tests::free_port()));
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback"), "{err}");
}

#[test]
fn a_full_session_table_answers_503_and_a_freed_place_is_reused() {
    let (_env, front) = started("[vaults.http]\nmax_sessions = 2\n");
    let mut a = Raw::new(&front.url());
    a.initialize();
    let mut b = Raw::new(&front.url());
    b.initialize();
    let c = Raw::new(&front.url());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let r = c.post(&init, &[]);
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.headers.get("retry-after").is_some());
    // A 2026-07-28 caller needs a place too.
    let (body, headers) = modern_call(1, "list_allowed_directories", json!({"arguments": {}}));
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(c.post(&body, &h).status, 503);
    assert_eq!(a.send(a.request(reqwest::Method::DELETE)).status, 200);
    assert_eq!(
        c.post(&init, &[]).status,
        200,
        "the ended session's place is free again"
    );
}

#[test]
fn a_call_whose_name_is_not_a_string_is_refused_not_forwarded() {
    let (env, front) = started("");
    let mut c = Raw::new(&front.url());
    c.initialize();
    let args = json!({"path": "note.txt", "content": "x"});
    for name in [json!(["write_file"]), json!(7), json!(null)] {
        let a = c.post(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": name, "arguments": args}}),
            &[("mcp-protocol-version", "2025-11-25")],
        );
        let r = &a.last()["result"];
        // tc's own refusal, not the server's answer to a call it was sent.
        assert_eq!(code(r).as_deref(), Some("invalid_input"), "{}", a.text);
    }
    assert_eq!(disk(&env, "note.txt"), None);
}

/// A body naming a member twice (the id included) is refused at the door as invalid,
/// never judged on one value and forwarded with both.
#[test]
fn a_body_naming_a_member_twice_is_refused() {
    let (env, front) = started("");
    let mut c = Raw::new(&front.url());
    c.initialize();
    let v = ("mcp-protocol-version", "2025-11-25");
    let dup_name = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"a.txt","content":"x"},"name":"read_text_file"}}"#;
    let dup_id = br#"{"jsonrpc":"2.0","id":6,"method":"ping","id":7}"#;
    for body in [&dup_name[..], &dup_id[..]] {
        let a = c.post_bytes(body.to_vec(), &[v]);
        assert_eq!(a.status, 400, "{}", a.text);
        assert_eq!(a.last()["error"]["code"], -32600, "{}", a.text);
        assert!(a.text.contains("twice"), "{}", a.text);
    }
    assert_eq!(disk(&env, "a.txt"), None);
}

/// The front before server-everything, and one legacy session on it (and its id).
fn everything_session() -> (Env, Front, Raw, String) {
    let mut env = Env::with(&Vault::everything("ev"));
    env.start_tcd();
    let front = Front::start(&env, "ev");
    let mut c = Raw::new(&front.url());
    c.initialize();
    let session = c.session.clone().unwrap();
    (env, front, c, session)
}

/// Two long calls at once on one session (server-everything's progress tool): each
/// one's progress comes on its own POST's stream, by its `progressToken`, not on the
/// newest exchange's.
#[test]
fn progress_goes_with_the_request_it_reports_on() {
    let (_env, front, _c, session) = everything_session();
    let call = |id: u64, token: &'static str, delay_ms: u64| {
        let (url, session) = (front.url(), session.clone());
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            let mut c = Raw::new(&url);
            c.session = Some(session);
            c.post(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "trigger-long-running-operation",
                    "arguments": {"duration": 2, "steps": 4},
                    "_meta": {"progressToken": token}}}),
                &[("mcp-protocol-version", "2025-11-25")],
            )
        })
    };
    let (a, b) = (call(1, "tok-a", 0), call(2, "tok-b", 300));
    for (answer, own, id) in [
        (a.join().unwrap(), "tok-a", 1),
        (b.join().unwrap(), "tok-b", 2),
    ] {
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert_eq!(answer.last()["id"], id, "{}", answer.text);
        let tokens: Vec<&Value> = answer
            .messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .map(|m| &m["params"]["progressToken"])
            .collect();
        assert_eq!(
            tokens.len(),
            4,
            "every step reported on its own call: {}",
            answer.text
        );
        assert!(tokens.iter().all(|t| *t == own), "{own}: {}", answer.text);
    }
}

/// A client that hangs up in the middle of a call: its exchange is dropped, the cancel
/// goes into the engine (which may answer at once), and the session goes on serving. The
/// front lets go of the call's id: a request reusing it is the engine's to judge (which
/// holds it while the server may still answer the cancelled call), never refused by a
/// waiter the front left behind.
#[test]
fn a_hang_up_mid_call_leaves_the_session_serving_and_its_id_to_the_engine() {
    use std::io::{Read, Write};
    let (_env, front, c, session) = everything_session();
    let url: reqwest::Url = front.url().parse().unwrap();
    // Progress every second: the first event says the call is in flight.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "trigger-long-running-operation", "arguments": {"duration": 30, "steps": 30},
        "_meta": {"progressToken": "p"}}})
    .to_string();
    let mut s = std::net::TcpStream::connect((url.host_str().unwrap(), url.port().unwrap()))
        .expect("connect to the front");
    write!(
        s,
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
        url.path(),
        url.authority(),
        body.len()
    )
    .unwrap();
    let v = [("mcp-protocol-version", "2025-11-25")];
    let echo = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"message": "after the hang-up"}}})
    };
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("notifications/progress") {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("the call's event stream");
        assert!(n > 0, "the front closed the call's stream: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    // While the call runs, the front itself refuses its id (400).
    let busy = c.post(&echo(7), &v);
    assert_eq!(busy.status, 400, "{}", busy.text);
    assert!(busy.text.contains("already in use"), "{}", busy.text);
    drop(s);
    // Hung up: the front lets the id go; the engine still holds it for the server's
    // answer to the cancelled call (200, its JSON-RPC error).
    let held = wait_until("the front to let go of the hung-up call's id", || {
        let a = c.post(&echo(7), &v);
        (a.status != 400).then_some(a)
    });
    assert_eq!(held.status, 200, "{}", held.text);
    assert_eq!(held.last()["id"], 7, "{}", held.text);
    assert!(held.last().get("error").is_some(), "{}", held.text);
    let next = c.post(&echo(8), &v);
    assert_eq!(next.status, 200, "{}", next.text);
    assert_eq!(next.last()["id"], 8, "{}", next.text);
    assert!(next.text.contains("after the hang-up"), "{}", next.text);
}

/// A `subscriptions/listen` stream: the next JSON-RPC message on it (30 s at most).
async fn next_frame(resp: &mut reqwest::Response, buf: &mut String) -> Value {
    loop {
        if let Some(end) = buf.find('\n') {
            let line: String = buf.drain(..=end).collect();
            if let Some(d) = line.trim().strip_prefix("data:") {
                return serde_json::from_str(d.trim()).expect("a JSON-RPC message");
            }
            continue;
        }
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), resp.chunk())
            .await
            .expect("a frame within 30 s")
            .expect("the stream reads")
            .expect("the stream stays open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

/// 2026-07-28 `subscriptions/listen` through the front, in front of a legacy server on
/// the real TypeScript SDK whose lists change: each stream is acknowledged first, then gets the
/// list-changed notifications it asked for and no others, tagged with its request id;
/// the tool call that changed the list does not carry the notification.
#[test]
fn listen_streams_get_the_list_changes_they_asked_for_and_nothing_else() {
    let fixture = workspace().join("tests/fixtures/list_changed_server.mjs");
    let modules = peers().join("npm/node_modules");
    let env = {
        let mut e = Env::new(&format!(
            "[[vaults]]\nid = \"lc\"\nroot = \"$ROOT\"\ncommand = [\"node\", {:?}, {:?}]\n",
            fixture.display().to_string(),
            modules.display().to_string()
        ));
        e.start_tcd();
        e
    };
    let front = Front::start(&env, "lc");
    let url = front.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let post = |id: Value, method: &str, params: Value| {
            let mut p = params;
            p["_meta"] = modern_meta();
            let mut req = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", method);
            if let Some(n) = p.get("name").and_then(Value::as_str) {
                req = req.header("mcp-name", n);
            }
            req.body(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": p}).to_string())
                .send()
        };
        // With no stream open, a change goes nowhere: never onto a request's answer.
        let early = post(
            json!(0),
            "tools/call",
            json!({"name": "grow", "arguments": {"name": "early"}}),
        );
        let early = early.await.unwrap().text().await.unwrap();
        assert!(
            early.contains("added early") && !early.contains("list_changed"),
            "{early}"
        );
        let listen = |id: &str, what: &str| {
            post(
                json!(id),
                "subscriptions/listen",
                json!({"notifications": {what: true}}),
            )
        };
        let (mut tools, mut tbuf) = (
            listen("t-sub", "toolsListChanged").await.unwrap(),
            String::new(),
        );
        let (mut prompts, mut pbuf) = (
            listen("p-sub", "promptsListChanged").await.unwrap(),
            String::new(),
        );
        for (resp, buf, id, what) in [
            (&mut tools, &mut tbuf, "t-sub", "toolsListChanged"),
            (&mut prompts, &mut pbuf, "p-sub", "promptsListChanged"),
        ] {
            assert_eq!(resp.status(), 200);
            let ack = next_frame(resp, buf).await;
            assert_eq!(
                ack["method"], "notifications/subscriptions/acknowledged",
                "{ack}"
            );
            assert_eq!(ack["params"]["notifications"], json!({what: true}), "{ack}");
            assert_eq!(
                ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                id
            );
        }

        // The server advertises tools and prompts `listChanged`, not resources: a kind it
        // never sends is not acknowledged.
        let mut both = post(
            json!("r-sub"),
            "subscriptions/listen",
            json!({"notifications": {"resourcesListChanged": true, "toolsListChanged": true}}),
        )
        .await
        .unwrap();
        let ack = next_frame(&mut both, &mut String::new()).await;
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true}),
            "{ack}"
        );
        drop(both);

        let call = post(
            json!(1),
            "tools/call",
            json!({"name": "grow", "arguments": {"name": "fresh"}}),
        );
        let answer = call.await.unwrap().text().await.unwrap();
        assert!(answer.contains("added fresh"), "{answer}");
        assert!(
            !answer.contains("list_changed"),
            "the call's own answer carries no subscription: {answer}"
        );
        let n = next_frame(&mut tools, &mut tbuf).await;
        assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "t-sub"
        );

        let call = post(
            json!(2),
            "tools/call",
            json!({"name": "reword", "arguments": {}}),
        );
        assert!(call
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .contains("reworded"));
        // The tools change came first: had it leaked to the prompts stream, it would be here.
        let n = next_frame(&mut prompts, &mut pbuf).await;
        assert_eq!(n["method"], "notifications/prompts/list_changed", "{n}");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "p-sub"
        );

        // The engine saw the change: the new tool is listed and runs.
        let list = post(json!(3), "tools/list", json!({}))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(list.contains("\"fresh\""), "{list}");
        let bad = post(
            json!(4),
            "subscriptions/listen",
            json!({"notifications": ["tools"]}),
        )
        .await
        .unwrap();
        assert_eq!(bad.status(), 400);
    });
}
