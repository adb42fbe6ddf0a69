//! In-protocol confirmation: which route a gated call takes (CLI token, the legacy
//! `elicitation/create` the shim sends itself, or the 2026-07-28 `inputRequired` round
//! trip), the confirmation form and its message, and how an answer is read.

use serde_json::{json, Value};
use tc_core::config::Targets;
use tc_core::display::escape;

use crate::wire::era::Era;

/// The key of our confirmation in `inputRequests` / `inputResponses`.
pub const CONFIRM_KEY: &str = "confirm";
/// The boolean form field the human ticks.
pub const APPROVE_FIELD: &str = "approve";

/// How a gated call without a token gets its confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `elicit_required`: the operator mints a token with `tcctl elicit`.
    Cli,
    /// The shim sends `elicitation/create` to a legacy client and waits for the answer.
    Legacy,
    /// The shim answers `input_required`; the client re-sends the call with the answer.
    Modern,
    /// The shim sends a legacy client that declares `elicitation.url` the approval page's
    /// link for the request (`gate/routes/url_mode.rs`) and waits for tcd's approval.
    Url,
    /// Route 3u: the modern round trip with the page's link as its embedded request
    /// (`gate/routes/url_modern.rs`); the re-sent call waits for tcd's approval.
    ModernUrl,
}

/// Picks the route for a call. `caps` are the client's capabilities: from `initialize`
/// on a legacy connection, from the request's own `_meta` on a modern one (never
/// inferred from earlier requests). The legacy round trip is opt-in per vault. `page`: the
/// approval page is configured (`[approvals] listen`).
///
/// A client that declares URL mode gets the page's link when the page exists (preferred
/// over the form): there the human sees the full arguments and the diff, and (guarded mode)
/// gives the factor the form cannot carry, so the approval is made where it can be judged.
/// On the modern era the re-sent call waits for the page's approval (route 3u); the legacy
/// URL route, like the legacy form, is opt-in per vault.
pub fn route(era: Era, caps: Option<&Value>, legacy_opt_in: bool, page: bool) -> Route {
    if page && url_mode(caps) {
        match era {
            Era::Modern => return Route::ModernUrl,
            Era::Legacy if legacy_opt_in => return Route::Url,
            Era::Legacy => {}
        }
    }
    if !form_mode(caps) {
        return Route::Cli;
    }
    match era {
        Era::Modern => Route::Modern,
        Era::Legacy if legacy_opt_in => Route::Legacy,
        Era::Legacy => Route::Cli,
    }
}

/// Whether the client can render a form: an `elicitation` capability with a `form`
/// key, or with neither `form` nor `url` (a bare `{}` is the 2025 pre-mode default,
/// form mode, on every era).
pub fn form_mode(caps: Option<&Value>) -> bool {
    match caps.and_then(|c| c.get("elicitation")) {
        Some(Value::Object(e)) => e.contains_key("form") || !e.contains_key("url"),
        _ => false,
    }
}

/// Whether the client declared URL-mode elicitation (`elicitation.url`, 2025-11-25 on).
pub fn url_mode(caps: Option<&Value>) -> bool {
    caps.and_then(|c| c.pointer("/elicitation/url"))
        .is_some_and(Value::is_object)
}

/// The form: one boolean, false by default, so only a deliberate tick approves.
pub fn requested_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            APPROVE_FIELD: {
                "type": "boolean",
                "title": "Approve this call",
                "description": "Tick to let the call run once, with exactly these arguments.",
                "default": false,
            }
        },
        "required": [APPROVE_FIELD],
    })
}

/// What the human is asked: the tool, the vault, the arguments and what the approval
/// is bound to. `summary` comes from `summary::summarize`, already escaped; the rest is
/// escaped here, so no part of the message can act on the client's display.
pub fn message(tool: &str, vault: &str, summary: &str, targets: Option<&Targets>) -> String {
    let (tool, vault) = (escape(tool), escape(vault));
    format!(
        "An AI agent wants to run `{tool}` on `{vault}`.\n\nCall: {summary}\n\n\
         The approval covers {}. If that changes before the call runs, it is refused.\n\n\
         Approve it to run it once, with exactly these arguments (a long value is shortened \
         here, with its full length; the approval binds it in full).",
        describe_targets(targets)
    )
}

pub fn describe_targets(t: Option<&Targets>) -> String {
    match t {
        Some(Targets::None) | None => {
            "these exact arguments only (the effect cannot be observed beforehand)".into()
        }
        Some(Targets::Paths(a)) => format!(
            "the current content of the paths in {}",
            quoted(a.iter().map(String::as_str))
        ),
        Some(Targets::Tree { root, glob }) => {
            format!(
                "the files matching `{}` under the folder in `{}`, as they are now",
                escape(glob),
                escape(root)
            )
        }
        Some(Targets::Matching { root, contains }) => format!(
            "the files under the folder in `{}` that contain the value of `{}`, as they are now",
            escape(root),
            escape(contains)
        ),
        Some(Targets::Git(repo)) => format!(
            "the repository's HEAD and staged index{}",
            repo.as_ref()
                .map(|r| format!(" (repository in `{}`)", escape(r)))
                .unwrap_or_default()
        ),
        Some(Targets::Probe { tool, .. }) => format!("what `{}` reports right now", escape(tool)),
    }
}

fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{}`", escape(n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `elicitation/create` params. `mode` exists from 2025-11-25 on; 2025-06-18 has none.
pub fn elicit_params(message: &str, protocol_version: &str) -> Value {
    let mut p = json!({ "message": message, "requestedSchema": requested_schema() });
    if protocol_version != "2025-06-18" {
        p["mode"] = json!("form");
    }
    p
}

/// The round-1 answer of the modern route: our form as an embedded request, and the
/// daemon-sealed state the client must echo back.
pub fn input_required(request_state: &str, message: &str) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {
            CONFIRM_KEY: { "method": "elicitation/create", "params": elicit_params(message, "") }
        },
        "requestState": request_state,
    })
}

/// The round-1 answer of route 3u: the page's link as the embedded request (2026-07-28
/// `ElicitRequestURLParams`: no `elicitationId` on this era), and the sealed state.
pub fn input_required_url(request_state: &str, message: &str, url: &str) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {
            CONFIRM_KEY: {
                "method": "elicitation/create",
                "params": { "mode": "url", "message": message, "url": url },
            }
        },
        "requestState": request_state,
    })
}

/// What the human answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `accept` with `approve: true`: the only approval.
    Approved,
    /// `decline`, or `accept` with `approve: false`: a hard stop.
    Declined,
    /// `cancel`, or `accept` without a boolean `approve`: dismissed, nobody said no.
    Cancelled,
}

/// Reads an `ElicitResult` (`{action, content}`); anything unreadable is not an approval.
pub fn read_answer(result: &Value) -> Answer {
    match result.get("action").and_then(Value::as_str) {
        Some("accept") => {
            // Only an explicit `false` is a "no"; a form that came back without a boolean
            // (not rendered, or stringly typed) approves nothing but refused nothing either.
            match result.pointer(&format!("/content/{APPROVE_FIELD}")) {
                Some(Value::Bool(true)) => Answer::Approved,
                Some(Value::Bool(false)) => Answer::Declined,
                _ => Answer::Cancelled,
            }
        }
        Some("decline") => Answer::Declined,
        _ => Answer::Cancelled,
    }
}

/// The answer to our confirmation in a modern re-sent call, if it carries one.
pub fn modern_answer(params: &Value) -> Option<Answer> {
    params
        .get("inputResponses")
        .and_then(|r| r.get(CONFIRM_KEY))
        .map(read_answer)
}

/// The `requestState` a modern re-sent call echoes back.
pub fn request_state(params: &Value) -> Option<&str> {
    params.get("requestState").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_mode_follows_the_capability() {
        assert!(form_mode(Some(&json!({"elicitation": {}}))));
        assert!(form_mode(Some(&json!({"elicitation": {"form": {}}}))));
        assert!(form_mode(Some(
            &json!({"elicitation": {"form": {}, "url": {}}})
        )));
        assert!(!form_mode(Some(&json!({"elicitation": {"url": {}}}))));
        assert!(!form_mode(Some(&json!({"sampling": {}}))));
        assert!(!form_mode(Some(&json!({"elicitation": true}))));
        assert!(!form_mode(None));
    }

    #[test]
    fn routes() {
        let e = json!({"elicitation": {}});
        assert_eq!(route(Era::Modern, Some(&e), false, false), Route::Modern);
        assert_eq!(route(Era::Legacy, Some(&e), true, false), Route::Legacy);
        assert_eq!(route(Era::Legacy, Some(&e), false, false), Route::Cli);
        assert_eq!(
            route(Era::Modern, Some(&json!({})), true, false),
            Route::Cli
        );
        assert_eq!(route(Era::Legacy, None, true, false), Route::Cli);
        // URL mode: legacy era, opted in, the page configured; preferred over the form.
        let u = json!({"elicitation": {"url": {}}});
        let both = json!({"elicitation": {"form": {}, "url": {}}});
        assert_eq!(route(Era::Legacy, Some(&u), true, true), Route::Url);
        assert_eq!(route(Era::Legacy, Some(&both), true, true), Route::Url);
        assert_eq!(route(Era::Legacy, Some(&both), true, false), Route::Legacy);
        assert_eq!(route(Era::Legacy, Some(&u), true, false), Route::Cli);
        assert_eq!(route(Era::Legacy, Some(&u), false, true), Route::Cli);
        assert_eq!(route(Era::Legacy, Some(&e), true, true), Route::Legacy);
        // Modern era: the page's link whenever the page exists, opt-in or not.
        assert_eq!(route(Era::Modern, Some(&u), true, true), Route::ModernUrl);
        assert_eq!(route(Era::Modern, Some(&u), false, true), Route::ModernUrl);
        assert_eq!(
            route(Era::Modern, Some(&both), false, true),
            Route::ModernUrl
        );
        assert_eq!(route(Era::Modern, Some(&both), true, false), Route::Modern);
        assert_eq!(route(Era::Modern, Some(&u), true, false), Route::Cli);
        assert_eq!(route(Era::Modern, Some(&e), true, true), Route::Modern);
        assert_eq!(route(Era::Modern, Some(&odd0()), true, true), Route::Cli);
        assert_eq!(route(Era::Legacy, Some(&odd0()), true, true), Route::Cli);
    }

    fn odd0() -> Value {
        json!({"elicitation": {"url": true}})
    }

    #[test]
    fn answers() {
        let a = |v: Value| read_answer(&v);
        assert_eq!(
            a(json!({"action": "accept", "content": {"approve": true}})),
            Answer::Approved
        );
        assert_eq!(
            a(json!({"action": "accept", "content": {"approve": false}})),
            Answer::Declined
        );
        assert_eq!(
            a(json!({"action": "accept", "content": {"approve": "true"}})),
            Answer::Cancelled
        );
        assert_eq!(a(json!({"action": "accept"})), Answer::Cancelled);
        assert_eq!(a(json!({"action": "decline"})), Answer::Declined);
        assert_eq!(a(json!({"action": "cancel"})), Answer::Cancelled);
        assert_eq!(a(json!({"action": "maybe"})), Answer::Cancelled);
        assert_eq!(a(json!(null)), Answer::Cancelled);
        let p = json!({"inputResponses": {"confirm": {"action": "decline"}}, "requestState": "s"});
        assert_eq!(modern_answer(&p), Some(Answer::Declined));
        assert_eq!(request_state(&p), Some("s"));
        assert_eq!(
            modern_answer(&json!({"inputResponses": {"other": {}}})),
            None
        );
    }

    #[test]
    fn shapes() {
        assert!(elicit_params("m", "2025-06-18").get("mode").is_none());
        assert_eq!(elicit_params("m", "2025-11-25")["mode"], "form");
        let r = input_required("st", "m");
        assert_eq!(r["resultType"], "input_required");
        assert_eq!(r["requestState"], "st");
        assert_eq!(
            r["inputRequests"]["confirm"]["method"],
            "elicitation/create"
        );
        assert_eq!(r["inputRequests"]["confirm"]["params"]["mode"], "form");
        let r = input_required_url("st", "m", "http://127.0.0.1:7777/requests/abcd2345");
        let p = &r["inputRequests"]["confirm"]["params"];
        assert_eq!(r["requestState"], "st");
        assert_eq!(p["mode"], "url");
        assert_eq!(p["url"], "http://127.0.0.1:7777/requests/abcd2345");
        assert!(p.get("elicitationId").is_none() && p.get("requestedSchema").is_none());
        let m = message(
            "move_file",
            "notes",
            "move_file {..}",
            Some(&Targets::Paths(vec!["source".into()])),
        );
        assert!(m.contains("`move_file`") && m.contains("`notes`") && m.contains("`source`"));
        let m = message("t\u{202e}", "v\x1b[2K", "t", None);
        assert!(
            m.contains("`t⟨U+202E⟩`") && m.contains("`v⟨U+001B⟩[2K`"),
            "{m}"
        );
        assert!(!m.contains('\u{202e}') && !m.contains('\x1b'), "{m}");
    }
}
