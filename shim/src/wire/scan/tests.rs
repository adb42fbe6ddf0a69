//! Tests of the incremental scanner, each line also fed in pieces: ids before and
//! after huge strings, escapes, nesting, malformed and truncated lines, huge keys.

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
    let line =
        br#"{"jsonrpc":"2.0","result":{"id":99,"items":[{"id":"inner"},["id",{"id":3}]]},"id":4}"#;
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
