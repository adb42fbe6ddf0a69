//! What the governor answers: a page's result with its paging `_meta`, and its refusals
//! (an answer over the cap, a paged tool's question, a bad cursor, a resource too large).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tc_core::ErrorCode;

use crate::engine::refusal::Refusal;
use crate::wire::jsonrpc;

use super::*;

/// Everything a page's result reports about paging.
#[derive(Debug, Clone)]
pub struct Page<'a> {
    pub tool: &'a str,
    pub items_arg: &'a str,
    pub from: usize,
    pub next: usize,
    pub total: usize,
    pub served: usize,
    pub skipped: &'a [(usize, Value)],
    pub next_cursor: Option<&'a str>,
    pub budget: usize,
}

impl<'a> Page<'a> {
    /// The paging report of `plan`, a page of a request of `total` items.
    pub fn of(
        tool: &'a str,
        items_arg: &'a str,
        from: usize,
        total: usize,
        plan: &'a Plan,
        next_cursor: Option<&'a str>,
        budget: usize,
    ) -> Page<'a> {
        Page {
            tool,
            items_arg,
            from,
            next: plan.next,
            total,
            served: plan.selected.len(),
            skipped: &plan.skipped,
            next_cursor,
            budget,
        }
    }

    fn meta(&self) -> Value {
        json!({
            "next_cursor": self.next_cursor,
            "items": self.items_arg,
            "from": self.from,
            "next": self.next,
            "total": self.total,
            "served": self.served,
            "skipped": self.skipped.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
            "budget": self.budget,
        })
    }

    fn text(&self) -> String {
        let mut t = format!(
            "[tc governor] `{}` is paged to stay under {} bytes: this page served {} of the {} `{}` (positions {}..{}).",
            self.tool, self.budget, self.served, self.total, self.items_arg, self.from, self.next
        );
        if !self.skipped.is_empty() {
            t.push_str("\nSkipped:");
            for (_, e) in self.skipped {
                t.push('\n');
                t.push_str(&skip_line(e));
            }
        }
        match self.next_cursor {
            Some(c) => t.push_str(&format!(
                "\nnext_cursor: {c}\nMore remain: call `{}` again with exactly the same arguments plus \"cursor\": \"{c}\", and repeat until next_cursor is null.",
                self.tool
            )),
            None => t.push_str("\nnext_cursor: null (this was the last page)."),
        }
        t
    }
}

fn merge_meta(result: &mut Value, key: &str, v: Value) {
    let Some(o) = result.as_object_mut() else {
        return;
    };
    let meta = o.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta[key] = v;
}

/// Adds paging to the downstream's result for a page: `_meta["tc/paging"]` always; a
/// text block when there is more to fetch or something was skipped; and, for a tool
/// without an `outputSchema`, `structuredContent.next_cursor`.
pub fn decorate(result: &mut Value, p: &Page<'_>, schema: bool) {
    merge_meta(result, PAGING_META, p.meta());
    if !schema {
        if let Some(o) = result.as_object_mut() {
            let sc = o.entry("structuredContent").or_insert_with(|| json!({}));
            if let Some(sc) = sc.as_object_mut() {
                sc.insert("next_cursor".into(), json!(p.next_cursor));
            }
        }
    }
    if p.next_cursor.is_some() || !p.skipped.is_empty() {
        if let Some(c) = result.get_mut("content").and_then(Value::as_array_mut) {
            c.push(json!({"type": "text", "text": p.text()}));
        }
    }
}

/// A page on which nothing could be served (every item it reached was skipped): an
/// `isError` result, with `next_cursor` when items remain.
pub fn empty_page(p: &Page<'_>, schema: bool) -> Value {
    let codes: Vec<&str> = p
        .skipped
        .iter()
        .filter_map(|(_, e)| e["code"].as_str())
        .collect();
    let code = if codes.contains(&"too_large") {
        ErrorCode::TooLarge
    } else if codes.contains(&"acl_denied") {
        ErrorCode::AclDenied
    } else {
        ErrorCode::InvalidInput
    };
    let mut r = Refusal::new(code, p.text(), p.meta()).render(schema);
    merge_meta(&mut r, PAGING_META, p.meta());
    r
}

/// The refusal of a `tools/call` result over the cap.
pub fn overflow_result(tool: &str, bytes: u64, limit: usize) -> Refusal {
    Refusal::new(
        ErrorCode::Overflow,
        format!(
            "Refused: the result of `{tool}` is {bytes} bytes, over the governor limit of {limit} bytes \
             (governor.max_response_bytes), so it was not passed on. Ask for less (a smaller range, fewer \
             items, a narrower query) instead of repeating the same call."
        ),
        json!({"tool": tool, "bytes": bytes, "limit": limit}))
}

/// The refusal of a paged call whose downstream asked a question of its own
/// (`input_required`): a page's round cannot be carried back through the paged call.
pub fn paged_question_refusal(tool: &str) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidInput,
        format!(
            "Refused: `{tool}` asked a question of its own (input_required) while tc was serving it \
             page by page, and a paged call cannot carry the server's question back. Nothing was run. \
             Tell the human: `{tool}` should not be listed under [[vaults.paged]] for this server."
        ),
        json!({"tool": tool, "reason": "paged_input_required"}))
}

/// The refusal of a cursor the daemon would not open (`reason`: expired, invalid,
/// foreign or request_mismatch).
pub fn cursor_refusal(tool: &str, reason: &str, why: &str) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidInput,
        format!(
            "Refused: the cursor given to `{tool}` is not valid for this call ({reason}: {why}). Nothing was \
             read. Send the call again without `cursor` to start from the first page."
        ),
        json!({"tool": tool, "argument": "cursor", "reason": reason}))
}

/// The refusal of a `resources/read` over the cap: a plain JSON-RPC error.
pub fn resource_refusal(id: &Value, uri: &str, bytes: u64, limit: usize, by_stat: bool) -> Value {
    let mut e = jsonrpc::error(
        id,
        INVALID_PARAMS,
        format!(
            "invalid_input: resource {uri} is {bytes} bytes, over the governor limit of {limit} bytes \
             (governor.max_response_bytes){}",
            if by_stat { "; it was not read" } else { "" }
        ),
    );
    e["error"]["data"] = json!({
        "code": ErrorCode::InvalidInput.as_str(),
        "reason": "too_large",
        "uri": uri,
        "bytes": bytes,
        "limit": limit,
        "checked": if by_stat { "stat" } else { "response" },
    });
    e
}

/// JSON-RPC "invalid params", the code of a refused `resources/read`.
pub const INVALID_PARAMS: i64 = -32602;

/// The local path of a `file://` URI (percent-decoded), if it is one.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    // `file:///p` or `file://localhost/p`; other hosts are not local files.
    let path = if rest.starts_with('/') {
        rest
    } else {
        rest.strip_prefix("localhost")?
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(out)))
}

/// Size of a regular file, if `p` is one.
pub fn file_size(p: &Path) -> Option<u64> {
    std::fs::metadata(p)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}
