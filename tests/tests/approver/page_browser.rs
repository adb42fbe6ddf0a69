//! End to end, the approval page (issue 17 item 3) in a REAL browser: Debian's chromium
//! driven by playwright-core (tests/browser/approval_page.mjs) with a CDP virtual
//! authenticator (user verification on), against real tcd serving the page, while a
//! real Python `mcp` client calls through real tc-shim in front of server-filesystem.

use tc_tests::shim as support;

use tc_tests::elicit;

use std::path::PathBuf;

use base64::Engine;
use elicit::*;
use serde_json::{json, Value};
use support::*;
use tc_tests::browser::Browser;
use tc_tests::page::{http, PageSession};

/// Server-filesystem behind the shim, tcd with the page on; the client connected.
pub(crate) fn started(ttl: Option<u32>) -> (Env, Human, u16) {
    let env = fs_vault("", None);
    let port = tc_tests::page::listen_on_free_port(&env.config);
    let text = std::fs::read_to_string(&env.config).unwrap();
    // The gate declares a preview: the page shows the diff of what the write would do.
    let text = text.replacen(
        "targets = { paths = [\"path\"] }",
        "targets = { paths = [\"path\"] }\npreview = { diff = { path = \"path\", content = \"content\" } }",
        1,
    );
    std::fs::write(&env.config, text).unwrap();
    if let Some(t) = ttl {
        set_ttl(&env, t);
    }
    let (env, h) = legacy_started(env);
    (env, h, port)
}

fn write(content: &str) -> Value {
    json!({"path": "note.txt", "content": content})
}

/// The request id of an `elicit_required` refusal.
#[track_caller]
pub(crate) fn refused_id(r: &Value, args: &Value) -> String {
    assert_elicit_required(r, "write_file", "fs", args);
    request_id(r)
}

/// A one-time link from `tcctl page --print` (it opens one session of this user).
pub(crate) fn page_link(env: &Env) -> String {
    let o = env.tcd.tcctl(&["page", "--print"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let link = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(link.contains("/open?t="), "{link}");
    link
}

/// `tcctl passkey add`'s code, registered on the page.
pub(crate) fn register(env: &Env, b: &mut Browser) {
    let o = env.tcd.tcctl(&["passkey", "add"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let code = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(code.len(), 14, "{code}");
    assert_eq!(
        b.msg(json!({"op": "register", "code": code})),
        "passkey added"
    );
    // The code was single use.
    let again = b.msg(json!({"op": "register", "code": code}));
    assert!(
        again.starts_with("passkey not added: wrong or expired code"),
        "{again}"
    );
}

/// Each request's status as tcd's ListPending reports it.
fn statuses(env: &Env) -> Vec<(String, String)> {
    let o = env.tcd.tcctl(&["pending", "--json"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["request_id"].as_str().unwrap().into(),
                v["status"].as_str().unwrap().into(),
            )
        })
        .collect()
}

pub(crate) fn status_of(env: &Env, id: &str) -> String {
    statuses(env)
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, s)| s)
        .unwrap_or_default()
}

/// Where screenshots go: `TC_SCREENSHOTS_DIR` (docs/screenshots to refresh the committed
/// ones), else a scratch directory.
fn shots() -> PathBuf {
    let d = std::env::var_os("TC_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tc-page-screenshots"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn raw_post(port: u16, host: &str, origin: &str, cookie: &str, csrf: &str, path: &str) -> u16 {
    let head =
        format!("Host: {host}\r\nOrigin: {origin}\r\nCookie: {cookie}\r\nx-tc-csrf: {csrf}\r\n");
    tc_tests::page::post_raw(port, None, path, &head, &json!({"reason": "raw"})).0
}

#[test]
fn approve_on_the_page_runs_the_retry_once_and_decline_is_a_hard_stop() {
    let (env, mut h, _) = started(None);
    let mut b = Browser::open(&page_link(&env));
    // `tcctl watch` announces the registration (a key the human did not add would show).
    let mut watch = crate::watch::spawn_tcctl(&env, &["watch", "--terminal"], None);
    let said = crate::watch::lines_of(watch.stderr.take().unwrap());
    let shown = crate::watch::lines_of(watch.stdout.take().unwrap());
    let ready = said.recv_timeout(std::time::Duration::from_secs(20));
    assert!(
        ready
            .as_deref()
            .is_ok_and(|l| l.contains("listing requests")),
        "{ready:?}"
    );
    register(&env, &mut b);
    let line = shown.recv_timeout(std::time::Duration::from_secs(20));
    assert!(
        line.as_deref().is_ok_and(|l| l.starts_with("passkey ")
            && l.contains("(test key) registered on the page")
            && l.contains("tcctl passkey remove ")),
        "{line:?}"
    );
    let _ = watch.kill();
    let _ = watch.wait();

    // Raised while the page is open: it appears without a reload, with its details.
    let r = h.call("write_file", write("v1"));
    let id = refused_id(&r, &write("v1"));
    let card = b.cmd(json!({"op": "waitRequest", "id": id}))["text"]
        .as_str()
        .unwrap()
        .to_string();
    for want in [
        "write_file",
        "fs",
        "stdio",
        "\"content\": \"v1\"",
        "\"path\": \"note.txt\"",
        "time left",
        // The preview: the file as it is (v0) against what the write makes it (v1).
        "@@ -1 +1 @@",
        "-v0",
        "+v1",
    ] {
        assert!(card.contains(want), "{want}: {card}");
    }
    let shot = shots().join("approval-page-pending.png");
    b.cmd(json!({"op": "screenshot", "path": shot, "selector": format!(".req[data-id=\"{id}\"]")}));

    // Approve with the passkey: the identical retry runs once.
    let m = b.msg(json!({"op": "approve", "id": id}));
    assert!(m.starts_with(&format!("approved {id}")), "{m}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    let again = assert_approved_retry_runs_once(&env, &mut h);
    let id2 = refused_id(&again, &write("v1"));
    assert_ne!(id2, id);

    // Decline on the page: the retry is a hard stop with the reason.
    b.cmd(json!({"op": "waitRequest", "id": id2}));
    let m = b.msg(json!({"op": "decline", "id": id2, "reason": "not today"}));
    assert!(m.starts_with(&format!("declined {id2}")), "{m}");
    let d = h.call("write_file", write("v1"));
    assert_eq!(code(&d).as_deref(), Some("approval_declined"), "{d}");
    assert_text_at(&d, "/content/0/text", "not today");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("v0"));
    let shown = b.cmd(json!({"op": "waitRequest", "id": id2, "status": "declined"}));
    assert_eq!(
        shown["approveVisible"], false,
        "a declined request offers Approve"
    );
    // A declined request cannot be approved on the page either (a genuine assertion).
    let cred = b.cmd(json!({"op": "assertion", "id": id2}))["credential"].clone();
    let (st, body) = b.request(
        "POST",
        &format!("/api/requests/{id2}/approve/finish"),
        json!({"credential": cred}),
        true,
    );
    assert_eq!(st, 409, "{body}");
    assert!(body.contains("declined"), "{body}");

    let shot = shots().join("approval-page-history.png");
    b.cmd(json!({"op": "screenshot", "path": shot}));
    b.assert_one_page_load();
}

#[test]
fn forged_replayed_cross_origin_and_csrf_less_requests_approve_nothing() {
    let (env, mut h, port) = started(None);
    let mut b = Browser::open(&page_link(&env));
    register(&env, &mut b);
    let a = refused_id(&h.call("write_file", write("a")), &write("a"));
    let bid = refused_id(&h.call("write_file", write("b")), &write("b"));
    b.cmd(json!({"op": "waitRequest", "id": bid}));
    let finish = |id: &str| format!("/api/requests/{id}/approve/finish");

    // A forged assertion (one signature byte flipped): refused, nothing approved.
    let mut forged = b.cmd(json!({"op": "assertion", "id": a}))["credential"].clone();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut sig = b64
        .decode(forged["response"]["signature"].as_str().unwrap())
        .unwrap();
    let last = sig.len() - 1;
    sig[last] ^= 1;
    forged["response"]["signature"] = b64.encode(&sig).into();
    let (st, body) = b.request("POST", &finish(&a), json!({"credential": forged}), true);
    assert_eq!(st, 403, "{body}");
    assert_eq!(status_of(&env, &a), "pending");

    // A genuine one approves; replayed (same request, or another request's fresh
    // challenge) it is refused.
    let genuine = b.cmd(json!({"op": "assertion", "id": a}))["credential"].clone();
    let (st, body) = b.request("POST", &finish(&a), json!({"credential": genuine}), true);
    assert_eq!(st, 200, "{body}");
    assert_eq!(status_of(&env, &a), "approved");
    let (st, body) = b.request("POST", &finish(&a), json!({"credential": genuine}), true);
    assert_eq!(st, 400, "{body}");
    let (st, body) = b.request(
        "POST",
        &format!("/api/requests/{bid}/approve/start"),
        json!({}),
        true,
    );
    assert_eq!(st, 200, "{body}");
    let (st, body) = b.request("POST", &finish(&bid), json!({"credential": genuine}), true);
    assert_eq!(st, 403, "{body}");
    assert_eq!(status_of(&env, &bid), "pending");

    // No CSRF token: refused, for Decline and for starting an approval.
    for path in [
        format!("/api/requests/{bid}/decline"),
        format!("/api/requests/{bid}/approve/start"),
    ] {
        let (st, body) = b.request("POST", &path, json!({"reason": "x"}), false);
        assert_eq!(st, 403, "{path}: {body}");
    }

    // Outside the browser: a valid session, then a wrong Origin or Host is refused…
    let PageSession { cookie, csrf, .. } = PageSession::open(&page_link(&env));
    let host = format!("localhost:{port}");
    let origin = format!("http://{host}");
    let decline = format!("/api/requests/{bid}/decline");
    assert_eq!(
        raw_post(port, &host, "http://evil.example", &cookie, &csrf, &decline),
        403
    );
    assert_eq!(
        raw_post(port, "evil.example", &origin, &cookie, &csrf, &decline),
        403
    );
    let (st, _) = http(
        port,
        &format!("GET / HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(st, 403);
    assert_eq!(
        raw_post(
            port,
            &host,
            &origin,
            &cookie,
            "0".repeat(64).as_str(),
            &decline
        ),
        403
    );
    assert_eq!(status_of(&env, &bid), "pending");
    // …while the same request with everything right goes through (the refusals above
    // were for the one thing wrong in each).
    assert_eq!(
        raw_post(port, &host, &origin, &cookie, &csrf, &decline),
        200
    );
    assert_eq!(status_of(&env, &bid), "declined");
    assert_eq!(events_of(&env, "tc.elicit.approved"), 1);
}

#[test]
fn a_request_that_expires_unanswered_shows_as_expired() {
    let (env, mut h, _) = started(Some(2));
    let mut b = Browser::open(&page_link(&env));
    let id = refused_id(&h.call("write_file", write("e")), &write("e"));
    b.cmd(json!({"op": "waitRequest", "id": id}));
    let shown = b.cmd(json!({"op": "waitRequest", "id": id, "status": "expired"}));
    assert_eq!(
        shown["approveVisible"], false,
        "an expired request offers Approve"
    );
    assert_eq!(status_of(&env, &id), "expired");
}

/// Without a session from a `tcctl page` link the page shows how to open it and nothing
/// else: no request, argument or preview, no state, no decline; a link opens once, and a
/// uid that is not tcd's cannot mint one.
#[test]
fn without_a_tcctl_page_session_the_page_shows_and_does_nothing() {
    let (env, mut h, port) = started(None);
    std::fs::write(env.root.join("note.txt"), "secret-before-7f3a").unwrap();
    let id = refused_id(
        &h.call("write_file", write("secret-after-9c1e")),
        &write("secret-after-9c1e"),
    );
    let get = |path: &str| {
        http(
            port,
            &format!("GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"),
        )
    };
    for path in ["/", &format!("/requests/{id}"), "/api/state", "/api/events"] {
        let (st, out) = get(path);
        assert_eq!(st, 401, "{path}: {out}");
        for secret in [
            "secret-before-7f3a",
            "secret-after-9c1e",
            id.as_str(),
            "set-cookie",
        ] {
            assert!(!out.contains(secret), "{path} shows {secret}: {out}");
        }
    }
    assert!(
        get("/").1.contains("tcctl page"),
        "the shell says how to open the page"
    );
    // No session (or a made-up one): nothing is declined or approved.
    let made_up = format!("tc_page={}", "ab".repeat(32));
    for cookie in [None, Some(made_up.as_str())] {
        for path in [
            format!("/api/requests/{id}/decline"),
            format!("/api/requests/{id}/approve/start"),
            "/api/passkeys/start".to_string(),
            "/api/grants/g-2345678923/revoke".to_string(),
        ] {
            let (st, v) = tc_tests::page::post(
                port,
                &path,
                &json!({"reason": "x", "code": "x"}),
                cookie,
                Some(&"0".repeat(64)),
            );
            assert!(st == 401 || st == 403, "{path} with {cookie:?}: {st} {v}");
        }
    }
    assert_eq!(status_of(&env, &id), "pending");

    // A link read by another uid (off `xdg-open`'s command line, say) opens nothing from
    // that uid's socket, and is still good for its owner.
    let link = page_link(&env);
    if let Some(mut c) = tc_tests::as_nobody() {
        let (port, path) = tc_tests::page::link_parts(&link);
        let o = c
            .args(["/usr/bin/python3", "-c"])
            .arg(
                "import http.client,sys; c=http.client.HTTPConnection('127.0.0.1', int(sys.argv[1])); \
                 c.request('GET', sys.argv[2], headers={'Host': 'localhost:'+sys.argv[1]}); \
                 r=c.getresponse(); print(r.status, r.getheader('set-cookie'))",
            )
            .args([port.to_string(), path])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(
            said.starts_with("403 None"),
            "nobody spent the link: {said} {o:?}"
        );
    }

    // A link opens one session, once; a forged or spent link opens none.
    let s = PageSession::open(&link);
    let (st, _) = PageSession::try_open(&link).unwrap_err();
    assert_eq!(st, 403, "a spent link");
    let forged = format!("http://localhost:{port}/open?t={}", "0".repeat(64));
    assert_eq!(PageSession::try_open(&forged).unwrap_err().0, 403);
    let state = s.state();
    assert_eq!(state["requests"][0]["id"], id.as_str(), "{state}");
    assert!(state["requests"][0]["preview"]
        .as_str()
        .unwrap()
        .contains("secret-after-9c1e"));

    // Another uid cannot mint a link: tcd serves its own user only.
    if let Some(mut c) = tc_tests::as_nobody() {
        let o = c
            .arg(tc_tests::bin("tcctl"))
            .arg("--socket")
            .arg(&env.tcd.socket)
            .arg("--config")
            .arg(&env.config)
            .args(["page", "--print"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "nobody minted a page link");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("/open?t="));
    }
}
