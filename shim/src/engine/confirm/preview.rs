//! A gate's `preview`: the unified diff of the file a write names, as it is against what
//! the write would make it. Computed here because tcd (guarded mode) cannot read the vault.
//!
//! The path is resolved and ACL-judged by the policy's own resolver (a link is judged
//! where it leads), and the file opened is judged again by where its descriptor points,
//! so a link swapped in between cannot show a file the ACL denies or one outside the root.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use similar::{Algorithm, TextDiff};
use tc_core::config::{DiffPreview, Gate, Preview};
use tc_core::preview::{INPUT_MAX, TEXT_MAX};

use crate::engine::judge::policy::Policy;
use crate::vault::regular;

/// Longest the diff algorithm runs before it settles for a coarser (still correct) diff.
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

/// The gate's preview of this call ("" when the gate declares none). Every case that
/// shows no diff says why, in one line.
pub fn preview(policy: &Policy, gate: &Gate, args: &Value) -> String {
    match &gate.preview {
        None => String::new(),
        Some(Preview::Diff(d)) => diff(policy, d, args),
    }
}

fn diff(policy: &Policy, d: &DiffPreview, args: &Value) -> String {
    let arg = |name: &str| args.get(name).and_then(Value::as_str);
    let (Some(raw), Some(content)) = (arg(&d.path), arg(&d.content)) else {
        let missing = if arg(&d.path).is_none() {
            &d.path
        } else {
            &d.content
        };
        return format!("no preview: argument {missing:?} is missing or not a string");
    };
    // The same judgement the call itself gets: an escape is refused, the ACL (as for a
    // write) applies to the path as written and where it leads.
    let p = match policy.resolve(&d.path, raw) {
        Ok(p) => p,
        Err(e) => return format!("no preview: {e}"),
    };
    if let Err(e) = policy.check_acl(std::slice::from_ref(&p), false) {
        return format!("no preview: {e}");
    }
    let rel = shown(policy.relative(&p));
    let now = match read_current(policy, &d.path, &p) {
        Ok(now) => now,
        Err(why) => return why.to_string(),
    };
    let mut out = String::new();
    if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
        let to = shown(&policy.real_relative(&p));
        out.push_str(&format!("{rel} is a symlink: the write changes {to}\n"));
    }
    out.push_str(&render(&rel, now.as_deref(), content));
    if out.len() > TEXT_MAX {
        return format!("too large to preview: the diff is {} bytes", out.len());
    }
    out
}

/// Why a file's current bytes are not shown: the line the human reads instead.
#[derive(Debug, thiserror::Error)]
enum NoPreview {
    #[error("no preview: {0} is not a regular file")]
    NotRegular(String),
    #[error("no preview: {rel} cannot be read ({kind})")]
    Unreadable {
        rel: String,
        kind: std::io::ErrorKind,
    },
    /// A link swapped in, or the file moved, between judging and reading.
    #[error("no preview: {0} changed while it was read")]
    Changed(String),
    #[error("too large to preview: the file is {0} bytes")]
    TooLarge(u64),
    #[error("too large to preview: the file is over {INPUT_MAX} bytes")]
    Grew,
}

/// The file's bytes now (None: it does not exist), or why they are not shown.
fn read_current(policy: &Policy, name: &str, p: &Path) -> Result<Option<Vec<u8>>, NoPreview> {
    let rel = shown(policy.relative(p));
    let (f, meta) = match regular::open(p, false) {
        Ok(Some(open)) => open,
        Ok(None) => return Err(NoPreview::NotRegular(rel)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(NoPreview::Unreadable {
                rel,
                kind: e.kind(),
            })
        }
    };
    // Judge the file actually opened: a link swapped in after `resolve` must not show
    // what the ACL denies or what lies outside the root.
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .ok()
        .and_then(|real| real.to_str().map(String::from));
    let judged = opened.and_then(|real| policy.resolve(name, &real).ok());
    match judged {
        Some(real) if policy.check_acl(std::slice::from_ref(&real), false).is_ok() => {}
        _ => return Err(NoPreview::Changed(rel)),
    }
    if meta.len() > INPUT_MAX {
        return Err(NoPreview::TooLarge(meta.len()));
    }
    let mut bytes = Vec::new();
    if let Err(e) = f.take(INPUT_MAX + 1).read_to_end(&mut bytes) {
        return Err(NoPreview::Unreadable {
            rel,
            kind: e.kind(),
        });
    }
    if bytes.len() as u64 > INPUT_MAX {
        return Err(NoPreview::Grew);
    }
    Ok(Some(bytes))
}

/// The preview of writing `content` over `now` (None: a new file) at `rel`.
fn render(rel: &str, now: Option<&[u8]>, content: &str) -> String {
    if content.len() as u64 > INPUT_MAX {
        return format!(
            "too large to preview: the new content is {} bytes",
            content.len()
        );
    }
    let old = now.map(|b| std::str::from_utf8(b).ok().filter(|s| !s.contains('\0')));
    if content.contains('\0') || old == Some(None) {
        let was = now.map_or("a new file".to_string(), |b| format!("{} bytes", b.len()));
        return format!(
            "binary file, not shown: {rel} (now: {was}; after the write: {} bytes)",
            content.len()
        );
    }
    let lines = content.lines().count();
    if now.is_none() && content.is_empty() {
        return format!("new file, empty: {rel}");
    }
    let (head, from, old) = match old.flatten() {
        None => (
            format!("new file, {lines} lines\n"),
            "/dev/null".to_string(),
            "",
        ),
        Some(old) if old == content => {
            return format!("no change: the write leaves {rel} as it is ({lines} lines)")
        }
        Some(old) => (String::new(), rel.to_string(), old),
    };
    let d = TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, content);
    let body = d
        .unified_diff()
        .context_radius(3)
        .header(&from, &format!("{rel} (after the write)"))
        .to_string();
    format!("{head}{body}")
}

/// A path for a diff header: quoted with escapes when it holds a control character, so
/// a name with a newline cannot add lines to the preview.
fn shown(p: &Path) -> String {
    let s = p.to_string_lossy();
    if s.chars().any(char::is_control) {
        format!("{s:?}")
    } else {
        s.into_owned()
    }
}

#[cfg(test)]
mod tests;
