//! Tests of the line framing both ways: limits, blank lines, oversize lines scanned
//! not held, raw CRs refused, line breaks escaped on write.

use super::*;

#[tokio::test]
async fn lines_blank_lines_and_oversize() {
    let data = b"{\"a\":1}\r\n\n   \nxxxxxxxxxxxx\n{\"b\":2}".to_vec();
    let mut r = tokio::io::BufReader::with_capacity(4, &data[..]);
    assert!(matches!(read_frame(&mut r, 10).await.unwrap(), Frame::Line(l) if l == b"{\"a\":1}"));
    assert!(matches!(
        read_frame(&mut r, 10).await.unwrap(),
        Frame::TooLong(12)
    ));
    assert!(matches!(read_frame(&mut r, 10).await.unwrap(), Frame::Line(l) if l == b"{\"b\":2}"));
    assert!(matches!(read_frame(&mut r, 10).await.unwrap(), Frame::Eof));
}

/// A line of `big` that is not held: a small line, a blank one, one of 5000 bytes
/// ending in `\r\n`, a small one, one cut off by the end of the stream.
fn down_data() -> (String, String) {
    let big = "y".repeat(5000);
    let data = format!(
        "{{\"id\":1,\"result\":\"ok\"}}\n\n{{\"result\":{{\"text\":\"{big}\"}},\"id\":\"late\"}}\r\n{{\"id\":3,\"result\":4}}\n{{\"id\":5,\"result\":\"{big}"
    );
    (big, data)
}

#[tokio::test]
async fn downstream_lines_over_the_limit_are_scanned_not_held() {
    let (big, data) = down_data();
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
}

/// A limit that shrinks while the line streams (the capped request was sent after
/// the read began) is seen before the line is held whole.
#[tokio::test]
async fn a_limit_that_shrinks_while_a_line_streams_is_seen() {
    let (_, data) = down_data();
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
}

/// A limit that grows while the line streams lets it through whole.
#[tokio::test]
async fn a_limit_that_grows_while_a_line_streams_lets_it_through() {
    let (big, data) = down_data();
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
    assert!(matches!(read_frame(&mut r, 100).await.unwrap(), Frame::Line(l) if l == b"{\"a\":1}"));
    assert!(
        matches!(read_frame(&mut r, 100).await.unwrap(), Frame::InnerCr(l) if l.starts_with(b"{\"method\""))
    );
    // A blank line of two `\r`: one is the allowed trailing one, the other is inside.
    assert!(matches!(read_frame(&mut r, 100).await.unwrap(), Frame::InnerCr(l) if l == b"\r"));
    assert!(matches!(read_frame(&mut r, 100).await.unwrap(), Frame::Line(l) if l == b"{\"c\":3}"));
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
    let v = serde_json::json!({"a": "x\u{2028}y\u{2029}z\u{85}w \u{201c}q\u{201d} \u{e9}\u{c2}"});
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
