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
        let mut line = Vec::new();
        let mut scan: Option<Scanner> = None;
        let mut bytes = 0u64;
        loop {
            let buf = r.fill_buf().await?;
            if buf.is_empty() {
                if scan.is_some() || !line.is_empty() {
                    break;
                }
                return Ok(Down::Eof);
            }
            let (chunk, done) = match memchr_nl(buf) {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            bytes += chunk.len() as u64;
            if scan.is_none() && !line.is_empty() {
                // A line spanning reads: the limit asked before it started may be stale
                // (the request it answers may have been sent since), so ask again
                // before it grows: at most one read's worth past the fresh answer.
                lim = limit();
            }
            match scan.as_mut() {
                Some(s) => s.feed(chunk),
                None if line.len() + chunk.len() > lim && {
                    lim = limit();
                    line.len() + chunk.len() > lim
                } =>
                {
                    let mut s = Scanner::new();
                    s.feed(&line);
                    s.feed(chunk);
                    scan = Some(s);
                    // Give the prefix back now: the rest of the line may be huge.
                    line = Vec::new();
                }
                None => line.extend_from_slice(chunk),
            }
            let consumed = done.unwrap_or(buf.len());
            r.consume(consumed);
            if done.is_some() {
                break;
            }
        }
        if let Some(s) = scan {
            return Ok(Down::Oversize {
                bytes,
                top: s.finish(),
            });
        }
        if strip_cr(&mut line) {
            return Ok(Down::InnerCr(line));
        }
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        return Ok(Down::Line(line));
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_blank_lines_and_oversize() {
        let data = b"{\"a\":1}\r\n\n   \nxxxxxxxxxxxx\n{\"b\":2}".to_vec();
        let mut r = tokio::io::BufReader::with_capacity(4, &data[..]);
        assert!(
            matches!(read_frame(&mut r, 10).await.unwrap(), Frame::Line(l) if l == b"{\"a\":1}")
        );
        assert!(matches!(
            read_frame(&mut r, 10).await.unwrap(),
            Frame::TooLong(12)
        ));
        assert!(
            matches!(read_frame(&mut r, 10).await.unwrap(), Frame::Line(l) if l == b"{\"b\":2}")
        );
        assert!(matches!(read_frame(&mut r, 10).await.unwrap(), Frame::Eof));
    }

    #[tokio::test]
    async fn downstream_lines_over_the_limit_are_scanned_not_held() {
        let big = "y".repeat(5000);
        let data = format!(
            "{{\"id\":1,\"result\":\"ok\"}}\n\n{{\"result\":{{\"text\":\"{big}\"}},\"id\":\"late\"}}\r\n{{\"id\":3,\"result\":4}}\n{{\"id\":5,\"result\":\"{big}"
        );
        let mut r = tokio::io::BufReader::with_capacity(64, data.as_bytes());
        let mut asked = 0;
        let mut limit = || {
            asked += 1;
            1000
        };
        match read_down(&mut r, &mut limit).await.unwrap() {
            Down::Line(l) => assert_eq!(l, br#"{"id":1,"result":"ok"}"#),
            other => panic!("{other:?}"),
        }
        match read_down(&mut r, &mut limit).await.unwrap() {
            Down::Oversize { bytes, top } => {
                // Every byte before the newline counts, the `\r` included.
                assert_eq!(bytes as usize, big.len() + 35);
                assert_eq!(top.id, Some(serde_json::json!("late")));
                assert!(top.is_response() && top.complete);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(read_down(&mut r, &mut limit).await.unwrap(), Down::Line(l) if l == br#"{"id":3,"result":4}"#)
        );
        // A last line cut off by the end of the stream still reports its id.
        match read_down(&mut r, &mut limit).await.unwrap() {
            Down::Oversize { top, .. } => {
                assert_eq!(top.id, Some(serde_json::json!(5)));
                assert!(!top.complete);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_down(&mut r, &mut limit).await.unwrap(),
            Down::Eof
        ));
        assert!(
            asked >= 2,
            "the limit is asked again before a line is declared oversize"
        );
        // A limit that shrinks while the line streams (the capped request was sent after
        // the read began) is seen before the line is held whole.
        let mut r = tokio::io::BufReader::with_capacity(64, data.as_bytes());
        let _ = read_down(&mut r, &mut || 1000).await.unwrap();
        let mut calls = 0;
        let mut shrinking = || {
            calls += 1;
            if calls == 1 {
                1 << 20
            } else {
                1000
            }
        };
        assert!(
            matches!(read_down(&mut r, &mut shrinking).await.unwrap(), Down::Oversize { top, .. } if top.id == Some(serde_json::json!("late"))),
            "a stale, larger limit must not let the line be buffered past the fresh one"
        );
        // A limit that grows while the line streams lets it through whole.
        let mut r = tokio::io::BufReader::with_capacity(64, data.as_bytes());
        let mut n = 0;
        let mut growing = || {
            n += 1;
            if n == 1 {
                10
            } else {
                1 << 20
            }
        };
        assert!(matches!(
            read_down(&mut r, &mut growing).await.unwrap(),
            Down::Line(_)
        ));
        assert!(
            matches!(read_down(&mut r, &mut growing).await.unwrap(), Down::Line(l) if l.len() == big.len() + 34)
        );
    }

    #[tokio::test]
    async fn a_raw_cr_inside_a_line_is_refused_both_ways() {
        let data =
            b"{\"a\":1}\r\n{\"method\":\"x\",\"params\":\r{\"b\":2}}\n\r\r\n{\"c\":3}\n".to_vec();
        let mut r = tokio::io::BufReader::with_capacity(3, &data[..]);
        assert!(
            matches!(read_frame(&mut r, 100).await.unwrap(), Frame::Line(l) if l == b"{\"a\":1}")
        );
        assert!(
            matches!(read_frame(&mut r, 100).await.unwrap(), Frame::InnerCr(l) if l.starts_with(b"{\"method\""))
        );
        // A blank line of two `\r`: one is the allowed trailing one, the other is inside.
        assert!(matches!(read_frame(&mut r, 100).await.unwrap(), Frame::InnerCr(l) if l == b"\r"));
        assert!(
            matches!(read_frame(&mut r, 100).await.unwrap(), Frame::Line(l) if l == b"{\"c\":3}")
        );
        let mut r = tokio::io::BufReader::with_capacity(3, &data[..]);
        let mut lim = || 100;
        assert!(matches!(
            read_down(&mut r, &mut lim).await.unwrap(),
            Down::Line(_)
        ));
        assert!(matches!(
            read_down(&mut r, &mut lim).await.unwrap(),
            Down::InnerCr(_)
        ));
        assert!(matches!(
            read_down(&mut r, &mut lim).await.unwrap(),
            Down::InnerCr(_)
        ));
        assert!(matches!(
            read_down(&mut r, &mut lim).await.unwrap(),
            Down::Line(_)
        ));
        assert_eq!(Rejected::InnerCr.code(), INVALID_REQUEST);
    }

    #[test]
    fn refusals_answer_a_request_under_its_id_only() {
        assert_eq!(
            refusal_id(b"{\"method\":\"x\",\r\"id\":7}"),
            serde_json::json!(7)
        );
        assert_eq!(refusal_id(b"{\"method\":\"x\",\r\"id\":7.0}"), Value::Null);
        assert_eq!(refusal_id(b"{\"result\":{},\r\"id\":7}"), Value::Null);
        assert_eq!(refusal_id(b"{\"method\":\"x\"\r}"), Value::Null);
        assert_eq!(refusal_id(b"not json\r"), Value::Null);
    }

    #[test]
    fn line_breaks_other_readers_see_are_escaped_losslessly() {
        let v =
            serde_json::json!({"a": "x\u{2028}y\u{2029}z\u{85}w \u{201c}q\u{201d} \u{e9}\u{c2}"});
        let raw = serde_json::to_vec(&v).unwrap();
        let out = escape_breaks(&raw);
        let text = std::str::from_utf8(&out).unwrap();
        assert_eq!(text.lines().count(), 1);
        for c in ['\r', '\n', '\u{85}', '\u{2028}', '\u{2029}'] {
            assert!(!text.contains(c), "{c:?} in {text}");
        }
        assert!(text.contains(r"\u2028") && text.contains(r"\u2029") && text.contains(r"\u0085"));
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), v);
        // Whitespace `\r`/`\n` between tokens becomes a space; the value is the same.
        let ws = b"{\"a\":\r\n1}";
        assert_eq!(&*escape_breaks(ws), b"{\"a\":  1}");
        // The common case is not copied.
        assert!(matches!(
            escape_breaks(b"{\"id\":1,\"result\":{}}"),
            Cow::Borrowed(_)
        ));
        assert!(
            matches!(escape_breaks("{\"a\":\"\u{e9}\u{201c}\"}".as_bytes()), Cow::Owned(o) if o == "{\"a\":\"\u{e9}\u{201c}\"}".as_bytes())
        );
    }

    #[test]
    fn other_break_bytes_are_never_valid_json_raw() {
        #[derive(serde::Deserialize)]
        struct Any {
            #[allow(dead_code)]
            a: serde::de::IgnoredAny,
        }
        // Raw control characters are refused even where nothing is built (the envelope).
        for b in [0x0bu8, 0x0c, 0x1c, 0x1d, 0x1e] {
            let in_string = [&b"{\"a\":\"x"[..], &[b], &b"\"}"[..]].concat();
            let between = [&b"{\"a\":"[..], &[b], &b"1}"[..]].concat();
            for line in [in_string, between] {
                assert!(serde_json::from_slice::<Value>(&line).is_err(), "{line:?}");
                assert!(serde_json::from_slice::<Any>(&line).is_err(), "{line:?}");
                assert!(parse_message(&line).is_err());
            }
        }
        // A lone 0x85 byte (NEL in Latin-1) is not UTF-8: refused where a value is built;
        // the envelope does not look, so the proxy checks UTF-8 before passing a line on.
        let nel = b"{\"a\":\"x\x85\"}";
        assert!(serde_json::from_slice::<Value>(nel).is_err());
        assert!(parse_message(nel).is_err());
    }
}
