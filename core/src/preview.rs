//! A gate's preview as stored and shown: its limits, and its lines classified and escaped
//! for a person (the text is kept raw; it is escaped line by line only when shown).

use std::borrow::Cow;

use crate::display::escape;

/// The largest file, and the largest new content, the shim diffs (bytes).
pub const INPUT_MAX: u64 = 256 * 1024;
/// The longest preview kept: the shim says "too large" above it, tcd cuts a longer one.
pub const TEXT_MAX: usize = 64 * 1024;

/// What a preview line is, for colouring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// A sentence about the preview ("new file, 3 lines", "binary file: …").
    Note,
    /// `--- a` / `+++ b`
    Header,
    /// `@@ -1,3 +1,4 @@`
    Hunk,
    Removed,
    Added,
    Context,
}

/// The preview's lines (split on `\n` only, so a `\r` is shown), each classified and
/// escaped. A line is a header only before the first hunk: a removed line reading
/// `-- x` is not taken for one.
pub fn lines(preview: &str) -> Vec<(LineKind, Cow<'_, str>)> {
    let body = preview.strip_suffix('\n').unwrap_or(preview);
    if body.is_empty() {
        return Vec::new();
    }
    let mut in_hunk = false;
    body.split('\n')
        .map(|l| {
            let kind = if l.starts_with("@@") {
                in_hunk = true;
                LineKind::Hunk
            } else if !in_hunk {
                if l.starts_with("--- ") || l.starts_with("+++ ") {
                    LineKind::Header
                } else {
                    LineKind::Note
                }
            } else {
                match l.as_bytes().first() {
                    Some(b'+') => LineKind::Added,
                    Some(b'-') => LineKind::Removed,
                    Some(b' ') => LineKind::Context,
                    _ => LineKind::Note,
                }
            };
            (kind, escape(l))
        })
        .collect()
}

/// Cuts a preview to [`TEXT_MAX`] bytes (at a character boundary), visibly.
pub fn capped(s: &str) -> Cow<'_, str> {
    if s.len() <= TEXT_MAX {
        return Cow::Borrowed(s);
    }
    let mut end = TEXT_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}\n… (preview cut: {} bytes in all)",
        &s[..end],
        s.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use LineKind::*;

    #[test]
    fn lines_are_classified_by_position_and_escaped() {
        let p = "new file, 2 lines\n--- /dev/null\n+++ a.md\n@@ -0,0 +1,2 @@\n+-- x\n+\u{1b}[31mred\r\n";
        let got: Vec<_> = lines(p)
            .into_iter()
            .map(|(k, l)| (k, l.into_owned()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Note, "new file, 2 lines".into()),
                (Header, "--- /dev/null".into()),
                (Header, "+++ a.md".into()),
                (Hunk, "@@ -0,0 +1,2 @@".into()),
                (Added, "+-- x".into()),
                (Added, "+⟨U+001B⟩[31mred⟨U+000D⟩".into()),
            ]
        );
        let got: Vec<_> = lines("@@ -1 +1 @@\n--- a\n+++ b\n ctx\n\\ No newline at end of file\n")
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(got, vec![Hunk, Removed, Added, Context, Note]);
        assert!(lines("").is_empty());
    }

    #[test]
    fn capped_cuts_at_a_character_boundary_and_says_so() {
        assert_eq!(capped("short"), "short");
        let long = "é".repeat(TEXT_MAX);
        let c = capped(&long);
        assert!(c.len() < TEXT_MAX + 100, "{}", c.len());
        assert!(c.ends_with(&format!("(preview cut: {} bytes in all)", long.len())));
    }
}
