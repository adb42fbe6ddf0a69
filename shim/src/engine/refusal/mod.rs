//! What the agent is told when tc refuses or holds a call: the `isError` tool results
//! with `structuredContent {code, details, recovery}`, built here and nowhere else.

pub mod by_request;
pub mod judged;

use serde_json::{json, Value};
use tc_core::ErrorCode;

/// A refusal or a hold, as the agent is told it: a code it can branch on, a text it
/// reads, the details that bind it, and what to do next. Rendered into the MCP result
/// by [`Refusal::render`] and nowhere else.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub code: ErrorCode,
    pub text: String,
    pub details: Value,
    pub recovery: Option<Value>,
}

impl Refusal {
    pub fn new(code: ErrorCode, text: impl Into<String>, details: Value) -> Refusal {
        Refusal {
            code,
            text: text.into(),
            details,
            recovery: None,
        }
    }

    /// The same refusal with what the agent (or the human) can do next.
    pub fn recovery(mut self, r: Value) -> Refusal {
        self.recovery = Some(r);
        self
    }

    /// The `isError` tool result: the text first, then `{code, message, details,
    /// recovery}` as `structuredContent`, or, for a tool that declares an `outputSchema`
    /// (`schema`), under `_meta["tc/refusal"]`: `structuredContent` must conform to that
    /// schema, and the TypeScript SDK client validates it even on `isError` results.
    pub fn render(self, schema: bool) -> Value {
        let mut sc =
            json!({ "code": self.code.as_str(), "message": self.text, "details": self.details });
        if let Some(r) = self.recovery {
            sc["recovery"] = r;
        }
        let mut result = json!({
            "content": [{ "type": "text", "text": self.text }],
            "isError": true,
        });
        if schema {
            result["_meta"] = json!({ REFUSAL_META: sc });
        } else {
            result["structuredContent"] = sc;
        }
        result
    }
}

/// `_meta` key carrying the refusal object when it cannot be `structuredContent`.
pub const REFUSAL_META: &str = "tc/refusal";

/// For a result already rendered without a schema (a downstream's own answer to a call
/// whose tool declares an `outputSchema`): moves its refusal object to `_meta`, as
/// [`Refusal::render`] would have placed it.
pub fn refusal_to_meta(result: &mut Value) {
    let Some(o) = result.as_object_mut() else {
        return;
    };
    if let Some(sc) = o.remove("structuredContent") {
        o.insert("_meta".into(), json!({ REFUSAL_META: sc }));
    }
}

/// The binding a confirmation is about, as shown to the client.
#[derive(Debug, Clone)]
pub struct Shown<'a> {
    pub vault: &'a str,
    pub tool: &'a str,
    pub caller: &'a str,
    pub args_hash: &'a str,
    pub state_fp: &'a str,
    /// The call came through the lean facade's `call_capability`.
    pub lean: bool,
}

impl Shown<'_> {
    /// The `details` object every confirmation refusal carries.
    pub fn details(&self) -> Value {
        json!({
            "args_hash": self.args_hash, "state_fp": self.state_fp, "tool": self.tool,
            "vault": self.vault, "caller": self.caller,
        })
    }

    /// How the agent re-sends the call with a token.
    fn resend_with_token(&self) -> &'static str {
        if self.lean {
            "send exactly the same `call_capability` call again with \"elicit_token\": \"<token>\" \
             added inside its \"arguments\""
        } else {
            "send exactly the same call again with the extra argument \"elicit_token\": \"<token>\""
        }
    }
}

/// The exact operator command that mints the confirmation.
pub fn elicit_command(s: &Shown<'_>) -> String {
    format!(
        "tcctl elicit --hash {} --tool {} --vault {} --caller {} --state-fp {}",
        s.args_hash, s.tool, s.vault, s.caller, s.state_fp
    )
}

/// The human declined (or accepted without ticking approve): a hard stop.
pub fn approval_declined(s: &Shown<'_>) -> Refusal {
    let text = format!(
        "The human DECLINED the tool call `{}`. Nothing was run. Do not retry it, do not work \
         around it by other means, and do not ask for a confirmation token: tell the human the \
         call was declined and ask what they want instead.",
        s.tool
    );
    Refusal::new(ErrorCode::ApprovalDeclined, text, s.details())
}

/// Nobody approved (the prompt was dismissed, timed out or could not be shown): the
/// human can still approve out of band.
pub fn approval_not_obtained(s: &Shown<'_>, why: &str) -> Refusal {
    let cmd = elicit_command(s);
    let text = format!(
        "Approval for the tool call `{tool}` was not obtained ({why}); nothing was run and nobody \
         declined it. STOP and ask the human: if they want it to run, they approve it out of band by \
         running, in their own terminal:\n\n    {cmd}\n\nThat prints a single-use token. Only after \
         the human gives you the token, {resend}.",
        tool = s.tool,
        resend = s.resend_with_token(),
    );
    let mut d = s.details();
    d["why"] = json!(why);
    Refusal::new(ErrorCode::ApprovalNotObtained, text, d).recovery(json!({ "command": cmd }))
}

/// tcd refused to record the call's confirmation request: this client raised requests
/// (or caused refusals) faster than its per-caller rate limit. Nothing ran, and the agent
/// is told to slow down rather than to ask the human.
pub fn rate_limited(s: &Shown<'_>, why: &str) -> Refusal {
    let text = format!(
        "RATE LIMITED: slow down. This client sent too many calls that need a human's \
         confirmation, or that were refused, in a short time, so the tc daemon did not record \
         this one ({why}). Nothing was run and no confirmation was requested. Wait before \
         sending `{tool}` again, send such calls one at a time, and never retry them in a loop.",
        tool = s.tool,
    );
    let mut d = s.details();
    d["reason"] = json!("rate_limited");
    Refusal::new(ErrorCode::RateLimited, text, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elicit_required_shape() {
        let s = Shown {
            vault: "v",
            tool: "t",
            caller: "stdio",
            args_hash: "a",
            state_fp: "f",
            lean: false,
        };
        // The route-1 refusal itself is `by_request::approve_required`.
        let r = crate::engine::refusal::by_request::approve_required(&s, "abcd2345", "personal")
            .render(false);
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["code"], "elicit_required");
        assert_eq!(r["structuredContent"]["details"]["state_fp"], "f");
        let cmd = r["structuredContent"]["recovery"]["command"]
            .as_str()
            .unwrap();
        assert_eq!(
            cmd,
            "tcctl elicit --hash a --tool t --vault v --caller stdio --state-fp f"
        );
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("STOP: ask the human") && text.contains(cmd));
        let mut m = r.clone();
        refusal_to_meta(&mut m);
        assert!(m.get("structuredContent").is_none());
        assert_eq!(m["_meta"][REFUSAL_META], r["structuredContent"]);
        assert_eq!(m["isError"], true);

        let d = approval_declined(&s).render(false);
        assert_eq!(d["structuredContent"]["code"], "approval_declined");
        assert!(d["structuredContent"].get("recovery").is_none());
        let n = approval_not_obtained(&s, "the prompt was dismissed").render(false);
        assert_eq!(n["structuredContent"]["code"], "approval_not_obtained");
        assert_eq!(n["structuredContent"]["recovery"]["command"], cmd);
        assert!(n["content"][0]["text"].as_str().unwrap().contains(cmd));
        let r = rate_limited(&s, "retry in 2 s").render(false);
        assert_eq!(r["structuredContent"]["code"], "rate_limited");
        assert_eq!(r["structuredContent"]["details"]["reason"], "rate_limited");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("slow down") && text.contains("Nothing was run"));
        assert!(text.contains("retry in 2 s") && !text.contains("tcctl"));
        let lean = Shown { lean: true, ..s };
        let text = approval_not_obtained(&lean, "x").render(false)["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(text.contains("call_capability") && text.contains("inside its \"arguments\""));
        let text =
            crate::engine::refusal::by_request::approve_required(&lean, "abcd2345", "personal")
                .render(false)["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string();
        assert!(text.contains("same `call_capability` call again"), "{text}");
    }
}
