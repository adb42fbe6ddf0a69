//! Text from the model or a server, made safe to show a person: every character a
//! terminal, a log viewer or a dialog would act on or hide is replaced by a visible marker.
//!
//! The one scheme is `⟨U+XXXX⟩`. Its introducer `⟨` is itself always escaped
//! (`⟨U+27E8⟩`), so every `⟨` in escaped text starts a marker and text cannot forge one.
//! Escaped: controls (C0, DEL, C1: ANSI and other escape sequences start with one), format
//! characters (bidi overrides, isolates and marks, zero-width characters, tags, the soft
//! hyphen…), line and paragraph separators, every space but U+0020, private-use,
//! surrogate and unassigned code points (noncharacters among them), and the other
//! default-ignorable code points (variation selectors, Hangul fillers, the combining
//! grapheme joiner, Khmer inherent vowels, Mongolian free variation selectors). A run of
//! [`SPACE_RUN`] spaces or more is one marker with its count (`⟨U+0020×10000⟩`), so
//! blanks cannot push the rest of a value out of view, and combining marks past
//! [`MARKS_MAX`] in a row are markers, so a stack of them cannot draw over other lines.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;

use unicode_general_category::{get_general_category, GeneralCategory as G};

/// The marker's introducer; a literal one in the input is escaped so none can be forged.
pub const OPEN: char = '⟨';

/// Whether `c` is shown as a marker rather than as itself.
pub fn needs_escape(c: char) -> bool {
    if c == OPEN {
        return true;
    }
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    matches!(
        get_general_category(c),
        G::Control
            | G::Format
            | G::LineSeparator
            | G::ParagraphSeparator
            | G::SpaceSeparator
            | G::PrivateUse
            | G::Surrogate
            | G::Unassigned
    ) || default_ignorable(c)
}

/// Default-ignorable code points (Unicode `Default_Ignorable_Code_Point`) that are not
/// already `Cf`/`Cn`: they render as nothing, so text could hide behind them.
fn default_ignorable(c: char) -> bool {
    matches!(
        c as u32,
        0x034F                  // combining grapheme joiner
        | 0x115F..=0x1160       // Hangul choseong/jungseong fillers
        | 0x17B4..=0x17B5       // Khmer inherent vowels
        | 0x180B..=0x180F       // Mongolian free variation selectors, vowel separator
        | 0x3164                // Hangul filler
        | 0xFE00..=0xFE0F       // variation selectors
        | 0xFFA0                // halfwidth Hangul filler
        | 0x1D173..=0x1D17A     // musical symbol format controls
        | 0xE0000..=0xE0FFF // tags, variation selectors supplement
    )
}

/// A run of at least this many U+0020 is shown as one marker with its length
/// (`⟨U+0020×10000⟩`): blank enough to push what follows it out of view (a wrapped
/// terminal line, a dialog, a log viewer). Shorter runs (indentation) stay spaces.
pub const SPACE_RUN: usize = 32;

/// At most this many combining marks in a row are shown as themselves; the rest are
/// markers, so stacked marks cannot draw over the lines around them.
pub const MARKS_MAX: usize = 4;

/// A combining mark that takes no column of its own (`Mn`, `Me`).
fn is_stacking(c: char) -> bool {
    !c.is_ascii()
        && matches!(
            get_general_category(c),
            G::NonspacingMark | G::EnclosingMark
        )
}

/// Appends `s` to `out` with every [`needs_escape`] character as its marker, every run of
/// [`SPACE_RUN`] spaces or more as one counted marker, and every combining mark past
/// [`MARKS_MAX`] in a row as a marker.
pub fn escape_into(out: &mut String, s: &str) {
    let spaces_to = |out: &mut String, n: usize| {
        if n >= SPACE_RUN {
            let _ = write!(out, "⟨U+0020×{n}⟩");
        } else {
            out.extend(std::iter::repeat_n(' ', n));
        }
    };
    let (mut spaces, mut marks) = (0usize, 0usize);
    for c in s.chars() {
        if c == ' ' {
            spaces += 1;
            marks = 0;
            continue;
        }
        spaces_to(out, spaces);
        spaces = 0;
        marks = if is_stacking(c) { marks + 1 } else { 0 };
        if needs_escape(c) || marks > MARKS_MAX {
            let _ = write!(out, "⟨U+{:04X}⟩", c as u32);
        } else {
            out.push(c);
        }
    }
    spaces_to(out, spaces);
}

/// Whether [`escape_into`] would change `s`.
fn needs_escaping(s: &str) -> bool {
    let (mut spaces, mut marks) = (0usize, 0usize);
    for c in s.chars() {
        spaces = if c == ' ' { spaces + 1 } else { 0 };
        marks = if is_stacking(c) { marks + 1 } else { 0 };
        if spaces >= SPACE_RUN || marks > MARKS_MAX || needs_escape(c) {
            return true;
        }
    }
    false
}

/// A call's arguments as shown to the human approving it (tcctl, the page): the JSON
/// pretty-printed, each line escaped; the raw text when it is not JSON (cut), the
/// summary when the shim sent none.
pub fn pretty_args(args_json: &str, summary: &str) -> String {
    let text = if args_json.is_empty() {
        // Only a summary: the raiser's words, not checked against the hash (the
        // arguments were too large to send, or whatever raised this did not send them).
        format!(
            "(the arguments were not sent; the approval binds their hash. The raiser's \
             unverified summary: {summary})"
        )
    } else {
        match serde_json::from_str::<serde_json::Value>(args_json) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| args_json.to_string()),
            Err(_) => args_json.to_string(),
        }
    };
    text.lines()
        .map(|l| escape(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `s` safe to show a person (borrowed when nothing needed escaping).
pub fn escape(s: &str) -> Cow<'_, str> {
    if !needs_escaping(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    escape_into(&mut out, s);
    Cow::Owned(out)
}

/// Text that was escaped upstream (a summary the shim built, stored by tcd) made safe
/// again without escaping its markers twice: a well-formed marker is kept, everything
/// else is escaped as by [`escape`]. Idempotent; for text that only the shim produces, so
/// a marker kept here was written by the shim's own [`escape`] (or is harmless text).
pub fn reescape(s: &str) -> Cow<'_, str> {
    if !needs_escaping(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut rest = s;
    while let Some(i) = rest.find(OPEN) {
        escape_into(&mut out, &rest[..i]);
        let m = marker_len(&rest[i..]);
        if m > 0 {
            out.push_str(&rest[i..i + m]);
            rest = &rest[i + m..];
        } else {
            escape_into(&mut out, &rest[i..i + OPEN.len_utf8()]);
            rest = &rest[i + OPEN.len_utf8()..];
        }
    }
    escape_into(&mut out, rest);
    Cow::Owned(out)
}

/// The byte length of the `⟨U+XXXX⟩` marker `s` starts with (4 to 6 hex digits), or of
/// a space run's `⟨U+0020×N⟩`, or 0.
fn marker_len(s: &str) -> usize {
    let Some(body) = s.strip_prefix("⟨U+") else {
        return 0;
    };
    let hex = body.bytes().take_while(u8::is_ascii_hexdigit).count();
    if !(4..=6).contains(&hex) {
        return 0;
    }
    let mut len = "⟨U+".len() + hex;
    if let Some(count) = body[hex..].strip_prefix('×') {
        let digits = count.bytes().take_while(u8::is_ascii_digit).count();
        if &body[..hex] != "0020" || !(1..=20).contains(&digits) {
            return 0;
        }
        len += '×'.len_utf8() + digits;
    }
    if s[len..].starts_with('⟩') {
        len + '⟩'.len_utf8()
    } else {
        0
    }
}

/// Serialized JSON made safe for a terminal without changing what it means: every
/// [`needs_escape`] character (which JSON only allows inside strings) becomes a JSON
/// `\uXXXX` escape, so a script reads the same value and a person sees no raw control.
pub fn json_safe(json: &str) -> Cow<'_, str> {
    if !json.chars().any(needs_escape) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if needs_escape(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{u:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// At most `max` characters of escaped text `s`: itself if it fits, else its start, `…`,
/// its end and its full length, never cutting a marker in half. The note is always
/// there when anything was left out.
pub fn clip(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let note = format!(" ({n} characters in all)");
    let tail = max / 4;
    let head = max.saturating_sub(tail + 1 + note.chars().count());
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!(
        "{}…{}{note}",
        whole_markers_start(&start),
        whole_markers_end(&end)
    )
}

/// `s` without a trailing marker that was cut before its `⟩`.
fn whole_markers_start(s: &str) -> &str {
    match s.rfind(OPEN) {
        Some(i) if !s[i..].contains('⟩') => &s[..i],
        _ => s,
    }
}

/// `s` without a leading marker whose `⟨` was cut off.
fn whole_markers_end(s: &str) -> &str {
    match (s.find('⟩'), s.find(OPEN)) {
        (Some(close), open) if open.is_none_or(|o| o > close) => &s[close + '⟩'.len_utf8()..],
        _ => s,
    }
}

/// A log sink that escapes what each record carries, so model or server input in a log
/// line cannot move the cursor, forge a line or reorder text on a terminal or in the
/// journal. Each `write` is one formatted record (as `tracing_subscriber::fmt` writes):
/// its one trailing newline is kept.
pub struct LogWriter<W: io::Write>(pub W);

impl<W: io::Write> io::Write for LogWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (body, nl) = match text.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (&*text, ""),
        };
        let mut out = escape(body).into_owned();
        out.push_str(nl);
        self.0.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A log sink on stderr for `tracing_subscriber::fmt().with_writer(…)`.
pub fn stderr_log() -> LogWriter<io::Stderr> {
    LogWriter(io::stderr())
}

#[cfg(test)]
mod tests;
