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
                St::InKey => {
                    match self.string(buf, i, |s, b| {
                        if s.key.len() + b.len() > MAX_KEY_LEN {
                            s.key_overflow = true;
                        } else {
                            s.key.extend_from_slice(b);
                        }
                    }) {
                        Some(next) => {
                            // The sink took the closing quote too.
                            if !self.key_overflow {
                                self.key.pop();
                            }
                            self.end_key();
                            self.st = St::Colon;
                            i = next;
                        }
                        None => return,
                    }
                    continue;
                }
                St::InStr => {
                    match self.string(buf, i, |s, b| s.capture(b)) {
                        Some(next) => {
                            self.end_value();
                            i = next;
                        }
                        None => return,
                    }
                    continue;
                }
                St::NestedStr => {
                    match self.string(buf, i, |_, _| {}) {
                        Some(next) => {
                            self.st = St::Nested;
                            i = next;
                        }
                        None => return,
                    }
                    continue;
                }
                _ => {}
            }
            let b = buf[i];
            i += 1;
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
                St::Value => match b {
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
                },
                St::InScalar => {
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
                St::Nested => match b {
                    b'"' => self.st = St::NestedStr,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            self.end_value();
                        }
                    }
                    _ => {}
                },
                St::AfterValue => match b {
                    b',' => self.st = St::Key,
                    b'}' => self.st = St::Done,
                    _ if is_ws(b) => {}
                    _ => self.st = St::Bad,
                },
                St::InKey | St::InStr | St::NestedStr | St::Done | St::Bad => unreachable!(),
            }
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
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `line` in pieces of every size from 1 to 7 bytes: the result must not depend
    /// on where the reads split it.
    fn scan_split(line: &[u8]) -> Top {
        let whole = scan(line);
        for step in 1..8 {
            let mut s = Scanner::new();
            for c in line.chunks(step) {
                s.feed(c);
            }
            assert_eq!(
                s.finish(),
                whole,
                "split by {step}: {}",
                String::from_utf8_lossy(line)
            );
        }
        whole
    }

    #[test]
    fn id_before_and_after_a_huge_string() {
        let big = "x".repeat(200_000);
        let before = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{big}"}}]}}}}"#
        );
        let t = scan_split(before.as_bytes());
        assert_eq!(t.id, Some(json!(7)));
        assert!(t.is_response() && t.complete && !t.malformed);
        let after = format!(
            r#"{{"result":{{"content":[{{"type":"text","text":"{big}"}}]}},"jsonrpc":"2.0","id":"req-9"}}"#
        );
        let t = scan_split(after.as_bytes());
        assert_eq!(t.id, Some(json!("req-9")));
        assert!(t.is_response());
    }

    #[test]
    fn escaped_quotes_and_backslashes_do_not_end_strings() {
        // The string holds `\"id\":1,` and a trailing backslash pair: none of it is a key.
        let line = br#"{"result":{"text":"say \"id\":1, \\\" and \\"},"id":"a\"b\\"}"#;
        let t = scan_split(line);
        assert_eq!(t.id, Some(json!("a\"b\\")));
        assert!(t.is_response() && t.complete);
        // Unicode escapes in the id and in a key spelling "id".
        let t = scan_split(br#"{"result":1,"\u0069d":"\u00e9t\u00e9"}"#);
        assert_eq!(t.id, Some(json!("été")));
    }

    #[test]
    fn nested_id_keys_are_not_the_top_level_id() {
        let line = br#"{"jsonrpc":"2.0","result":{"id":99,"items":[{"id":"inner"},["id",{"id":3}]]},"id":4}"#;
        let t = scan_split(line);
        assert_eq!(t.id, Some(json!(4)));
        let none = br#"{"jsonrpc":"2.0","result":{"id":99,"deep":{"id":"x"}}}"#;
        let t = scan_split(none);
        assert_eq!(t.id, None);
        assert!(t.is_response());
        // A string value that merely contains `"id":` text at the top level.
        let t = scan_split(br#"{"result":"\"id\":5","id":6}"#);
        assert_eq!(t.id, Some(json!(6)));
    }

    #[test]
    fn number_and_string_ids_and_odd_spacing() {
        for (line, id) in [
            (&br#"{"id":0,"result":null}"#[..], json!(0)),
            (br#"{"id":-12,"result":{}}"#, json!(-12)),
            (br#"{"id":1.5e3,"result":{}}"#, json!(1.5e3)),
            (br#" {  "id" :  42 , "result" : [ ] } "#, json!(42)),
            (
                br#"{"result":{},"id":18446744073709551615}"#,
                json!(18446744073709551615u64),
            ),
            (br#"{"result":{},"id":""}"#, json!("")),
        ] {
            assert_eq!(
                scan_split(line).id,
                Some(id),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // The last of duplicate ids wins, as in serde_json.
        assert_eq!(
            scan_split(br#"{"id":1,"result":2,"id":3}"#).id,
            Some(json!(3))
        );
    }

    #[test]
    fn requests_notifications_and_non_ids() {
        let t = scan_split(
            br#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"result":1}}"#,
        );
        assert!(t.has_method && !t.is_response());
        assert_eq!(t.id, Some(json!(5)));
        let t = scan_split(br#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
        assert_eq!(t.id, None);
        assert!(!t.is_response());
        // null, object and array ids are not ids; an error response still is a response.
        assert_eq!(scan_split(br#"{"id":null,"error":{"code":1}}"#).id, None);
        assert_eq!(scan_split(br#"{"id":{"a":1},"result":1}"#).id, None);
        assert_eq!(scan_split(br#"{"id":[1],"result":1}"#).id, None);
        assert!(scan_split(br#"{"id":2,"error":{"code":1}}"#).is_response());
        // An over-long id is dropped rather than held.
        let long = format!(r#"{{"id":"{}","result":1}}"#, "i".repeat(MAX_ID_LEN + 10));
        assert_eq!(scan_split(long.as_bytes()).id, None);
    }

    #[test]
    fn malformed_and_truncated_lines() {
        assert!(scan(b"[1,2,3]").malformed);
        assert!(scan(b"not json").malformed);
        let t = scan(br#"{"id":3,"result":{"text":"unterminated"#);
        assert!(!t.complete && t.malformed);
        assert_eq!(
            t.id,
            Some(json!(3)),
            "an id read before the cut is still known"
        );
        let t = scan(br#"{"result":1,"id":12"#);
        assert_eq!(t.id, Some(json!(12)));
        assert!(!t.complete);
    }

    #[test]
    fn a_huge_key_is_skipped_without_being_kept() {
        let key = "k".repeat(100_000);
        let line = format!(r#"{{"{key}":1,"id":8,"result":true}}"#);
        let t = scan_split(line.as_bytes());
        assert_eq!(t.id, Some(json!(8)));
        assert!(t.is_response());
    }
}
