//! Incremental scan of a JSON-RPC line too long to buffer: tracks depth and string/escape
//! state byte by byte to find the top-level `id` (wherever it appears) and members.
//!
//! Only what the governor needs to answer the right request is kept: the raw text of a
//! scalar top-level `id` (bounded), and whether `method`, `result` and `error` appear at
//! the top level. Memory is constant whatever the line's length.

use serde_json::Value;

/// An `id` whose raw text is longer than this is treated as absent.
pub const MAX_ID_LEN: usize = 1024;
/// Keys are captured up to this length (escaped spellings of `id` included).
const MAX_KEY_LEN: usize = 64;

/// What a finished scan found at the top level of the line.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Top {
    /// The top-level `id`, when it is a string or a number (the last one, as
    /// `serde_json` keeps the last duplicate).
    pub id: Option<Value>,
    pub has_method: bool,
    pub has_result: bool,
    pub has_error: bool,
    /// The top-level object was closed (the line is at least structurally complete).
    pub complete: bool,
    /// The line is not a JSON object, or broke JSON syntax where the scan looks.
    pub malformed: bool,
}

impl Top {
    /// A response (to some request), not a request or notification.
    pub fn is_response(&self) -> bool {
        !self.has_method && (self.has_result || self.has_error)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    /// Before the opening `{`.
    Start,
    /// Expecting a key (or `}`).
    Key,
    /// Inside a key string.
    InKey,
    /// After a key, expecting `:`.
    Colon,
    /// Expecting a top-level member's value.
    Value,
    /// Inside a top-level string value.
    InStr,
    /// Inside a top-level number / true / false / null.
    InScalar,
    /// Inside a nested object or array, outside any string.
    Nested,
    /// Inside a string within a nested value.
    NestedStr,
    /// After a top-level value, expecting `,` or `}`.
    AfterValue,
    /// The top-level object closed; the rest is ignored.
    Done,
    /// Not something the scan understands; the rest is ignored.
    Bad,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Member {
    Id,
    Method,
    Result,
    Error,
    Other,
}

/// The incremental scanner: feed it the line in pieces, then [`Scanner::finish`].
#[derive(Debug)]
pub struct Scanner {
    st: St,
    escape: bool,
    depth: usize,
    key: Vec<u8>,
    key_overflow: bool,
    member: Member,
    /// Raw text of the `id` value being read (quotes included for strings).
    capture: Vec<u8>,
    capture_overflow: bool,
    top: Top,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new()
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner {
            st: St::Start,
            escape: false,
            depth: 0,
            key: Vec::new(),
            key_overflow: false,
            member: Member::Other,
            capture: Vec::new(),
            capture_overflow: false,
            top: Top::default(),
        }
    }

    fn capturing(&self) -> bool {
        self.member == Member::Id
    }

    fn capture(&mut self, bytes: &[u8]) {
        if !self.capturing() || self.capture_overflow {
            return;
        }
        if self.capture.len() + bytes.len() > MAX_ID_LEN {
            self.capture_overflow = true;
            self.capture = Vec::new();
        } else {
            self.capture.extend_from_slice(bytes);
        }
    }

    fn end_key(&mut self) {
        let name: Option<String> = if self.key_overflow {
            None
        } else {
            let mut raw = Vec::with_capacity(self.key.len() + 2);
            raw.push(b'"');
            raw.extend_from_slice(&self.key);
            raw.push(b'"');
            serde_json::from_slice(&raw).ok()
        };
        self.member = match name.as_deref() {
            Some("id") => Member::Id,
            Some("method") => Member::Method,
            Some("result") => Member::Result,
            Some("error") => Member::Error,
            _ => Member::Other,
        };
        match self.member {
            Member::Method => self.top.has_method = true,
            Member::Result => self.top.has_result = true,
            Member::Error => self.top.has_error = true,
            Member::Id => {
                // A later duplicate replaces an earlier one, as in serde_json.
                self.top.id = None;
                self.capture.clear();
                self.capture_overflow = false;
            }
            Member::Other => {}
        }
        self.key.clear();
        self.key_overflow = false;
    }

    /// A top-level value ended: keep it if it was the id.
    fn end_value(&mut self) {
        if self.member == Member::Id && !self.capture_overflow {
            self.top.id = serde_json::from_slice::<Value>(&self.capture)
                .ok()
                .filter(|v| v.is_string() || v.is_number());
        }
        self.capture.clear();
        self.member = Member::Other;
        self.st = St::AfterValue;
    }

    /// Skips string content up to the closing quote, honouring escapes across calls.
    /// Returns the index just past the closing quote, or None if the string goes on.
    fn string(&mut self, buf: &[u8], mut i: usize, sink: fn(&mut Scanner, &[u8])) -> Option<usize> {
        loop {
            if self.escape {
                if i >= buf.len() {
                    return None;
                }
                sink(self, &buf[i..i + 1]);
                self.escape = false;
                i += 1;
            }
            match memchr::memchr2(b'"', b'\\', &buf[i..]) {
                None => {
                    sink(self, &buf[i..]);
                    return None;
                }
                Some(off) => {
                    let at = i + off;
                    sink(self, &buf[i..at + 1]);
                    if buf[at] == b'"' {
                        return Some(at + 1);
                    }
                    self.escape = true;
                    i = at + 1;
                }
            }
        }
    }

    /// Feeds the next piece of the line.
    pub fn feed(&mut self, buf: &[u8]) {
        let mut i = 0;
        while i < buf.len() {
            match self.st {
                St::Done | St::Bad => return,
                St::InKey | St::InStr | St::NestedStr => match self.in_string(buf, i) {
                    Some(next) => i = next,
                    None => return,
                },
                _ => {
                    self.byte(buf[i]);
                    i += 1;
                }
            }
        }
    }

    /// Goes on with the string the scan is inside (a key, a top-level string value, or
    /// a string within a nested value) from `buf[i]`: the index just past its closing
    /// quote, or None when the piece ends first.
    fn in_string(&mut self, buf: &[u8], i: usize) -> Option<usize> {
        match self.st {
            St::InKey => {
                let next = self.string(buf, i, |s, b| {
                    if s.key.len() + b.len() > MAX_KEY_LEN {
                        s.key_overflow = true;
                    } else {
                        s.key.extend_from_slice(b);
                    }
                })?;
                // The sink took the closing quote too.
                if !self.key_overflow {
                    self.key.pop();
                }
                self.end_key();
                self.st = St::Colon;
                Some(next)
            }
            St::InStr => {
                let next = self.string(buf, i, |s, b| s.capture(b))?;
                self.end_value();
                Some(next)
            }
            St::NestedStr => {
                let next = self.string(buf, i, |_, _| {})?;
                self.st = St::Nested;
                Some(next)
            }
            _ => unreachable!("in_string outside a string"),
        }
    }

    /// One byte outside any string.
    fn byte(&mut self, b: u8) {
        match self.st {
            St::Start => match b {
                b'{' => self.st = St::Key,
                _ if is_ws(b) => {}
                _ => self.st = St::Bad,
            },
            St::Key => match b {
                b'"' => self.st = St::InKey,
                b'}' => self.st = St::Done,
                _ if is_ws(b) => {}
                _ => self.st = St::Bad,
            },
            St::Colon => match b {
                b':' => self.st = St::Value,
                _ if is_ws(b) => {}
                _ => self.st = St::Bad,
            },
            St::Value => self.value_start(b),
            St::InScalar => self.in_scalar(b),
            St::Nested => self.nested(b),
            St::AfterValue => match b {
                b',' => self.st = St::Key,
                b'}' => self.st = St::Done,
                _ if is_ws(b) => {}
                _ => self.st = St::Bad,
            },
            St::InKey | St::InStr | St::NestedStr | St::Done | St::Bad => unreachable!(),
        }
    }

    /// The first byte of a top-level member's value.
    fn value_start(&mut self, b: u8) {
        match b {
            b'"' => {
                self.capture(b"\"");
                self.st = St::InStr;
            }
            b'{' | b'[' => {
                // An object or array id is not a JSON-RPC id.
                if self.member == Member::Id {
                    self.capture_overflow = true;
                }
                self.depth = 1;
                self.st = St::Nested;
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                self.capture(&[b]);
                self.st = St::InScalar;
            }
            _ if is_ws(b) => {}
            _ => self.st = St::Bad,
        }
    }

    /// A byte of a top-level number / true / false / null, or the one that ends it.
    fn in_scalar(&mut self, b: u8) {
        if is_ws(b) || b == b',' || b == b'}' {
            self.end_value();
            match b {
                b',' => self.st = St::Key,
                b'}' => self.st = St::Done,
                _ => {}
            }
        } else {
            self.capture(&[b]);
        }
    }

    /// A byte within a nested object or array, outside its strings.
    fn nested(&mut self, b: u8) {
        match b {
            b'"' => self.st = St::NestedStr,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth -= 1;
                if self.depth == 0 {
                    self.end_value();
                }
            }
            _ => {}
        }
    }

    /// Ends the scan (the line is over).
    pub fn finish(mut self) -> Top {
        if self.st == St::InScalar {
            self.end_value();
        }
        self.top.complete = self.st == St::Done;
        self.top.malformed = self.st != St::Done;
        self.top
    }
}

/// Scans a whole buffer at once.
pub fn scan(line: &[u8]) -> Top {
    let mut s = Scanner::new();
    s.feed(line);
    s.finish()
}

#[cfg(test)]
mod tests;
