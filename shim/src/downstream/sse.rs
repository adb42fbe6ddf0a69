//! An HTTP answer body as newline-delimited JSON, for [`crate::wire::framing::read_down`]: an
//! SSE stream becomes one line per event's data, a JSON body one line, both streamed.
//!
//! Nothing is held but the chunk being read: an event's data flows through as it comes,
//! so the governor sees a long answer as a long line and scans it without buffering.
//! Raw `\r`/`\n` can only be whitespace between JSON tokens (never inside a string), so
//! turning them into spaces keeps the message's meaning; SSE's own line ends are its
//! framing (CR, LF or CRLF), multi-line `data:` is joined with a space.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_stream::Stream;

/// What kind of body is being turned into lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `text/event-stream`
    Sse,
    /// `application/json`: one message (line breaks inside it become spaces).
    Json,
}

/// Where the SSE parser is within a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// At the start of a line.
    LineStart,
    /// Reading a field name (its first bytes are in `field`).
    Field,
    /// After `data:`, before the optional single space.
    DataColon,
    /// Passing a `data` value through.
    Data,
    /// Skipping the rest of a line (a comment, another field, an over-long name).
    Skip,
}

/// Field names longer than this are not `data` (and are skipped).
const MAX_FIELD: usize = 16;

/// The adapter: an [`AsyncRead`] of lines over a stream of body chunks.
pub struct Lines<S, B> {
    body: Pin<Box<S>>,
    chunk: Option<B>,
    pos: usize,
    kind: Kind,
    at: At,
    field: [u8; MAX_FIELD],
    field_len: usize,
    /// The last byte was a CR: an LF right after it ends nothing more.
    after_cr: bool,
    /// The current event has data already (a next `data` line is joined with a space;
    /// its end emits the newline).
    has_data: bool,
    /// One byte owed to the reader (a separator that did not fit).
    owed: Option<u8>,
    /// The body ended (and what was owed at its end is queued).
    done: bool,
}

impl<S, B, E> Lines<S, B>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    pub fn new(body: S, kind: Kind) -> Self {
        Lines {
            body: Box::pin(body),
            chunk: None,
            pos: 0,
            kind,
            at: At::LineStart,
            field: [0; MAX_FIELD],
            field_len: 0,
            after_cr: false,
            has_data: false,
            owed: None,
            done: false,
        }
    }

    /// The body, for what is left of it (what was read into this adapter is dropped).
    pub fn into_body(self) -> Pin<Box<S>> {
        self.body
    }

    /// Turns as much of the current chunk as fits into `out`.
    fn convert(&mut self, out: &mut ReadBuf<'_>) {
        let Some(chunk) = self.chunk.take() else {
            return;
        };
        let bytes = chunk.as_ref();
        while self.pos < bytes.len() && out.remaining() > 0 && self.owed.is_none() {
            match self.kind {
                Kind::Json => self.json(bytes, out),
                Kind::Sse => self.sse(bytes, out),
            }
        }
        if self.pos < bytes.len() {
            self.chunk = Some(chunk);
        } else {
            self.pos = 0;
        }
    }

    fn json(&mut self, bytes: &[u8], out: &mut ReadBuf<'_>) {
        let n = (bytes.len() - self.pos).min(out.remaining());
        let start = out.filled().len();
        out.put_slice(&bytes[self.pos..self.pos + n]);
        for b in &mut out.filled_mut()[start..] {
            if *b == b'\n' || *b == b'\r' {
                *b = b' ';
            }
        }
        self.pos += n;
    }

    /// Consumes at least one byte of `bytes` (or emits one separator).
    fn sse(&mut self, bytes: &[u8], out: &mut ReadBuf<'_>) {
        let b = bytes[self.pos];
        if self.after_cr {
            self.after_cr = false;
            if b == b'\n' {
                self.pos += 1;
                return;
            }
        }
        if b == b'\r' || b == b'\n' {
            self.pos += 1;
            self.after_cr = b == b'\r';
            self.end_line(out);
            return;
        }
        match self.at {
            At::LineStart if b == b':' => {
                self.at = At::Skip;
                self.pos += 1;
            }
            At::LineStart | At::Field => {
                self.pos += 1;
                if b == b':' {
                    self.at = if &self.field[..self.field_len] == b"data" {
                        At::DataColon
                    } else {
                        At::Skip
                    };
                } else if self.field_len < MAX_FIELD {
                    self.field[self.field_len] = b;
                    self.field_len += 1;
                    self.at = At::Field;
                } else {
                    self.at = At::Skip;
                }
            }
            At::DataColon => {
                if b == b' ' {
                    self.pos += 1;
                }
                self.start_data(out);
            }
            At::Data => {
                let rest = &bytes[self.pos..];
                let run = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
                let n = run.min(out.remaining());
                out.put_slice(&rest[..n]);
                self.pos += n;
            }
            At::Skip => {
                let rest = &bytes[self.pos..];
                self.pos += memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
            }
        }
    }

    /// A `data` value begins: the separator from the previous data line first.
    fn start_data(&mut self, out: &mut ReadBuf<'_>) {
        self.at = At::Data;
        if self.has_data {
            self.emit(b' ', out);
        }
        self.has_data = true;
    }

    /// A line ended: a blank line dispatches the event (its data ends with a newline).
    fn end_line(&mut self, out: &mut ReadBuf<'_>) {
        let blank = self.at == At::LineStart;
        if self.at == At::Field && &self.field[..self.field_len] == b"data" {
            // `data` alone on its line: an empty data line.
            self.start_data(out);
        } else if self.at == At::DataColon {
            self.start_data(out);
        }
        self.at = At::LineStart;
        self.field_len = 0;
        if blank && self.has_data {
            self.has_data = false;
            self.emit(b'\n', out);
        }
    }

    fn emit(&mut self, b: u8, out: &mut ReadBuf<'_>) {
        if out.remaining() > 0 {
            out.put_slice(&[b]);
        } else {
            self.owed = Some(b);
        }
    }

    /// The body ended: an event whose data already flowed out is ended too (a
    /// cut-off message then fails to parse instead of running into the next one).
    fn finish(&mut self) {
        self.done = true;
        let open = match self.kind {
            Kind::Sse => self.has_data,
            Kind::Json => true,
        };
        if open {
            self.has_data = false;
            self.owed = Some(b'\n');
        }
    }
}

impl<S, B, E> AsyncRead for Lines<S, B>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]> + Unpin,
    E: std::fmt::Display,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if let Some(b) = this.owed.take() {
                if out.remaining() == 0 {
                    this.owed = Some(b);
                    return Poll::Ready(Ok(()));
                }
                out.put_slice(&[b]);
            }
            let before = out.filled().len();
            this.convert(out);
            if out.filled().len() > before || out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if this.chunk.is_some() {
                // Consumed framing only; keep going within this chunk.
                continue;
            }
            if this.done {
                return Poll::Ready(Ok(()));
            }
            match this.body.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(c))) => {
                    this.chunk = Some(c);
                    this.pos = 0;
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(io::Error::other(format!("reading the answer: {e}"))))
                }
                Poll::Ready(None) => this.finish(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// The lines `chunks` (as split) turn into, read through a tiny buffer too.
    async fn lines(kind: Kind, chunks: &[&str]) -> String {
        let mk = || {
            let items: Vec<Result<Vec<u8>, String>> =
                chunks.iter().map(|c| Ok(c.as_bytes().to_vec())).collect();
            Lines::new(tokio_stream::iter(items), kind)
        };
        let mut whole = String::new();
        mk().read_to_string(&mut whole).await.unwrap();
        // The same through 1-byte reads: separators owed across reads are not lost.
        let mut r = mk();
        let mut small = Vec::new();
        let mut b = [0u8; 1];
        while r.read(&mut b).await.unwrap() == 1 {
            small.push(b[0]);
        }
        assert_eq!(String::from_utf8(small).unwrap(), whole);
        whole
    }

    #[tokio::test]
    async fn events_split_anywhere_become_one_line_each() {
        let body = "event: message\nid: 1\ndata: {\"id\":1}\n\ndata: {\"id\":2}\n\n";
        for cut in 0..body.len() {
            let got = lines(Kind::Sse, &[&body[..cut], &body[cut..]]).await;
            assert_eq!(got, "{\"id\":1}\n{\"id\":2}\n", "cut at {cut}");
        }
        let bytes: Vec<String> = body.chars().map(String::from).collect();
        let parts: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(lines(Kind::Sse, &parts).await, "{\"id\":1}\n{\"id\":2}\n");
    }

    #[tokio::test]
    async fn multi_line_data_is_joined_with_a_space() {
        let got = lines(Kind::Sse, &["data: {\"a\":\ndata:1,\ndata:  \"b\":2}\n\n"]).await;
        assert_eq!(got, "{\"a\": 1,  \"b\":2}\n");
        let v: serde_json::Value = serde_json::from_str(got.trim_end()).unwrap();
        assert_eq!(v["b"], 2);
    }

    #[tokio::test]
    async fn comments_other_fields_and_events_without_data_are_dropped() {
        let got = lines(
            Kind::Sse,
            &[": keep-alive\n\nretry: 100\nevent: ping\n\n:data: x\nid: 7\ndata: {}\n\n"],
        )
        .await;
        assert_eq!(got, "{}\n");
        // A field name merely starting with `data` is another field.
        assert_eq!(lines(Kind::Sse, &["datax: 1\ndata: 2\n\n"]).await, "2\n");
        // A very long field name is skipped, not held.
        let long = format!("{}: 1\ndata: 3\n\n", "d".repeat(100));
        assert_eq!(lines(Kind::Sse, &[&long]).await, "3\n");
    }

    #[tokio::test]
    async fn crlf_and_lone_cr_end_lines() {
        let got = lines(
            Kind::Sse,
            &["data: 1\r", "\n\r\ndata: 2\r\rdata: [3,\r\ndata: 4]\n\n"],
        )
        .await;
        assert_eq!(got, "1\n2\n[3, 4]\n");
    }

    #[tokio::test]
    async fn a_cut_off_event_is_still_ended() {
        assert_eq!(lines(Kind::Sse, &["data: {\"id\":1"]).await, "{\"id\":1\n");
        assert_eq!(lines(Kind::Sse, &["data: 1\n\ndata: 2\n"]).await, "1\n2\n");
        assert_eq!(lines(Kind::Sse, &[": only a comment\n"]).await, "");
    }

    #[tokio::test]
    async fn a_json_body_is_one_line_whatever_its_layout() {
        let got = lines(
            Kind::Json,
            &["{\r\n  \"id\": 1,\n", "  \"result\": {}\n}\n"],
        )
        .await;
        assert_eq!(got, "{    \"id\": 1,   \"result\": {} } \n");
        assert!(!got.trim_end().contains('\n'));
        assert_eq!(lines(Kind::Json, &["{}"]).await, "{}\n");
    }

    #[tokio::test]
    async fn a_body_error_is_a_read_error() {
        let items: Vec<Result<Vec<u8>, String>> =
            vec![Ok(b"data: 1".to_vec()), Err("reset".into())];
        let mut r = Lines::new(tokio_stream::iter(items), Kind::Sse);
        let mut s = String::new();
        let e = r.read_to_string(&mut s).await.unwrap_err();
        assert!(e.to_string().contains("reset"), "{e}");
    }
}
