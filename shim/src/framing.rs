//! Newline-delimited JSON-RPC framing: reads one line at a time with a hard size cap
//! and writes lines; owns nothing about message meaning.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

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

fn memchr_nl(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
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
}
