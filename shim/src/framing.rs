//! Newline-delimited JSON-RPC framing: reads one line at a time with a hard size cap
//! (or, downstream, scans an over-long line without holding it) and writes lines.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::results::{INVALID_REQUEST, PARSE_ERROR};
use crate::scan::{Scanner, Top};

/// Lines longer than this are refused (the rest of the line is discarded).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// One read from a stream.
#[derive(Debug)]
pub enum Frame {
    /// A complete line without its trailing `\n` (and `\r`).
    Line(Vec<u8>),
    /// A line over the cap; it was skipped up to its newline.
    TooLong(usize),
    /// End of stream.
    Eof,
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
        if line.last() == Some(&b'\r') {
            line.pop();
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
    Parse(#[from] serde_json::Error),
    /// JSON, but not an object (a batch array, a scalar).
    #[error("expected a JSON-RPC message object")]
    NotAnObject,
    /// Over the line cap ([`Frame::TooLong`]); it was skipped, never parsed.
    #[error("message of {0} bytes exceeds the {max}-byte limit", max = MAX_LINE)]
    TooLong(usize),
}

impl Rejected {
    /// The JSON-RPC error code the client is answered with (id null).
    pub fn code(&self) -> i64 {
        match self {
            Rejected::Parse(_) => PARSE_ERROR,
            Rejected::NotAnObject | Rejected::TooLong(_) => INVALID_REQUEST,
        }
    }
}

/// Parses one client line (a [`Frame::Line`]) into a message object.
pub fn parse_message(line: &[u8]) -> Result<Value, Rejected> {
    let v: Value = serde_json::from_slice(line)?;
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
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        return Ok(Down::Line(line));
    }
}

/// Writes `line` followed by `\n` and flushes.
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> std::io::Result<()> {
    // One write per message: a separate "\n" write wakes the reader twice per line.
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line);
    buf.push(b'\n');
    w.write_all(&buf).await?;
    w.flush().await
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
}
