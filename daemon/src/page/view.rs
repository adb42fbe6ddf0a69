//! What the page shows of a raised request, as JSON: every text escaped exactly as tcctl
//! escapes it for the terminal (the page then inserts it as text, never as HTML).

use serde::Serialize;
use tc_core::display::{escape, pretty_args};

use crate::raised::Pending;

#[derive(Debug, Serialize)]
pub struct RequestView {
    pub id: String,
    pub status: &'static str,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub raised_at_ms: i64,
    pub expires_at_ms: i64,
    pub raised_by_uid: Option<u32>,
    /// Pretty-printed JSON, escaped line by line.
    pub args: String,
    pub covers: String,
    pub state_fp: String,
    pub reason: String,
    /// A unified diff when the gate declares a preview (escaped line by line); "" when none.
    pub preview: String,
    /// What "Approve, and allow similar…" offers (a waiting request whose arguments were
    /// sent in full; filled in by the snapshot).
    pub grant: Option<Vec<super::grants::GrantArg>>,
}

/// Escapes each line of `s` (newlines stay newlines).
fn lines(s: &str) -> String {
    s.lines().map(|l| escape(l)).collect::<Vec<_>>().join("\n")
}

impl RequestView {
    /// What the page shows of `p`, every text escaped as for the terminal.
    pub fn new(p: &Pending) -> Self {
        let b = &p.binding;
        RequestView {
            id: escape(&p.request_id).into_owned(),
            status: p.status,
            vault: escape(&b.vault).into_owned(),
            tool: escape(&b.tool).into_owned(),
            caller: escape(&b.caller).into_owned(),
            raised_at_ms: p.raised_at_ms,
            expires_at_ms: p.expires_at_ms,
            raised_by_uid: p.raised_by_uid,
            args: pretty_args(&p.args_json, &p.summary),
            covers: if p.covers.is_empty() {
                "(not given)".into()
            } else {
                lines(&p.covers)
            },
            state_fp: escape(&p.state_fp).into_owned(),
            reason: escape(&p.reason).into_owned(),
            preview: lines(&p.preview),
            grant: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Binding;

    #[test]
    fn every_text_is_escaped_as_for_the_terminal() {
        let p = Pending {
            binding: Binding {
                vault: "v".into(),
                tool: "write\u{1b}[2J".into(),
                caller: "stdio".into(),
                args_hash: "0".repeat(64),
            },
            state_fp: "f".repeat(64),
            summary: "s".into(),
            raised_at_ms: 1,
            expires_at_ms: 2,
            minted: false,
            request_id: "abcdefgh".into(),
            status: "pending",
            args_json: r#"{"path":"a\u202eb"}"#.into(),
            covers: "path /x".into(),
            raised_by_uid: Some(1000),
            reason: String::new(),
            preview: "+new\u{7}\n-old".into(),
        };
        let v = RequestView::new(&p);
        assert_eq!(v.tool, "write⟨U+001B⟩[2J");
        assert!(v.args.contains("a⟨U+202E⟩b"), "{}", v.args);
        assert_eq!(v.preview, "+new⟨U+0007⟩\n-old");
    }
}
