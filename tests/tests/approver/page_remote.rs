//! End to end, the page off the machine (issue 32 point 2): tcd serves the approval page
//! over HTTPS on a non-loopback address of a network namespace this test makes; a
//! phone-sized Chromium (touch, mobile viewport) with a CDP virtual authenticator
//! registers a passkey through a `tcctl page --remote` link, signs in, sees a request a
//! real Python `mcp` client (through real tc-shim) raised, and approves it with a tap.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use tc_tests::browser::Browser;
use tc_tests::elicit::*;
use tc_tests::netns::{self, ADDR};
use tc_tests::shim::Env;

use crate::page_browser::{refused_id, status_of};

/// The name the phone knows the machine by (the relying party of its passkey).
const HOST: &str = "phone.tc.test";
const PORT: u16 = 8443;

fn origin() -> String {
    format!("https://{HOST}:{PORT}")
}

/// Whether this machine can run these tests (root for the namespace, the browser).
fn can_run() -> bool {
    let ok = netns::can_run() && Browser::available();
    if !ok {
        eprintln!("skipped: needs root, unshare, ip (iproute2), chromium and playwright-core");
    }
    ok
}

/// Server-filesystem behind the shim (its gate with a diff preview); tcd with the remote
/// page on (self-signed) and, with `loopback`, the loopback page on that port too; tcd
/// started and note.txt = "v0".
fn configured(loopback: Option<u16>) -> Env {
    let mut env = fs_vault("", None);
    let text = std::fs::read_to_string(&env.config).unwrap();
    let text = text.replacen(
        "targets = { paths = [\"path\"] }",
        "targets = { paths = [\"path\"] }\npreview = { diff = { path = \"path\", content = \"content\" } }",
        1,
    );
    let listen = loopback
        .map(|p| format!("listen = \"127.0.0.1:{p}\"\n"))
        .unwrap_or_default();
    let remote = format!(
        "\n[approvals]\n{listen}remote = {{ listen = \"{ADDR}:{PORT}\", public_url = \"{}\", tls = \"self-signed\" }}\n",
        origin()
    );
    std::fs::write(&env.config, text + &remote).unwrap();
    env.start_tcd();
    std::fs::write(env.root.join("note.txt"), "v0").unwrap();
    env
}

/// [`configured`] without the loopback page, and a legacy Python `mcp` client (its gated
/// calls are refused with a request id; the identical retry runs once approved).
fn started() -> (Env, Human) {
    let env = configured(None);
    let h = Human::python("legacy", &env.shim_argv("fs"));
    (env, h)
}

/// The value of `tcctl status`'s line starting with `label`.
fn status_line(env: &Env, label: &str) -> String {
    let o = env.tcd.tcctl(&["status"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    out.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in {out}"))
        .trim()
        .to_string()
}

/// The self-signed certificate's SHA-256 as openssl computes it from the file tcd made.
fn openssl_fingerprint(cache_dir: &str) -> String {
    let cert = PathBuf::from(cache_dir).join("page-tls/cert.pem");
    let o = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&cert)
        .output()
        .expect("openssl");
    let out = String::from_utf8_lossy(&o.stdout);
    out.trim()
        .split_once('=')
        .expect("a fingerprint")
        .1
        .to_string()
}

/// `curl` to the remote page (its name resolved to the namespace's address, the
/// self-signed certificate taken as is): the status.
fn curl(url: &str, headers: &[&str], post: bool) -> u16 {
    curl_head(url, headers, post).0
}

/// [`curl`]: the status and the response's headers.
fn curl_head(url: &str, headers: &[&str], post: bool) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-sk", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}"])
        .args(["--resolve", &format!("{HOST}:{PORT}:{ADDR}")]);
    for h in headers {
        c.args(["-H", h]);
    }
    if post {
        c.args([
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-d",
            "{}",
        ]);
    }
    let o = c.arg(url).output().expect("curl");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let (head, status) = out.trim_end().rsplit_once('\n').unwrap_or(("", &out));
    (
        status.trim().parse().unwrap_or(0),
        head.to_ascii_lowercase(),
    )
}

/// Where screenshots go: `TC_SCREENSHOTS_DIR` (docs/screenshots to refresh the committed
/// ones), else a scratch directory.
fn shot(name: &str) -> PathBuf {
    let d = std::env::var_os("TC_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tc-page-screenshots"));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// A `tcctl page --remote` link, opened on the phone: the registration form.
fn phone_with_link(env: &Env, spki: &str) -> Browser {
    let o = env.tcd.tcctl(&["page", "--remote"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let link = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(link.starts_with(&format!("{}/open?t=", origin())), "{link}");
    let resolve = format!("MAP {HOST} {ADDR}, MAP * ~NOTFOUND");
    Browser::open_phone(&link, &resolve, spki, "#pk-add")
}

/// Registers a passkey in the link's session (a code from `tcctl passkey add`).
fn register(env: &Env, b: &mut Browser) {
    let o = env.tcd.tcctl(&["passkey", "add"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let code = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let m = b.msg(json!({"op": "registerRemote", "code": code}));
    assert_eq!(m, "passkey added: sign in with it");
}

/// The remote page's certificate pin from `tcctl status`, a passkey registered through a
/// `tcctl page --remote` link, and the phone signed in with it.
fn signed_in_phone(env: &Env) -> Browser {
    let spki = status_line(env, "public key SHA-256 (base64):");
    let mut b = phone_with_link(env, &spki);
    register(env, &mut b);
    b.cmd(json!({"op": "signIn"}));
    b
}

/// The page without a session: the sign-in, and nothing of tc's state.
#[track_caller]
fn shows_nothing(b: &mut Browser, path: &str, ids: &[&str]) {
    let v: Value = b.cmd(json!({"op": "fresh", "url": format!("{}{path}", origin())}));
    assert_eq!(v["status"], 401, "{v}");
    let (text, html) = (v["text"].as_str().unwrap(), v["html"].as_str().unwrap());
    assert!(text.contains("Sign in with a passkey"), "{text}");
    for id in ids {
        assert!(!html.contains(id), "{id} shown without a session: {html}");
    }
    assert!(
        !text.contains("write_file") && !text.contains("Requests"),
        "{text}"
    );
    assert_eq!(v["api"][0], 401, "{v}");
    assert_eq!(v["api"][1], 401, "{v}");
}

#[test]
fn a_phone_signs_in_with_a_passkey_and_approves_a_call_once() {
    if !can_run()
        || !netns::in_namespace("a_phone_signs_in_with_a_passkey_and_approves_a_call_once")
    {
        return;
    }
    let (env, mut h) = started();
    assert_eq!(status_line(&env, "remote page:"), origin());
    let fp = status_line(&env, "certificate SHA-256:");
    assert_eq!(fp, openssl_fingerprint(&status_line(&env, "cache dir:")));
    let spki = status_line(&env, "public key SHA-256 (base64):");

    // The link's session registers a passkey and sees nothing else.
    let mut b = phone_with_link(&env, &spki);
    let (st, body) = b.request("GET", "/api/state", Value::Null, false);
    assert_eq!(st, 401, "a registration session read the state: {body}");
    register(&env, &mut b);
    b.cmd(json!({"op": "screenshot", "path": shot("phone-register.png"), "viewportOnly": true}));
    shows_nothing(&mut b, "/", &[]);

    // Signed in with the passkey (a tap, user verified) where a request's link led (as
    // a notification's would): the live page, at that request.
    let at = "/requests/zzzzzzzz";
    b.cmd(json!({"op": "goto", "path": at, "waitFor": "#signin-go"}));
    let url = b.cmd(json!({"op": "signIn"}))["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(url, format!("{}{at}", origin()));

    // Raised while the phone watches: pushed over SSE, with the call, what it covers and
    // the diff.
    let args = json!({"path": "note.txt", "content": "v1"});
    let id = refused_id(&h.call("write_file", args.clone()), &args);
    let card = b.cmd(json!({"op": "waitRequest", "id": id}))["text"]
        .as_str()
        .unwrap()
        .to_string();
    for want in ["write_file", "fs", "covers", "-v0", "+v1"] {
        assert!(card.contains(want), "{want}: {card}");
    }
    // Approve is on the screen, thumb-sized, and nothing is wider than the phone.
    let sel = format!(".req[data-id=\"{id}\"] button.approve");
    let g = b.cmd(json!({"op": "box", "selector": sel}));
    let (bx, vp) = (&g["box"], &g["viewport"]);
    let (y, hgt, w) = (
        bx["y"].as_f64().unwrap(),
        bx["height"].as_f64().unwrap(),
        bx["width"].as_f64().unwrap(),
    );
    assert!(hgt >= 44.0 && w >= 120.0, "a small target: {g}");
    assert!(y + hgt <= vp["height"].as_f64().unwrap(), "off screen: {g}");
    assert!(
        g["scrollWidth"].as_f64().unwrap() <= vp["width"].as_f64().unwrap(),
        "wider than the phone: {g}"
    );
    b.cmd(json!({"op": "screenshot", "path": shot("phone-pending.png"), "viewportOnly": true}));

    let m = b.msg(json!({"op": "tapApprove", "id": id}));
    assert!(m.starts_with(&format!("approved {id}")), "{m}");
    assert_eq!(status_of(&env, &id), "approved");
    b.cmd(json!({"op": "waitRequest", "id": id, "status": "approved"}));
    b.cmd(json!({"op": "screenshot", "path": shot("phone-approved.png"), "viewportOnly": true}));
    let again = assert_approved_retry_runs_once(&env, &mut h);
    let id2 = refused_id(&again, &args);
    b.cmd(json!({"op": "waitRequest", "id": id2}));

    // Without a session: the sign-in only, no request, no id, no state.
    shows_nothing(&mut b, &format!("/requests/{id2}"), &[&id, &id2]);
    assert_eq!(status_of(&env, &id2), "pending");
}

#[test]
fn a_foreign_origin_or_host_is_refused_and_links_do_not_cross_pages() {
    if !can_run()
        || !netns::in_namespace("a_foreign_origin_or_host_is_refused_and_links_do_not_cross_pages")
    {
        return;
    }
    let env = configured(None);
    let signin = format!("{}/api/signin/start", origin());
    let ours = format!("Origin: {}", origin());
    // No passkey yet: the page's own Origin gets as far as the sign-in's answer (409)…
    assert_eq!(curl(&signin, &[&ours], true), 409);
    // …a foreign one, or none, does not.
    assert_eq!(curl(&signin, &["Origin: https://evil.example"], true), 403);
    assert_eq!(
        curl(&signin, &["Origin: http://phone.tc.test:8443"], true),
        403
    );
    assert_eq!(curl(&signin, &[], true), 403);
    // The page answers to its public name only: not to its address, nor a rebinding name.
    assert_eq!(curl(&format!("{}/", origin()), &[], false), 401);
    assert_eq!(curl(&format!("https://{ADDR}:{PORT}/"), &[], false), 403);
    assert_eq!(
        curl(&format!("{}/", origin()), &["Host: evil.example"], false),
        403
    );
    // A loopback link's token is no remote link, and a made-up one opens nothing.
    let forged = format!(
        "{}/open?t={}-{}",
        origin(),
        nix::unistd::getuid(),
        "a".repeat(64)
    );
    assert_eq!(curl(&forged, &[], false), 403);
    // A remote link opens once.
    let o = env.tcd.tcctl(&["page", "--remote"]);
    let link = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let (st, head) = curl_head(&link, &[], false);
    assert_eq!(st, 303, "{head}");
    let cookie = head
        .lines()
        .find(|l| l.starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {head}"));
    for attr in ["; secure", "; httponly", "; samesite=strict", "; path=/"] {
        assert!(cookie.contains(attr), "{attr} missing: {cookie}");
    }
    assert!(
        head.contains("strict-transport-security: max-age="),
        "{head}"
    );
    assert_eq!(curl(&link, &[], false), 403);
}

#[test]
fn a_call_held_for_the_human_runs_once_when_the_phone_approves_it() {
    if !can_run()
        || !netns::in_namespace("a_call_held_for_the_human_runs_once_when_the_phone_approves_it")
    {
        return;
    }
    // URL mode (the modern Python SDK declaring it): the shim holds the call while the
    // human decides; its link is the loopback page's, the phone sees the same request.
    let port = tc_tests::free_port();
    let env = configured(Some(port));
    let mut b = signed_in_phone(&env);
    let mut h = Human::python("modern", &env.shim_argv("fs"));
    let tag = h.start_call("write_file", write_v1());
    let id = url_request_id(&h.prompt(), port);
    h.answer(json!({ "action": "accept" }));
    // Pushed to the phone while the agent's call waits; nothing has run.
    b.cmd(json!({"op": "waitRequest", "id": id}));
    assert_note(&env, "v0");
    let m = b.msg(json!({"op": "tapApprove", "id": id}));
    assert!(m.starts_with(&format!("approved {id}")), "{m}");
    // The held call runs, once.
    let r = h.result(&tag);
    assert_wrote_v1_once(&env, &r);
}
