//! Newline-delimited JSON-RPC framing: reads one line at a time with a hard size cap
//! (or, downstream, scans an over-long line without holding it) and writes lines.
//!
//! A line is split at `\n` only, and what is forwarded must be split there by every
//! reader (Python's universal newlines and `str.splitlines`, Java `readLine`, Go
//! `bufio.Scanner`, Node `readline`): a raw `\r` inside a line is refused on read (JSON
//! never needs one), and the writer escapes U+0085, U+2028 and U+2029 (which can only
//! sit inside JSON strings) as `\uXXXX`. Other break characters (`\x0b`, `\x0c`,
//! `\x1c`-`\x1e`) are invalid JSON anywhere raw, so no parsed line holds them.

use std::borrow::Cow;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::wire::jsonrpc::{INVALID_REQUEST, PARSE_ERROR};
use crate::wire::scan::{Scanner, Top};

/// Lines longer than this are refused (the rest of the line is discarded).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// One read from a stream.
#[derive(Debug)]
pub enum Frame {
    /// A complete line without its trailing `\n` (and `\r`).
    Line(Vec<u8>),
    /// A line over the cap; it was skipped up to its newline.
    TooLong(usize),
    /// A line holding a raw `\r` other than one just before its `\n` (without that one):
    /// a downstream could split it there, so it is never forwarded nor acted on.
    InnerCr(Vec<u8>),
    /// End of stream.
    Eof,
}

/// Takes the one `\r` allowed before the `\n`; true when another raw `\r` is left.
fn strip_cr(line: &mut Vec<u8>) -> bool {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    memchr::memchr(b'\r', line).is_some()
}

/// Reads the next non-empty line, never buffering more than `max` bytes of it.
pub async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Frame> {
    loop {
        let mut line = Vec::new();
        let mut skipped = 0usize;
        let mut too_long = false;
        loop {
            let buf = r.fill_buf().await?;
            if buf.is_empty() {
                if too_long {
                    return Ok(Frame::TooLong(skipped));
                }
                if line.is_empty() {
                    return Ok(Frame::Eof);
                }
                break;
            }
            let (chunk, done) = match memchr_nl(buf) {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !too_long && line.len() + chunk.len() > max {
                too_long = true;
                skipped = line.len();
                line = Vec::new();
            }
            if too_long {
                skipped += chunk.len();
            } else {
                line.extend_from_slice(chunk);
            }
            let consumed = done.unwrap_or(buf.len());
            r.consume(consumed);
            if done.is_some() {
                break;
            }
        }
        if too_long {
            return Ok(Frame::TooLong(skipped));
        }
        if strip_cr(&mut line) {
            return Ok(Frame::InnerCr(line));
        }
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        return Ok(Frame::Line(line));
    }
}

/// Why a client line is not a JSON-RPC message; each answers with its JSON-RPC code.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    /// Not JSON: bad syntax, invalid UTF-8, or nested deeper than serde_json's limit.
    #[error("parse error: {0}")]
    Parse(serde_json::Error),
    /// JSON, but an object in it names a member twice (see `unique.rs`).
    #[error("invalid message: {0}")]
    Duplicate(crate::wire::unique::Error),
    /// JSON, but not an object (a batch array, a scalar).
    #[error("expected a JSON-RPC message object")]
    NotAnObject,
    /// Over the line cap ([`Frame::TooLong`]); it was skipped, never parsed.
    #[error("message of {0} bytes exceeds the {max}-byte limit", max = MAX_LINE)]
    TooLong(usize),
    /// A raw `\r` inside the line ([`Frame::InnerCr`]); never forwarded nor acted on.
    #[error(
        "raw carriage returns (\\r) are not allowed inside a message: a server could split \
         the line there; write \\r inside a JSON string as its escape"
    )]
    InnerCr,
}

impl Rejected {
    /// The JSON-RPC error code the client is answered with (id null).
    pub fn code(&self) -> i64 {
        match self {
            Rejected::Parse(_) => PARSE_ERROR,
            Rejected::NotAnObject
            | Rejected::Duplicate(_)
            | Rejected::TooLong(_)
            | Rejected::InnerCr => INVALID_REQUEST,
        }
    }
}

/// The id to answer a refused line with: the id of the request it holds, if it parses
/// as one with an id a request may carry; else null (a notification, a response, or
/// not JSON: its id, if any, is not the client's to be answered under).
pub fn refusal_id(line: &[u8]) -> Value {
    let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(line) else {
        return Value::Null;
    };
    match (m.get("method"), m.get("id")) {
        (Some(Value::String(_)), Some(id)) if crate::wire::ids::check_request_id(id).is_ok() => {
            id.clone()
        }
        _ => Value::Null,
    }
}

/// Parses one client line (a [`Frame::Line`]) into a message object; an object naming a
/// member twice is refused, never judged on one value and forwarded with both.
pub fn parse_message(line: &[u8]) -> Result<Value, Rejected> {
    let v = crate::wire::unique::from_slice(line).map_err(|e| match e {
        crate::wire::unique::Error::Syntax(e) => Rejected::Parse(e),
        dup => Rejected::Duplicate(dup),
    })?;
    if v.is_object() {
        Ok(v)
    } else {
        Err(Rejected::NotAnObject)
    }
}

fn memchr_nl(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf)
}

/// One read from the downstream.
#[derive(Debug)]
pub enum Down {
    /// A complete line without its trailing `\n` (and `\r`).
    Line(Vec<u8>),
    /// A line longer than the limit in force: it was scanned as it streamed by, never
    /// held; `bytes` is its full length.
    Oversize { bytes: u64, top: Top },
    /// A line holding a raw `\r` other than one just before its `\n` (as [`Frame::InnerCr`]):
    /// never passed to the client as its bytes.
    InnerCr(Vec<u8>),
    /// End of stream.
    Eof,
}

/// Reads the next non-empty downstream line. At most `limit()` bytes of a line (plus one
/// read) are buffered; `limit` is asked again for every read of a line that spans reads
/// and whenever a line is about to pass the last answer (what may be buffered depends
/// on the requests waiting for an answer, which change while the line streams in). Past it, the
/// buffered prefix and the rest of the line go through the [`Scanner`] and are dropped,
/// so memory stays at the limit plus the reader's buffer however long the line is.
pub async fn read_down<R: AsyncBufRead + Unpin>(
    r: &mut R,
    limit: &mut impl FnMut() -> usize,
) -> std::io::Result<Down> {
    let mut lim = limit();
    loop {
        let Some(streamed) = stream_line(r, &mut lim, limit).await? else {
            return Ok(Down::Eof);
        };
        // A blank line is skipped.
        if let Some(down) = streamed.finish() {
            return Ok(down);
        }
    }
}

/// Reads one downstream line, up to its `\n` or the end of the stream, into a
/// [`Streamed`]; None when the stream ends before any of it.
async fn stream_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    lim: &mut usize,
    limit: &mut impl FnMut() -> usize,
) -> std::io::Result<Option<Streamed>> {
    let mut s = Streamed::default();
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if s.is_empty() { None } else { Some(s) });
        }
        let (chunk, done) = match memchr_nl(buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        s.take(chunk, lim, limit);
        let consumed = done.unwrap_or(buf.len());
        r.consume(consumed);
        if done.is_some() {
            return Ok(Some(s));
        }
    }
}

/// One downstream line as it streams in: held while within the limit, scanned (and
/// dropped) past it.
#[derive(Default)]
struct Streamed {
    line: Vec<u8>,
    scan: Option<Scanner>,
    /// Every byte of the line so far, held or not.
    bytes: u64,
}

impl Streamed {
    fn is_empty(&self) -> bool {
        self.scan.is_none() && self.line.is_empty()
    }

    /// Takes the next piece of the line (no `\n` in it), asking `limit` again as
    /// [`read_down`] says.
    fn take(&mut self, chunk: &[u8], lim: &mut usize, limit: &mut impl FnMut() -> usize) {
        self.bytes += chunk.len() as u64;
        if self.scan.is_none() && !self.line.is_empty() {
            // A line spanning reads: the limit asked before it started may be stale
            // (the request it answers may have been sent since), so ask again
            // before it grows: at most one read's worth past the fresh answer.
            *lim = limit();
        }
        match self.scan.as_mut() {
            Some(s) => s.feed(chunk),
            None if self.line.len() + chunk.len() > *lim && {
                *lim = limit();
                self.line.len() + chunk.len() > *lim
            } =>
            {
                let mut s = Scanner::new();
                s.feed(&self.line);
                s.feed(chunk);
                self.scan = Some(s);
                // Give the prefix back now: the rest of the line may be huge.
                self.line = Vec::new();
            }
            None => self.line.extend_from_slice(chunk),
        }
    }

    /// What the whole line is for the engine; None for a blank line.
    fn finish(mut self) -> Option<Down> {
        if let Some(s) = self.scan {
            return Some(Down::Oversize {
                bytes: self.bytes,
                top: s.finish(),
            });
        }
        if strip_cr(&mut self.line) {
            return Some(Down::InnerCr(self.line));
        }
        if self.line.iter().all(|b| b.is_ascii_whitespace()) {
            return None;
        }
        Some(Down::Line(self.line))
    }
}

/// Writes `line` (one JSON value) followed by `\n` and flushes, with every byte sequence
/// some reader takes for a line break rewritten ([`escape_breaks`]).
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> std::io::Result<()> {
    let line = escape_breaks(line);
    // One write per message: a separate "\n" write wakes the reader twice per line.
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(&line);
    buf.push(b'\n');
    w.write_all(&buf).await?;
    w.flush().await
}

/// A JSON line with nothing any common reader splits on: raw U+0085, U+2028 and U+2029
/// (only ever inside strings) become their `\\uXXXX` escapes, and a raw `\r` or `\n`
/// (only ever whitespace between tokens, as readers refuse raw ones and the `\r` rule
/// applies) a space. Same JSON value; an ASCII line without `\r`/`\n` is not copied.
pub fn escape_breaks(line: &[u8]) -> Cow<'_, [u8]> {
    let Some(first) = next_break(line) else {
        return Cow::Borrowed(line);
    };
    let mut out = Vec::with_capacity(line.len() + 16);
    out.extend_from_slice(&line[..first]);
    let mut rest = &line[first..];
    while !rest.is_empty() {
        let (esc, n): (&[u8], usize) = match rest {
            [b'\r' | b'\n', ..] => (b" ", 1),
            [0xC2, 0x85, ..] => (br"\u0085", 2),
            [0xE2, 0x80, 0xA8, ..] => (br"\u2028", 3),
            [0xE2, 0x80, 0xA9, ..] => (br"\u2029", 3),
            // Not a break after all (another character starting 0xC2/0xE2): copy up to
            // the next candidate.
            _ => {
                let n = next_break(&rest[1..]).map_or(rest.len(), |j| j + 1);
                (&rest[..n], n)
            }
        };
        out.extend_from_slice(esc);
        rest = &rest[n..];
    }
    Cow::Owned(out)
}

/// Where the first byte that may start a break sequence is (`\r`, `\n`, or the lead
/// byte of U+0085 / U+2028 / U+2029).
fn next_break(b: &[u8]) -> Option<usize> {
    let a = memchr::memchr3(b'\r', b'\n', 0xC2, b);
    let e = memchr::memchr(0xE2, &b[..a.unwrap_or(b.len())]);
    e.or(a)
}

#[cfg(test)]
mod tests;
