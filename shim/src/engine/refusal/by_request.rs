//! Approve by request, in words: what the agent is told (ask for `tcctl approve ID`, then
//! retry the identical call; declined; expired) and what a guarded-mode prompt tells the human.

use serde_json::{json, Value};
use tc_core::config::Targets;
use tc_core::display::escape;
use tc_core::ErrorCode;

use crate::engine::confirm::form::describe_targets;
use crate::engine::refusal::{elicit_command, Refusal, Shown};

/// The command that approves request `id`.
pub fn approve_command(id: &str) -> String {
    format!("tcctl approve {id}")
}

/// What the mode means, in one sentence, for the agent's refusals.
fn mode_note(mode: &str) -> String {
    match mode {
        "personal" => "tc runs in personal mode: an approval comes from the human's own terminal \
                       (a process running as the human could give it too; guarded mode closes that)."
            .into(),
        "guarded" => "tc runs in guarded mode: only the human can approve, with a code from their \
                      authenticator app typed on their own terminal."
            .into(),
        other => format!("tc runs in {} mode.", escape(other)),
    }
}

fn details(s: &Shown<'_>, id: &str, mode: &str) -> Value {
    let mut d = s.details();
    d["request_id"] = json!(id);
    d["mode"] = json!(mode);
    d
}

/// Where a minted token goes: beside the arguments, or (lean facade) inside the
/// `call_capability` call's own "arguments".
fn token_where(s: &Shown<'_>) -> &'static str {
    if s.lean {
        "send exactly the same `call_capability` call again with \"elicit_token\": \"<token>\" \
         added inside its \"arguments\""
    } else {
        "send exactly the same call again with the extra argument \"elicit_token\": \"<token>\""
    }
}

/// The route-1 refusal: ask the human to approve request `id`, then retry the identical
/// call. The `tcctl elicit` token route stays available (and is the `recovery.command`).
pub fn approve_required(s: &Shown<'_>, id: &str, mode: &str) -> Refusal {
    let approve = approve_command(id);
    let cmd = elicit_command(s);
    let again = if s.lean {
        "send exactly the same `call_capability` call again, with the same arguments"
    } else {
        "send exactly the same call again, with the same arguments"
    };
    let text = format!(
        "STOP: ask the human user before doing anything else. The tool call `{tool}` needs their \
         explicit confirmation and must not be worked around. Show them this call and ask them to \
         approve it by running, in their own terminal:\n\n    {approve}\n\nOnly after the human \
         says they approved it, {again}: it then runs once. If they decline it, do not retry.\n\n\
         (The operator can instead mint a single-use token with:\n\n    {cmd}\n\nand give it to \
         you: then {token}.) {mode}",
        tool = s.tool,
        token = token_where(s),
        mode = mode_note(mode),
    );
    Refusal::new(ErrorCode::ElicitRequired, text, details(s, id, mode))
        .recovery(json!({ "command": cmd, "approve": approve }))
}

/// The human declined the request (`tcctl decline`): the hard stop, with their reason.
pub fn declined(s: &Shown<'_>, why: &str) -> Refusal {
    let text = format!(
        "The human DECLINED the tool call `{}` ({}). Nothing was run. Do not retry it, do not work \
         around it by other means, and do not ask for a confirmation token: tell the human the \
         call was declined and ask what they want instead.",
        s.tool,
        escape(why)
    );
    let mut d = s.details();
    d["reason"] = json!(why);
    Refusal::new(ErrorCode::ApprovalDeclined, text, d)
}

/// The request expired before anyone answered it: nobody declined; a retry asks afresh.
pub fn expired(s: &Shown<'_>, why: &str) -> Refusal {
    let text = format!(
        "The confirmation request for `{}` EXPIRED before the human answered it ({}). Nothing was \
         run, and nobody declined it. If the call is still wanted, send it again: that raises a \
         fresh request, which you then ask the human to approve.",
        s.tool,
        escape(why)
    );
    Refusal::new(ErrorCode::RequestExpired, text, s.details())
}

/// Guarded mode: the client accepted, but tcd holds no factor-backed approval.
pub fn not_obtained(s: &Shown<'_>, id: &str, why: &str) -> Refusal {
    let approve = approve_command(id);
    let text = format!(
        "Approval for the tool call `{tool}` was not obtained ({why}); nothing was run and nobody \
         declined it. In guarded mode answering the prompt does not approve a call: STOP and ask \
         the human to run, in their own terminal:\n\n    {approve}\n\n(it asks for their code), \
         then send exactly the same call again.",
        tool = s.tool,
        why = escape(why),
    );
    let mut d = details(s, id, "guarded");
    d["why"] = json!(why);
    Refusal::new(ErrorCode::ApprovalNotObtained, text, d).recovery(json!({ "approve": approve }))
}

/// Route 3u, the link was dismissed (or the call came back without an answer to it): the
/// request stays pending on the page; approving it there or with `tcctl approve ID`, then
/// the identical retry, runs the call once.
pub fn page_not_obtained(s: &Shown<'_>, id: &str, url: &str, why: &str, mode: &str) -> Refusal {
    let approve = approve_command(id);
    let text = format!(
        "Approval for the tool call `{tool}` was not obtained ({why}); nothing was run and nobody          declined it. STOP and ask the human to approve request {id} on tc's approval page:

             {url}

or by running, in their own terminal:

    {approve}

Only after the human          says they approved it, send exactly the same call again (without requestState): it then          runs once. If they decline it, do not retry. {mode}",
        tool = s.tool,
        why = escape(why),
        mode = mode_note(mode),
    );
    let mut d = details(s, id, mode);
    d["why"] = json!(why);
    d["url"] = json!(url);
    Refusal::new(ErrorCode::ApprovalNotObtained, text, d)
        .recovery(json!({ "approve": approve, "url": url }))
}

/// The guarded-mode prompt: what the call is, and that the human approves it with their
/// factor on their terminal before accepting here (an accept alone approves nothing).
pub fn guarded_message(
    tool: &str,
    vault: &str,
    summary: &str,
    targets: Option<&Targets>,
    id: &str,
) -> String {
    let (tool, vault) = (escape(tool), escape(vault));
    format!(
        "An AI agent wants to run `{tool}` on `{vault}`.\n\nCall: {summary}\n\n\
         The approval covers {}. If that changes before the call runs, it is refused.\n\n\
         tc is in guarded mode: this prompt cannot approve the call by itself. To approve it, \
         run in your own terminal:\n\n    {}\n\n(it shows the call in full and asks for your \
         code), then tick Approve and accept here. Decline here to refuse it.",
        describe_targets(targets),
        approve_command(id)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown() -> Shown<'static> {
        Shown {
            vault: "v",
            tool: "t",
            caller: "stdio",
            args_hash: "a",
            state_fp: "f",
            lean: false,
        }
    }

    #[test]
    fn the_refusal_asks_for_tcctl_approve_and_keeps_the_token_route() {
        let r = approve_required(&shown(), "abcd2345", "personal").render(false);
        let sc = &r["structuredContent"];
        assert_eq!(sc["code"], "elicit_required");
        assert_eq!(sc["details"]["request_id"], "abcd2345");
        assert_eq!(sc["details"]["mode"], "personal");
        assert_eq!(sc["recovery"]["approve"], "tcctl approve abcd2345");
        let cmd = sc["recovery"]["command"].as_str().unwrap();
        assert!(cmd.starts_with("tcctl elicit --hash a --tool t"), "{cmd}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("STOP: ask the human"), "{text}");
        assert!(text.contains("    tcctl approve abcd2345\n"), "{text}");
        assert!(
            text.contains(cmd) && text.contains("personal mode"),
            "{text}"
        );
    }

    #[test]
    fn declines_expiries_and_guarded_texts() {
        let d = declined(&shown(), "wrong file\x1b[2J").render(false);
        assert_eq!(d["structuredContent"]["code"], "approval_declined");
        let text = d["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("DECLINED") && text.contains("wrong file⟨U+001B⟩[2J"));
        let e = expired(&shown(), "nobody answered").render(false);
        assert_eq!(e["structuredContent"]["code"], "request_expired");
        let text = e["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("EXPIRED") && text.contains("nobody declined"));
        let n = not_obtained(&shown(), "abcd2345", "accepted in the client").render(false);
        assert_eq!(n["structuredContent"]["code"], "approval_not_obtained");
        assert_eq!(
            n["structuredContent"]["recovery"]["approve"],
            "tcctl approve abcd2345"
        );
        let p = page_not_obtained(
            &shown(),
            "abcd2345",
            "http://127.0.0.1:7777/requests/abcd2345",
            "dismissed",
            "personal",
        )
        .render(false);
        assert_eq!(p["structuredContent"]["code"], "approval_not_obtained");
        let text = p["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("    http://127.0.0.1:7777/requests/abcd2345\n")
                && text.contains("    tcctl approve abcd2345\n"),
            "{text}"
        );
        let m = guarded_message("t\u{202e}", "v", "t {..}", None, "abcd2345");
        assert!(m.contains("tcctl approve abcd2345") && m.contains("cannot approve"));
        assert!(!m.contains('\u{202e}'));
    }
}
