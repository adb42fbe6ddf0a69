//! Issue 29, as root with real users through the real binaries: the approval page is for
//! the human whose `tcctl page` link opened the session, not for whoever reaches its port,
//! and in guarded mode each human's requests, previews, events, declines, approvals and
//! passkeys are theirs alone. Two humans (`tchuman`, `tchuman2`) and a local uid that is
//! none (`tcother`); tcd as its daemon user with the page on loopback; server-filesystem
//! behind tc-shim run as each human; TOTP codes computed from the enrolled secrets; a real
//! Chromium (virtual authenticator) for the passkey. Each test runs in its own mount
//! namespace (tests/src/guarded.rs).

use tc_tests::guarded;

use std::path::Path;
use std::process::Output;

use guarded::{as_user, refused_id, run, text, Scene, Setup, User, PYTHON};
use serde_json::{json, Value};
use tc_tests::browser::Browser;
use tc_tests::page::{http, http_as, link_parts, status_of, PageSession};
use tc_tests::pty::right_code;
use tc_tests::shim::{bin, code};

/// What human 1's 0600 file holds: shown in human 1's preview, and nowhere else.
const SECRET: &str = "tc-isolation-SECRET-5c1e07a9";
/// What human 1's agent wants to write there (in the arguments).
const NEW_SECRET: &str = "tc-isolation-NEWSECRET-9b44d2f1";
/// Human 1's reason for declining their own request (in their history only).
const REASON: &str = "tc-isolation-REASON-30d8e6b2";

/// Two humans and a vault `fs` (server-filesystem; write_file gated with a diff preview)
/// over a directory human 1 owns and everyone may write (so both humans' agents can run
/// the identical call): secret.txt (human 1's, 0600, [`SECRET`]), shared.txt (0666,
/// "v0"), note.txt (human 1's, "v0"). The page on `port`. For the test `name` in its
/// namespace (None: the test returns).
#[track_caller]
pub(crate) fn scene(name: &str) -> Option<Scene> {
    let setup = Setup {
        page: true,
        preview: true,
        two_humans: true,
        root_mode: 0o777,
        files: vec![
            ("secret.txt", SECRET, 0o600),
            ("shared.txt", "v0", 0o666),
            ("note.txt", "v0", 0o644),
        ],
        ..Setup::default()
    };
    setup.start_in_namespace(name, &[PYTHON, "/usr/bin/curl"])
}

/// What the humans and the outsider do here besides their agents' calls: passkeys, and
/// the outsider's own HTTP.
trait Apart {
    fn passkey_code(&self, who: (&User, &Path)) -> String;
    fn passkeys(&self, who: (&User, &Path)) -> Vec<Value>;
    fn outsider(
        &self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        csrf: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, String);
}

impl Apart for Scene {
    /// `tcctl passkey add` as `who`: the registration code.
    fn passkey_code(&self, who: (&User, &Path)) -> String {
        let o = self.tcctl(who, &["passkey", "add"]);
        assert!(o.status.success(), "{}", text(&o));
        let code = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert_eq!(code.len(), 14, "{code}");
        code
    }

    /// Human `who`'s passkeys (`tcctl passkey list --json`).
    fn passkeys(&self, who: (&User, &Path)) -> Vec<Value> {
        let o = self.tcctl(who, &["passkey", "list", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// One HTTP exchange on the page port made by `tcctl`-less `tcother` (curl run as
    /// that uid): `cookie`/`csrf` are whatever it managed to get (None: left out).
    fn outsider(
        &self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        csrf: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, String) {
        let port = self.port;
        let mut c = as_user(&self.d.other, &self.d.other_home, "curl");
        c.args(["-s", "-i", "--max-time", "5", "-X", method])
            .arg("-H")
            .arg(format!("Host: localhost:{port}"));
        if method == "POST" {
            c.arg("-H").arg(format!("Origin: http://localhost:{port}"));
        }
        if let Some(k) = cookie {
            c.arg("-H").arg(format!("Cookie: {k}"));
        }
        if let Some(t) = csrf {
            c.arg("-H").arg(format!("x-tc-csrf: {t}"));
        }
        if let Some(b) = body {
            c.args(["-H", "content-type: application/json", "--data-binary"])
                .arg(b.to_string());
        }
        c.arg(format!("http://127.0.0.1:{port}{path}"));
        let o = run(c);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        (status_of(&out), out)
    }
}

fn write(path: &str, content: &str) -> Value {
    json!({"path": path, "content": content})
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A refusal's message with `id` taken out, to compare two refusals' wording.
fn without(s: &str, id: &str) -> String {
    s.replace(id, "<ID>")
}

/// The cookie and CSRF token a response hands out, if any (what an outsider would take).
fn handed_out(resp: &str) -> (Option<String>, Option<String>) {
    let cookie = resp
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("set-cookie")
                .then(|| v.trim().split(';').next().unwrap_or_default().to_string())
        })
        .filter(|c| !c.is_empty());
    let csrf = resp
        .split("name=\"tc-csrf\" content=\"")
        .nth(1)
        .map(|t| t.chars().take(64).collect());
    (cookie, csrf)
}

/// A uid that is no human, on the page's port, with no link: the page shows it nothing
/// (no arguments, no preview of the human's 0600 file, 401 for the state and the event
/// stream), every POST it makes is refused whatever cookie it tries (none, one the page
/// handed out, a forged one), its wrong codes neither reach nor lock the human's factor
/// (no tc.factor.failed) nor close registration, a link or cookie of the human's it got
/// hold of does nothing from its sockets, `tcctl page` refuses it, and the human's
/// request stays pending: the human then opens the page, sees the preview,
/// starts a registration with a valid code and approves with the right code, and the
/// agent's retry runs once.
#[test]
fn a_uid_that_is_no_human_gets_nothing_from_the_page_and_blocks_nothing() {
    let Some(s) = scene("a_uid_that_is_no_human_gets_nothing_from_the_page_and_blocks_nothing")
    else {
        return;
    };
    let secret = s.enroll_user(guarded::HUMAN);
    let mut agent = s.agent_as(s.h1());
    let args = write("secret.txt", NEW_SECRET);
    let id = refused_id(&agent.call_tool(1, "write_file", args.clone()));
    // The control: the human's own listing shows the preview of their 0600 file.
    let (mine, _) = s.pending(Some(s.h1()));
    assert!(
        mine.contains(SECRET) && mine.contains(NEW_SECRET),
        "the preview and arguments are not where the human sees them: {mine}"
    );

    // Reading: nothing but how to open the page; no session handed out.
    let leaks = |what: &str, out: &str| {
        for planted in [SECRET, NEW_SECRET, id.as_str()] {
            assert!(!out.contains(planted), "{what} shows {planted:?}:\n{out}");
        }
    };
    let (st, shell) = s.outsider("GET", "/", None, None, None);
    assert_eq!(st, 401, "{shell}");
    assert!(shell.contains("tcctl page"), "{shell}");
    leaks("GET /", &shell);
    let (taken_cookie, taken_csrf) = handed_out(&shell);
    assert_eq!(taken_cookie, None, "GET / handed out a session:\n{shell}");
    assert_eq!(taken_csrf, None, "GET / handed out a CSRF token:\n{shell}");
    let (st, out) = s.outsider("GET", &format!("/requests/{id}"), None, None, None);
    assert_eq!(st, 401, "{out}");
    leaks("GET /requests/ID", &out);
    let forged_cookie = format!("tc_page={}", "a1".repeat(32));
    let forged_csrf = "b2".repeat(32);
    for cookie in [None, Some(forged_cookie.as_str())] {
        for path in ["/api/state", "/api/events"] {
            let (st, out) = s.outsider("GET", path, cookie, None, None);
            assert_eq!(st, 401, "{path} with {cookie:?}:\n{out}");
            leaks(path, &out);
        }
    }
    // A link that tcd did not mint opens nothing.
    let (st, out) = s.outsider(
        "GET",
        &format!("/open?t={}", "c3".repeat(32)),
        None,
        None,
        None,
    );
    assert_eq!(st, 403, "{out}");
    assert_eq!(handed_out(&out).0, None, "{out}");

    // Acting: every POST refused, with whatever cookie the outsider could try.
    let tries: [(Option<&str>, Option<&str>); 3] = [
        (taken_cookie.as_deref(), taken_csrf.as_deref()),
        (None, None),
        (Some(&forged_cookie), Some(&forged_csrf)),
    ];
    for (cookie, csrf) in tries {
        for (path, body) in [
            (
                format!("/api/requests/{id}/decline"),
                json!({"reason": "outsider"}),
            ),
            (format!("/api/requests/{id}/approve/start"), json!({})),
            (
                format!("/api/requests/{id}/approve/finish"),
                json!({"credential": {}}),
            ),
            (
                "/api/passkeys/finish".to_string(),
                json!({"credential": {}}),
            ),
        ] {
            let (st, out) = s.outsider("POST", &path, cookie, csrf, Some(&body));
            assert!(st == 401 || st == 403, "{path} with {cookie:?}:\n{out}");
        }
    }
    // Ten and more wrong codes, and twenty and more wrong registration codes.
    for (i, (cookie, csrf)) in tries.iter().cycle().take(12).enumerate() {
        let path = format!("/api/requests/{id}/approve/totp");
        let body = json!({"code": format!("{:06}", 100_000 + i)});
        let (st, out) = s.outsider("POST", &path, *cookie, *csrf, Some(&body));
        assert!(st == 401 || st == 403, "{out}");
    }
    for (i, (cookie, csrf)) in tries.iter().cycle().take(24).enumerate() {
        let body = json!({"code": format!("wrongcode{i:03}")});
        let (st, out) = s.outsider("POST", "/api/passkeys/start", *cookie, *csrf, Some(&body));
        assert!(st == 401 || st == 403, "{out}");
    }
    // A link of the human's that it read (off xdg-open's command line, say) opens nothing
    // from its sockets, and stays good for the human.
    let link = s.link(s.h1());
    let (_, path) = link_parts(&link);
    let (st, out) = s.outsider("GET", &path, None, None, None);
    assert_eq!(st, 403, "{out}");
    assert_eq!(handed_out(&out).0, None, "{out}");
    let page = PageSession::open_as(&link, Some(s.d.human.uid));
    // The human's cookie and CSRF token, copied: refused from its sockets.
    let (cookie, csrf) = (Some(page.cookie.as_str()), Some(page.csrf.as_str()));
    for path in ["/", "/api/state", "/api/events"] {
        let (st, out) = s.outsider("GET", path, cookie, None, None);
        assert!(
            st == 401 || st == 403,
            "{path} with the human's cookie:\n{out}"
        );
        leaks(path, &out);
    }
    for (path, body) in [
        (
            format!("/api/requests/{id}/decline"),
            json!({"reason": "outsider"}),
        ),
        (
            format!("/api/requests/{id}/approve/totp"),
            json!({"code": "000000"}),
        ),
        ("/api/passkeys/start".to_string(), json!({"code": "x"})),
    ] {
        let (st, out) = s.outsider("POST", &path, cookie, csrf, Some(&body));
        assert!(
            st == 401 || st == 403,
            "{path} with the human's cookie:\n{out}"
        );
    }

    // The socket refuses it too.
    for args in [["page", "--print"], ["passkey", "add"]] {
        let o = s.tcctl((&s.d.other, &s.d.other_home), &args);
        assert!(
            !o.status.success() && stderr(&o).contains("not_permitted"),
            "{args:?}: {}",
            text(&o)
        );
    }

    // Nothing happened to the human's request or factor.
    assert_eq!(s.status(&id), "pending");
    assert_eq!(
        s.logged("tc.factor.failed").len(),
        0,
        "the factor was consulted"
    );
    assert_eq!(s.logged("tc.factor.locked").len(), 0);
    assert_eq!(s.logged("tc.elicit.declined").len(), 0);
    assert_eq!(s.file("secret.txt"), SECRET);

    // The human: their session shows the request and its preview…
    let state = page.state();
    let shown = state["requests"].to_string();
    assert!(
        shown.contains(&id) && shown.contains(SECRET),
        "the human's session does not show their request: {state}"
    );
    assert_eq!(state["uid"], s.d.human.uid);
    assert_eq!(state["read_only"], false);
    // …registration is open to them…
    let code = s.passkey_code(s.h1());
    let (st, v) = page.post("/api/passkeys/start", &json!({ "code": code }));
    assert_eq!(
        st, 200,
        "the outsider's wrong codes closed registration: {v}"
    );
    assert!(v["publicKey"]["challenge"].is_string(), "{v}");
    // …and their factor approves: the retry runs once.
    let (st, v) = page.approve_totp(&id, &right_code(&secret));
    assert_eq!(st, 200, "the outsider locked the human's factor: {v}");
    assert_eq!(v["approved"], id.as_str(), "{v}");
    let ok = agent.call_tool(2, "write_file", args.clone());
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.file("secret.txt"), NEW_SECRET);
    assert_eq!(s.logged("tc.elicit.approved").len(), 1);
    assert_eq!(s.logged("tc.page.opened").len(), 1);
}

/// Sessions are capped per uid: another human opening twenty sessions (and anyone
/// hammering `/` and `/open` with no link) never evicts the human's session, which still
/// declines with its CSRF token, while the other human's own oldest session is the one
/// that goes, and a link the human minted before still opens; a spent link opens nothing;
/// the human's own ninth session pushes out their first.
#[test]
fn nobody_else_opening_sessions_evicts_the_humans_session() {
    let Some(s) = scene("nobody_else_opening_sessions_evicts_the_humans_session") else {
        return;
    };
    let mut agent = s.agent_as(s.h1());
    let args = write("note.txt", "v1");
    let id = refused_id(&agent.call_tool(1, "write_file", args.clone()));
    // A link opens a session once, as an HttpOnly SameSite=Strict cookie.
    let (port, path) = link_parts(&s.link(s.h1()));
    let (st, out) = http_as(
        port,
        Some(s.d.human.uid),
        &format!("GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(st, 303, "{out}");
    let cookie = out
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {out}"));
    for attr in ["tc_page=", "HttpOnly", "SameSite=Strict"] {
        assert!(cookie.contains(attr), "{attr}: {cookie}");
    }
    let mine = s.session(s.h1());
    // A link of the human's, not yet spent while the others mint theirs.
    let outstanding = s.link(s.h1());

    // Anyone on the port, without a link: no session is opened (none to push out).
    for i in 0..40 {
        let port = s.port;
        let (st, out) = http(
            port,
            &format!("GET / HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(st, 401, "{out}");
        let (st, _) = http(
            port,
            &format!(
                "GET /open?t={:064x} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n",
                i
            ),
        );
        assert_eq!(st, 403);
    }
    // Another human: twenty links, twenty sessions; a spent link opens nothing.
    let first_link = s.link(s.h2());
    let h2 = Some(s.d.human2.uid);
    let theirs_first = PageSession::open_as(&first_link, h2);
    let again = PageSession::try_open_as(&first_link, h2);
    assert!(
        matches!(again, Err((403, _))),
        "a spent link: {:?}",
        again.map(|p| p.cookie)
    );
    for _ in 1..20 {
        s.session(s.h2());
    }
    let (st, _) = theirs_first.get("/api/state");
    assert_eq!(
        st, 401,
        "the cap is per uid: the other human's own oldest went"
    );
    let second = PageSession::open_as(&outstanding, Some(s.d.human.uid));
    assert_eq!(second.state()["uid"], s.d.human.uid);

    // The human's session is still theirs: it reads and declines.
    assert_eq!(mine.state()["uid"], s.d.human.uid);
    let (st, v) = mine.post(
        &format!("/api/requests/{id}/decline"),
        &json!({"reason": "still mine"}),
    );
    assert_eq!(st, 200, "the human's session was evicted: {v}");
    assert_eq!(v["declined"], id.as_str());
    let d = agent.call_tool(2, "write_file", args);
    assert_eq!(code(&d).as_deref(), Some("approval_declined"), "{d}");
    assert_eq!(s.file("note.txt"), "v0");

    // The human's own cap: seven more of theirs (nine in all) push the first out.
    for _ in 0..7 {
        s.session(s.h1());
    }
    let (st, _) = mine.get("/api/state");
    assert_eq!(st, 401);
    assert_eq!(second.state()["uid"], s.d.human.uid);
    assert_eq!(s.logged("tc.page.opened").len(), 2 + 20 + 1 + 7);
}

/// The identical call raised by two humans' agents is two requests: each human approves
/// only their own (the other's id is refused even with the right code of the moment),
/// and when human 2 approves theirs, human 1's agent's identical retry is still refused
/// and runs nothing, while human 2's runs once.
#[test]
fn the_same_call_from_two_humans_is_two_requests_each_approved_by_its_own_human() {
    let Some(s) =
        scene("the_same_call_from_two_humans_is_two_requests_each_approved_by_its_own_human")
    else {
        return;
    };
    let secret1 = s.enroll_user(guarded::HUMAN);
    let secret2 = s.enroll_user(guarded::HUMAN2);
    let (mut a1, mut a2) = (s.agent_as(s.h1()), s.agent_as(s.h2()));
    let args = write("shared.txt", "v1");
    let id1 = refused_id(&a1.call_tool(1, "write_file", args.clone()));
    let id2 = refused_id(&a2.call_tool(1, "write_file", args.clone()));
    assert_ne!(id1, id2, "the same call by two humans is one request");
    let (_, all) = s.pending(None);
    let owner = |id: &str| {
        all.iter()
            .find(|r| r["request_id"] == id)
            .map(|r| r["raised_by_uid"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(owner(&id1), s.d.human.uid);
    assert_eq!(owner(&id2), s.d.human2.uid);
    // Raised again, each stays its human's own request.
    assert_eq!(
        refused_id(&a1.call_tool(2, "write_file", args.clone())),
        id1
    );
    assert_eq!(
        refused_id(&a2.call_tool(2, "write_file", args.clone())),
        id2
    );
    assert_eq!(owner(&id1), s.d.human.uid);

    let (p1, p2) = (s.session(s.h1()), s.session(s.h2()));
    // Neither approves the other's, with their own right code of the moment: refused
    // exactly as an id that does not exist is (its existence is the other's business).
    let (c1, c2) = (right_code(&secret1), right_code(&secret2));
    for (page, id, code) in [(&p1, &id2, &c1), (&p2, &id1, &c2)] {
        let (st, v) = page.approve_totp(id, code);
        let (st_none, v_none) = page.approve_totp("zzzzzzzz", code);
        assert_eq!((st, st_none), (409, 409), "{v} / {v_none}");
        let shown = v["error"]
            .as_str()
            .unwrap_or_default()
            .replace(id.as_str(), "ID");
        let unknown = v_none["error"]
            .as_str()
            .unwrap_or_default()
            .replace("zzzzzzzz", "ID");
        assert!(shown.starts_with("unknown"), "{v}");
        assert_eq!(shown, unknown);
    }
    assert_eq!(s.status(&id1), "pending");
    assert_eq!(s.status(&id2), "pending");
    assert_eq!(s.logged("tc.elicit.approved").len(), 0);

    // Human 2 approves their own: only their agent's retry runs.
    let (st, v) = p2.approve_totp(&id2, &right_code(&secret2));
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.status(&id1), "pending");
    assert_eq!(
        refused_id(&a1.call_tool(3, "write_file", args.clone())),
        id1,
        "human 1's agent ran on human 2's approval"
    );
    assert_eq!(s.file("shared.txt"), "v0");
    let ok = a2.call_tool(3, "write_file", args.clone());
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.file("shared.txt"), "v1");

    // Once: neither retry runs again.
    std::fs::write(s.root.join("shared.txt"), "v0").unwrap();
    let id2b = refused_id(&a2.call_tool(4, "write_file", args.clone()));
    assert_ne!(id2b, id2);
    assert_eq!(
        refused_id(&a1.call_tool(4, "write_file", args.clone())),
        id1
    );
    assert_eq!(s.file("shared.txt"), "v0");
    let approved = s.logged("tc.elicit.approved");
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["detail"]["request_id"], id2.as_str());
    assert_eq!(approved[0]["detail"]["uid"], s.d.human2.uid);
    assert_eq!(s.logged("tc.elicit.consumed").len(), 1);
}

/// One human never sees another's requests: human 2's `tcctl pending --json`, page state
/// and `tcctl events --json` hold neither human 1's request id nor the arguments nor the
/// preview of human 1's 0600 file (all of which human 1 and root do see), while showing
/// human 2 their own; root's page session sees both, read-only.
#[test]
fn one_human_never_sees_another_humans_requests_previews_or_events() {
    let Some(s) = scene("one_human_never_sees_another_humans_requests_previews_or_events") else {
        return;
    };
    let (mut a1, mut a2) = (s.agent_as(s.h1()), s.agent_as(s.h2()));
    let id1 = refused_id(&a1.call_tool(1, "write_file", write("secret.txt", NEW_SECRET)));
    let id2 = refused_id(&a2.call_tool(1, "write_file", write("shared.txt", "v2")));
    let hidden = |what: &str, out: &str| {
        for planted in [SECRET, NEW_SECRET, id1.as_str()] {
            assert!(!out.contains(planted), "{what} shows {planted:?}:\n{out}");
        }
    };

    // The controls: human 1 and root see it all.
    for who in [Some(s.h1()), None] {
        let (raw, _) = s.pending(who);
        assert!(
            raw.contains(&id1) && raw.contains(SECRET) && raw.contains(NEW_SECRET),
            "{raw}"
        );
    }
    let p1 = s.session(s.h1());
    let st1 = p1.state().to_string();
    assert!(st1.contains(&id1) && st1.contains(SECRET), "{st1}");
    assert!(
        !st1.contains(&id2),
        "human 1's page shows human 2's request: {st1}"
    );
    assert!(s.events_of(None).0.contains(&id1));

    // Human 2: their own only.
    let (raw, rows) = s.pending(Some(s.h2()));
    hidden("human 2's tcctl pending --json", &raw);
    assert_eq!(rows.len(), 1, "{raw}");
    assert_eq!(rows[0]["request_id"], id2.as_str());
    let p2 = s.session(s.h2());
    let state = p2.state();
    hidden("human 2's page state", &state.to_string());
    let ids: Vec<&str> = state["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id2.as_str()], "{state}");
    let (st, out) = p2.get(&format!("/requests/{id1}"));
    assert_eq!(st, 200);
    hidden("human 2's page at human 1's request", &out);
    let (st, feed) = p2.first_event();
    assert_eq!(st, 200, "{feed}");
    assert!(
        feed.contains(&id2),
        "human 2's event stream lacks their own: {feed}"
    );
    hidden("human 2's event stream", &feed);
    let (raw, rows) = s.events_of(Some(s.h2()));
    hidden("human 2's tcctl events --json", &raw);
    assert!(
        rows.iter()
            .any(|e| e["kind"] == "tc.elicit.requested" && e.to_string().contains(&id2)),
        "human 2 does not see their own events: {raw}"
    );
    // Human 1 answers theirs: the history of it is theirs too.
    let (st, v) = p1.post(
        &format!("/api/requests/{id1}/decline"),
        &json!({ "reason": REASON }),
    );
    assert_eq!(st, 200, "{v}");
    let h1 = p1.state()["history"].to_string();
    assert!(h1.contains(&id1) && h1.contains(REASON), "{h1}");
    let state = p2.state();
    hidden("human 2's page after the decline", &state.to_string());
    assert!(!state.to_string().contains(REASON), "{state}");
    let (raw, _) = s.events_of(Some(s.h2()));
    hidden("human 2's events after the decline", &raw);
    assert!(!raw.contains(REASON), "{raw}");
    let (_, feed) = p2.first_event();
    hidden("human 2's event stream after the decline", &feed);
    assert!(!feed.contains(REASON), "{feed}");

    // A uid that is no human: neither.
    for args in [["pending", "--json"], ["events", "--json"]] {
        let o = s.tcctl((&s.d.other, &s.d.other_home), &args);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        hidden("tcother's tcctl", &text(&o));
    }

    // Root's page session: everyone's, read-only.
    let link = {
        let o = s.d.tcctl_as_root(&["page", "--print"]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let root = PageSession::open(&link);
    let state = root.state();
    assert_eq!(state["read_only"], true, "{state}");
    let all = state["requests"].to_string();
    assert!(all.contains(&id1) && all.contains(&id2), "{state}");
    for (path, body) in [
        (format!("/api/requests/{id2}/decline"), json!({})),
        (
            format!("/api/requests/{id2}/approve/totp"),
            json!({"code": "123456"}),
        ),
        (format!("/api/requests/{id2}/approve/start"), json!({})),
    ] {
        let (st, v) = root.post(&path, &body);
        assert_eq!(st, 403, "{path}: {v}");
    }
    assert_eq!(s.status(&id2), "pending");
    assert_eq!(s.logged("tc.factor.failed").len(), 0);
}

/// A human cannot decline another human's request, on the page or with tcctl: the
/// refusal is the one an unknown id gets, the request stays pending and its agent is not
/// told no; its own human (page) and root (tcctl) can.
#[test]
fn a_human_cannot_decline_another_humans_request() {
    let Some(s) = scene("a_human_cannot_decline_another_humans_request") else {
        return;
    };
    let (mut a1, mut a2) = (s.agent_as(s.h1()), s.agent_as(s.h2()));
    let args = write("shared.txt", "v1");
    let id1 = refused_id(&a1.call_tool(1, "write_file", args.clone()));
    let id2 = refused_id(&a2.call_tool(1, "write_file", args.clone()));
    let unknown = "22222222";
    assert!(![&id1, &id2].contains(&&unknown.to_string()));

    // The page.
    let p2 = s.session(s.h2());
    let decline = |p: &PageSession, id: &str| {
        p.post(
            &format!("/api/requests/{id}/decline"),
            &json!({"reason": "not yours"}),
        )
    };
    let (st, theirs) = decline(&p2, &id1);
    let (st_u, none) = decline(&p2, unknown);
    assert_eq!((st, st_u), (409, 409), "{theirs} / {none}");
    assert_eq!(
        without(theirs["error"].as_str().unwrap(), &id1),
        without(none["error"].as_str().unwrap(), unknown),
        "another human's request is told apart from an unknown one"
    );
    // tcctl.
    let theirs = s.tcctl(s.h2(), &["decline", &id1, "--reason", "not yours"]);
    let none = s.tcctl(s.h2(), &["decline", unknown]);
    assert!(!theirs.status.success(), "{}", text(&theirs));
    assert_eq!(theirs.status.code(), none.status.code());
    assert_eq!(
        without(&stderr(&theirs), &id1),
        without(&stderr(&none), unknown)
    );

    assert_eq!(s.status(&id1), "pending");
    assert_eq!(s.logged("tc.elicit.declined").len(), 0);
    assert_eq!(
        refused_id(&a1.call_tool(2, "write_file", args.clone())),
        id1
    );

    // Its own human declines it on the page; root declines human 2's with tcctl.
    let p1 = s.session(s.h1());
    let (st, v) = decline(&p1, &id1);
    assert_eq!(st, 200, "{v}");
    let d = a1.call_tool(3, "write_file", args.clone());
    assert_eq!(code(&d).as_deref(), Some("approval_declined"), "{d}");
    let o = s.d.tcctl_as_root(&["decline", &id2]);
    assert!(o.status.success(), "{}", text(&o));
    let d = a2.call_tool(2, "write_file", args);
    assert_eq!(code(&d).as_deref(), Some("approval_declined"), "{d}");
    assert_eq!(s.file("shared.txt"), "v0");
}

/// Wrong registration codes count against the session and the human that typed them,
/// never anyone else: human 1's code typed in human 2's session does not work (and stays
/// good), five wrong ones close that session to more, twenty close human 2's codes
/// (their own live code is voided), and human 1's code, issued before all that, still
/// starts a registration in human 1's session.
#[test]
fn wrong_registration_codes_count_against_their_own_session_and_human_only() {
    let Some(s) = scene("wrong_registration_codes_count_against_their_own_session_and_human_only")
    else {
        return;
    };
    let c1 = s.passkey_code(s.h1());
    let c2 = s.passkey_code(s.h2());
    let start =
        |p: &PageSession, code: &str| p.post("/api/passkeys/start", &json!({ "code": code }));
    let wrong = |v: &Value| {
        v["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("wrong or expired code"))
    };

    // Human 2 types human 1's code: not theirs.
    let mut p2 = s.session(s.h2());
    let (st, v) = start(&p2, &c1);
    assert!(st == 403 && wrong(&v), "{st} {v}");
    let mut failures = 1;
    let mut in_session = 1;
    // Then wrong codes until human 2 has typed twenty; five per session at most.
    let mut n = 0;
    while failures < 20 {
        if in_session == 5 {
            let (st, v) = start(&p2, "2222-2222-2222");
            assert_eq!(st, 403, "{v}");
            assert!(
                v["error"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("too many wrong codes in this session"),
                "{v}"
            );
            p2 = s.session(s.h2());
            in_session = 0;
        }
        n += 1;
        let (st, v) = start(&p2, &format!("wrongcode{n:03}"));
        assert!(st == 403 && wrong(&v), "{st} {v}");
        failures += 1;
        in_session += 1;
    }
    // Human 2's own live code went with the twentieth.
    let p2 = s.session(s.h2());
    let (st, v) = start(&p2, &c2);
    assert!(
        st == 403 && wrong(&v),
        "human 2's codes were not voided: {st} {v}"
    );

    // Human 1's code is untouched.
    let p1 = s.session(s.h1());
    let (st, v) = start(&p1, &c1);
    assert_eq!(st, 200, "{v}");
    assert!(v["publicKey"]["challenge"].is_string(), "{v}");
}

/// A passkey registered with a one-time code (a software authenticator: what an agent
/// holding a leaked code could use) approves nothing until its human confirms it on their
/// terminal with their TOTP code: the agent's own session starts a registration with the
/// code alone; the browser registers one in the human's session and is told to confirm;
/// `tcctl passkey list` shows it inactive (and human 2 neither sees nor removes it); the
/// page refuses to approve with it; `tcctl passkey confirm` with the right code activates
/// it; it then approves, the retry runs once, the approval event names the credential,
/// and `tcctl passkey remove` takes it away (logged).
#[test]
fn a_new_passkey_approves_nothing_until_its_human_confirms_it_on_the_terminal() {
    if !Browser::available() {
        eprintln!("skipped: needs /usr/bin/chromium and playwright-core (scripts/install-peers)");
        return;
    }
    let Some(s) =
        scene("a_new_passkey_approves_nothing_until_its_human_confirms_it_on_the_terminal")
    else {
        return;
    };
    let secret = s.enroll_user(guarded::HUMAN);
    let mut agent = s.agent_as(s.h1());
    let args = write("note.txt", "v1");
    let id = refused_id(&agent.call_tool(1, "write_file", args.clone()));

    // The agent (the human's uid) with a code it saw: a session of its own starts a
    // registration; the code alone is enough for that much.
    let leaked = s.passkey_code(s.h1());
    let own = s.session(s.h1());
    let (st, v) = own.post("/api/passkeys/start", &json!({ "code": leaked }));
    assert_eq!(st, 200, "{v}");
    assert!(v["publicKey"]["challenge"].is_string(), "{v}");

    // A software authenticator registers with a code: inactive, and the page says so.
    let code = s.passkey_code(s.h1());
    let mut b = Browser::open_as(s.h1(), &s.link(s.h1()));
    let msg = b.cmd(json!({"op": "register", "code": code}))["msg"]
        .as_str()
        .unwrap()
        .to_string();
    let want = "passkey added: it approves nothing until you confirm it on your terminal: tcctl passkey confirm ";
    assert!(msg.starts_with(want), "{msg}");
    let short = msg[want.len()..].trim().to_string();
    assert!(
        short.len() == 16 && short.bytes().all(|c| c.is_ascii_hexdigit()),
        "{msg}"
    );
    let keys = s.passkeys(s.h1());
    assert_eq!(keys.len(), 1, "{keys:?}");
    let cred = keys[0]["credential"].as_str().unwrap().to_string();
    assert!(cred.starts_with(&short), "{keys:?}");
    assert_eq!(keys[0]["active"], false, "{keys:?}");
    assert_eq!(keys[0]["owner_uid"], s.d.human.uid, "{keys:?}");
    let added = s.logged("tc.passkey.added");
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0]["detail"]["credential"], cred.as_str());
    // Not human 2's to see or remove.
    assert_eq!(s.passkeys(s.h2()), Vec::<Value>::new());
    let o = s.tcctl(s.h2(), &["passkey", "remove", &short]);
    assert!(!o.status.success(), "{}", text(&o));
    assert_eq!(s.passkeys(s.h1()).len(), 1);

    // Unconfirmed, it approves nothing.
    let (st, v) = b.post(&format!("/api/requests/{id}/approve/start"), json!({}));
    assert_eq!(st, 409, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no passkey of yours is registered and confirmed"),
        "{v}"
    );
    assert_eq!(s.status(&id), "pending");
    assert_eq!(
        refused_id(&agent.call_tool(2, "write_file", args.clone())),
        id
    );
    assert_eq!(s.file("note.txt"), "v0");

    // The human confirms it on their terminal with their code.
    let tcctl = bin("tcctl").display().to_string();
    let mut p = guarded::on_pty(Some(s.h1()), &[&tcctl, "passkey", "confirm", &short]);
    p.wait_for("Enter the 6-digit code");
    p.type_line(&right_code(&secret));
    let (rc, out) = p.finish();
    assert!(
        rc == 0 && out.contains(&format!("confirmed {cred}")),
        "{out}"
    );
    assert_eq!(s.passkeys(s.h1())[0]["active"], true);
    let confirmed = s.logged("tc.passkey.confirmed");
    assert_eq!(confirmed.len(), 1, "{confirmed:?}");
    assert_eq!(confirmed[0]["detail"]["credential"], cred.as_str());

    // Now it approves (a genuine assertion from the page), once.
    let assertion = b.cmd(json!({"op": "assertion", "id": id}))["credential"].clone();
    let (st, v) = b.post(
        &format!("/api/requests/{id}/approve/finish"),
        json!({ "credential": assertion }),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.status(&id), "approved");
    let ok = agent.call_tool(3, "write_file", args.clone());
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(s.file("note.txt"), "v1");
    std::fs::write(s.root.join("note.txt"), "v0").unwrap();
    let id2 = refused_id(&agent.call_tool(4, "write_file", args.clone()));
    assert_ne!(id2, id);
    assert_eq!(s.file("note.txt"), "v0");
    let approved = s.logged("tc.elicit.approved");
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["detail"]["credential"], cred.as_str());
    assert_eq!(approved[0]["detail"]["factor"], "passkey");

    // Removed: gone, logged, and it approves nothing again.
    let o = s.tcctl(s.h1(), &["passkey", "remove", &short]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.passkeys(s.h1()), Vec::<Value>::new());
    let removed = s.logged("tc.passkey.removed");
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0]["detail"]["credential"], cred.as_str());
    let (st, v) = b.post(&format!("/api/requests/{id2}/approve/start"), json!({}));
    assert_eq!(st, 409, "{v}");
}
