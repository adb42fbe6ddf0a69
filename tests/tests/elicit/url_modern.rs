//! End to end, route 3u (issue 17 item 4 on the 2026-07-28 era): the Python `mcp` 2.3
//! `mcp.Client(mode="auto")`, declaring URL-mode elicitation, → real tc-shim (stdio) → real
//! server-filesystem, real tcd with `[approvals] listen` set, real `tcctl`. Round 1 embeds
//! the request's page link; the re-sent call waits for tcd's decision on that request,
//! reporting progress to its token meanwhile.

use tc_tests::elicit::*;
use tc_tests::shim::*;

use serde_json::{json, Value};

/// The scene: a vault with the page on its own port (unless `page` is false; `ttl`: the
/// confirmation TTL in seconds), and the modern client (`driver`: `modern`, `modern-form`
/// or `modern-url`).
struct Url {
    env: Env,
    h: Human,
    port: u16,
}

impl Url {
    fn start(page: bool, driver: &str, ttl: Option<u32>) -> Url {
        let port = tc_tests::free_port();
        let env = url_env("", page.then_some(port), ttl);
        let h = Human::python(driver, &env.shim_argv("fs"));
        assert_eq!(h.hello["era"], "modern", "{}", h.hello);
        assert_eq!(h.hello["protocolVersion"], "2026-07-28");
        Url { env, h, port }
    }

    /// The page on, the client declaring both modes.
    fn modern() -> Url {
        Url::start(true, "modern", None)
    }

    /// Checks a URL prompt (as the SDK handed it to the callback) and returns the
    /// request id.
    #[track_caller]
    fn link_of(&self, prompt: &Value) -> String {
        assert!(prompt.get("elicitationId").is_none(), "{prompt}");
        url_request_id(prompt, self.port)
    }

    /// Starts the gated call (the SDK drives the rounds) and waits for its link.
    fn call_for_link(&mut self) -> (String, String) {
        let tag = self.h.start_call("write_file", write_v1());
        let prompt = self.h.prompt();
        (tag, self.link_of(&prompt))
    }

    /// Starts the gated call, waits for its link and answers it with `action`.
    fn link_answered(&mut self, action: &str) -> (String, String) {
        let (tag, id) = self.call_for_link();
        self.h.answer(json!({ "action": action }));
        (tag, id)
    }

    /// The call `tag` ended refused with `want`; returns its result.
    #[track_caller]
    fn refused(&mut self, tag: &str, want: &str) -> Value {
        let r = self.h.result(tag);
        assert_code(&r, want);
        r
    }

    /// The request's status as tcd's ListPending reports it (JSON lines).
    fn status_of(&self, id: &str) -> String {
        let o = self.env.tcd.tcctl(&["pending", "--json"]);
        assert_ok(&o);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v["request_id"] == id)
            .map(|v| v["status"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("request {id} not listed"))
    }

    /// Declines request `id` on the page as the human would: a session from the link
    /// `tcctl page` mints, then the POST with its cookie and CSRF token, from the page's
    /// own origin.
    fn decline_on_the_page(&self, id: &str, reason: &str) {
        let o = self.env.tcd.tcctl(&["page", "--print"]);
        assert_ok(&o);
        let page = tc_tests::page::PageSession::open(String::from_utf8_lossy(&o.stdout).trim());
        let (st, out) = page.post(
            &format!("/api/requests/{id}/decline"),
            &json!({ "reason": reason }),
        );
        assert_eq!(st, 200, "{out}");
    }

    /// Approved later, the identical plain retry runs once, unprompted.
    fn approve_then_retry_runs_once(&mut self, id: &str) {
        assert_eq!(self.status_of(id), "pending");
        tcctl_approve(&self.env, id);
        let r = self.h.call("write_file", write_v1());
        assert_wrote_v1_once(&self.env, &r);
    }

    /// Once: the next identical call asks afresh (a new link, cancelled here); it does not
    /// run again.
    fn next_call_gets_a_fresh_link(&mut self, id: &str) -> String {
        let (tag, again) = self.link_answered("cancel");
        assert_ne!(again, id);
        tag
    }
}

#[test]
fn url_accept_then_approval_runs_the_call_once() {
    let mut u = Url::modern();
    // The human agrees to open the page: that approves nothing.
    let (tag, id) = u.link_answered("accept");
    assert_note(&u.env, "v0");
    assert_eq!(u.status_of(&id), "pending");
    // The approval the page gives, through the same RPC (personal mode: tcctl).
    tcctl_approve(&u.env, &id);
    let r = u.h.result(&tag);
    assert_wrote_v1_once(&u.env, &r);
    // Spent: the identical call asks afresh (a new link); it does not run again.
    std::fs::write(u.env.root.join("note.txt"), "v0").unwrap();
    let tag = u.next_call_gets_a_fresh_link(&id);
    u.refused(&tag, "approval_not_obtained");
    assert_note(&u.env, "v0");
    assert_eq!(events_of(&u.env, "tc.elicit.consumed"), 1);
}

#[test]
fn a_form_approve_sent_for_the_link_is_no_approval() {
    // A client answering the link as if it were our form (accept + approve: true) has only
    // agreed to open the page: the call waits, and runs once a human declines or approves.
    let mut u = Url::modern();
    let (tag, id) = u.call_for_link();
    u.h.answer(approve());
    assert_note(&u.env, "v0");
    u.decline_on_the_page(&id, "not this file");
    u.refused(&tag, "approval_declined");
    assert_note(&u.env, "v0");
}

#[test]
fn page_decline_is_approval_declined_with_the_reason() {
    let mut u = Url::modern();
    let (tag, id) = u.link_answered("accept");
    u.decline_on_the_page(&id, "not on a Friday");
    let r = u.refused(&tag, "approval_declined");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not on a Friday"), "{text}");
    assert_note(&u.env, "v0");
    assert_eq!(u.status_of(&id), "declined");
}

#[test]
fn client_decline_is_a_hard_stop_and_declines_in_tcd() {
    let mut u = Url::modern();
    let (tag, id) = u.link_answered("decline");
    u.refused(&tag, "approval_declined");
    assert_eq!(events_of(&u.env, "tc.elicit.declined"), 1);
    assert_eq!(u.status_of(&id), "declined");
    // Declined in tcd too: the page (or tcctl) cannot approve it afterwards.
    let o = u.env.tcd.tcctl(&["approve", &id, "--yes"]);
    assert!(!o.status.success(), "{o:?}");
    assert_note(&u.env, "v0");
}

#[test]
fn client_cancel_then_tcctl_approve_and_the_plain_retry_runs_once() {
    let mut u = Url::modern();
    let (tag, id) = u.link_answered("cancel");
    let r = u.refused(&tag, "approval_not_obtained");
    let s = sc(&r);
    assert_eq!(s["recovery"]["approve"], format!("tcctl approve {id}"));
    assert_eq!(
        s["recovery"]["url"],
        format!("http://127.0.0.1:{}/requests/{id}", u.port)
    );
    assert_eq!(events_of(&u.env, "tc.elicit.not_obtained"), 1);
    // The request stays pending: approved later, the identical retry runs once, unprompted.
    u.approve_then_retry_runs_once(&id);
    // Once: the next identical call gets a fresh link.
    let tag = u.next_call_gets_a_fresh_link(&id);
    u.h.result(&tag);
    assert_eq!(events_of(&u.env, "tc.elicit.consumed"), 1);
}

#[test]
fn a_cancelled_wait_gets_no_answer_and_the_request_stays_pending() {
    let mut u = Url::modern();
    let (tag, id) = u.link_answered("accept");
    u.h.cancel(&tag);
    let o = u.h.outcome(&tag);
    assert_eq!(o["cancelled"], true, "{o}");
    u.approve_then_retry_runs_once(&id);
}

#[test]
fn a_replayed_round_two_state_is_refused_as_spent() {
    let mut u = Url::modern();
    let tag = u.h.start_raw("write_file", write_v1(), None, None);
    let r = u.h.result(&tag);
    assert_eq!(r["resultType"], "input_required", "{r}");
    let id = u.link_of(&r["inputRequests"]["confirm"]["params"]);
    let state = r["requestState"].as_str().unwrap().to_string();
    let accept = json!({"action": "accept"});
    let tag =
        u.h.start_raw("write_file", write_v1(), Some(&state), Some(accept.clone()));
    tcctl_approve(&u.env, &id);
    let r = u.h.result(&tag);
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_wrote_v1_once(&u.env, &r);
    // Someone resets the file and replays the captured round 2.
    std::fs::write(u.env.root.join("note.txt"), "reset").unwrap();
    let tag =
        u.h.start_raw("write_file", write_v1(), Some(&state), Some(accept));
    let r = u.refused(&tag, "invalid_input");
    assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
    assert_note(&u.env, "reset");
    assert_eq!(events_of(&u.env, "tc.elicit.consumed"), 1);
}

#[test]
fn an_unanswered_request_reads_as_expired() {
    let mut u = Url::start(true, "modern", Some(2));
    let (tag, _id) = u.link_answered("accept");
    u.refused(&tag, "request_expired");
    assert_note(&u.env, "v0");
}

/// A form prompt answered with approve: the write runs.
fn the_form_approves(u: &mut Url) {
    let (p, r) = u.h.call_answering("write_file", write_v1(), approve());
    assert_eq!(p["mode"], "form", "{p}");
    assert_ne!(r["isError"], true, "{r}");
    assert_note(&u.env, "v1");
}

#[test]
fn url_only_gets_the_link_and_form_only_keeps_the_form() {
    let mut u = Url::start(true, "modern-url", None);
    let (tag, _) = u.link_answered("cancel");
    u.h.result(&tag);
    the_form_approves(&mut Url::start(true, "modern-form", None));
}

#[test]
fn without_a_page_the_form_or_the_cli_route() {
    // Both modes declared, no page: route 3 (the form), as before.
    the_form_approves(&mut Url::start(false, "modern", None));
    // URL only, no page: route 1, the refusal naming the request.
    let mut u = Url::start(false, "modern-url", None);
    let r = u.h.call("write_file", write_v1());
    assert_code(&r, "elicit_required");
    assert!(sc(&r)["details"]["request_id"].is_string(), "{r}");
    assert_note(&u.env, "v0");
}

#[test]
fn a_call_waiting_for_the_page_reports_progress_to_its_token() {
    let mut u = Url::modern();
    let opts = json!({"progress": true});
    let tag = u.h.start_call_with("write_file", write_v1(), opts);
    let id = {
        let prompt = u.h.prompt();
        u.link_of(&prompt)
    };
    u.h.answer(json!({ "action": "accept" }));
    // The re-sent call waits for the page; meanwhile its token gets progress.
    let reports = u.h.progress_of(&tag, std::time::Duration::from_secs(12));
    assert!(reports.len() >= 2, "progress while waiting: {reports:?}");
    let said = reports[0]["progress"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("write_file"), "{said}");
    tcctl_approve(&u.env, &id);
    let r = u.h.result(&tag);
    assert_wrote_v1_once(&u.env, &r);
}
