//! Property tests and corpus replay for the shim's input parsers: the client line reader
//! and message parser, the downstream reader and its id scanner, the git index reader.
//!
//! Stable Rust has no cargo-fuzz, so each parser is checked two ways inside `cargo test`:
//! proptest (bounded cases, random every run; `PROPTEST_CASES` raises them) against a
//! reference model or a round trip, and a replay of every file committed under
//! `fuzz/corpus/<target>/` (`fuzz/gen_corpus.py` made them: valid seeds and their
//! mutations). Every input must end in a value or a named rejection, never a panic.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use tc_core::fuzz_corpus::proptest_config as config;
use tc_shim::vault::gitindex::{parse_index, Entry, IndexError};
use tc_shim::wire::framing::{
    escape_breaks, parse_message, read_down, read_frame, Down, Frame, Rejected,
};
use tc_shim::wire::ids::{check_request_id, IdKey};
use tc_shim::wire::jsonrpc::{INVALID_REQUEST, PARSE_ERROR};
use tc_shim::wire::scan::{scan, Scanner, MAX_ID_LEN};

/// Drives a future over an in-memory reader, which is always ready.
fn block<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an in-memory reader never waits"),
    }
}

// ---------------------------------------------------------------------------------------
// Line readers against a reference model.

#[derive(Debug, PartialEq)]
enum M {
    Line(Vec<u8>),
    Long(usize, Option<tc_shim::wire::scan::Top>),
    /// A raw `\r` left inside after the one trailing `\r` is taken: refused, never forwarded.
    InnerCr(Vec<u8>),
}

/// What the readers must return for `data`: split at `\n`; a line over `max` is reported
/// by length (before the `\r` strip); a line still holding a `\r` after one trailing `\r`
/// is taken is refused; blank lines are skipped; a last line without `\n` still counts.
fn model(data: &[u8], max: usize, with_top: bool) -> Vec<M> {
    let mut segs: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let last = segs.pop().unwrap_or_default();
    if !last.is_empty() {
        segs.push(last);
    }
    let mut out = Vec::new();
    for s in segs {
        if s.len() > max {
            out.push(M::Long(s.len(), with_top.then(|| scan(s))));
            continue;
        }
        let s = s.strip_suffix(b"\r").unwrap_or(s);
        if s.contains(&b'\r') {
            out.push(M::InnerCr(s.to_vec()));
        } else if !s.iter().all(u8::is_ascii_whitespace) {
            out.push(M::Line(s.to_vec()));
        }
    }
    out
}

fn frames(data: &[u8], cap: usize, max: usize) -> Vec<M> {
    let mut r = tokio::io::BufReader::with_capacity(cap, data);
    let mut out = Vec::new();
    loop {
        match block(read_frame(&mut r, max)).expect("in-memory reads do not fail") {
            Frame::Line(l) => out.push(M::Line(l)),
            Frame::TooLong(n) => out.push(M::Long(n, None)),
            Frame::InnerCr(l) => out.push(M::InnerCr(l)),
            Frame::Eof => return out,
        }
    }
}

fn downs(data: &[u8], cap: usize, limit: usize) -> Vec<M> {
    let mut r = tokio::io::BufReader::with_capacity(cap, data);
    let mut lim = || limit;
    let mut out = Vec::new();
    loop {
        match block(read_down(&mut r, &mut lim)).expect("in-memory reads do not fail") {
            Down::Line(l) => out.push(M::Line(l)),
            Down::Oversize { bytes, top } => out.push(M::Long(bytes as usize, Some(top))),
            Down::InnerCr(l) => out.push(M::InnerCr(l)),
            Down::Eof => return out,
        }
    }
}

/// Bytes rich in what framing cares about: newlines, `\r`, blanks, braces, quotes.
fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        3 => Just(b'\n'),
        2 => Just(b'\r'),
        2 => Just(b' '),
        2 => prop::sample::select(b"{}[]\":,\\".to_vec()),
        1 => Just(b'\t'),
        6 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..300)
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn read_frame_matches_the_model(data in line_bytes(), cap in 1usize..40, max in 0usize..50) {
        prop_assert_eq!(frames(&data, cap, max), model(&data, max, false));
    }

    #[test]
    fn read_down_matches_the_model_and_scans_what_it_drops(
        data in line_bytes(), cap in 1usize..40, limit in 0usize..50,
    ) {
        prop_assert_eq!(downs(&data, cap, limit), model(&data, limit, true));
    }

    #[test]
    fn client_lines_parse_or_are_rejected_by_name(data in line_bytes()) {
        match parse_message(&data) {
            Ok(v) => {
                prop_assert!(v.is_object());
                prop_assert_eq!(Some(v), serde_json::from_slice::<Value>(&data).ok());
            }
            Err(e @ Rejected::Duplicate(_)) => {
                prop_assert!(serde_json::from_slice::<Value>(&data).is_ok());
                prop_assert_eq!(e.code(), INVALID_REQUEST);
            }
            Err(e @ Rejected::Parse(_)) => {
                prop_assert!(serde_json::from_slice::<Value>(&data).is_err());
                prop_assert_eq!(e.code(), PARSE_ERROR);
            }
            Err(e @ Rejected::NotAnObject) => {
                prop_assert!(!serde_json::from_slice::<Value>(&data).unwrap().is_object());
                prop_assert_eq!(e.code(), INVALID_REQUEST);
            }
            Err(Rejected::TooLong(_) | Rejected::InnerCr) => {
                prop_assert!(false, "parse_message never measures nor frames")
            }
        }
    }

    /// What the proxy may forward (a line read and parsed, then written) holds nothing
    /// any common reader splits on, and is the same JSON.
    #[test]
    fn forwarded_lines_hold_no_line_break(data in line_bytes(), cap in 1usize..40) {
        for f in frames(&data, cap, 1 << 20) {
            if let M::Line(l) = f {
                if let Ok(v) = parse_message(&l) {
                    assert_forwardable(&l, &v)?;
                }
            }
        }
    }

    #[test]
    fn written_messages_hold_no_line_break(m in message(), pretty in any::<bool>()) {
        let v = Value::Object(m);
        let text = if pretty {
            serde_json::to_vec_pretty(&v).unwrap()
        } else {
            serde_json::to_vec(&v).unwrap()
        };
        let back: Value = serde_json::from_slice(&text).unwrap();
        assert_forwardable(&text, &back)?;
    }

    /// Ids match by value, and an id that passes the request check echoes as itself.
    #[test]
    fn ids_match_by_value(id in id_value()) {
        let text = id.to_string();
        let back: Value = serde_json::from_str(&text).unwrap();
        // `Other` keys never match a request. serde_json's default float parser may bring
        // a float back one ulp off (3679227954885734.0 read as …34.5): that is another
        // number, which the key rightly tells apart, so only a faithful round trip counts.
        if back == id && !matches!(IdKey::of(&id), IdKey::Other(_)) {
            prop_assert_eq!(IdKey::of(&back), IdKey::of(&id));
        }
        if check_request_id(&id).is_ok() {
            prop_assert_eq!(IdKey::of(&id).to_value(), id.clone());
            // What a JavaScript server echoes (a double) is the same key.
            if let Some(f) = id.as_f64() {
                prop_assert_eq!(IdKey::of(&json!(f)), IdKey::of(&id));
            }
        }
    }
}

/// `line` (parsed as `v`) written by the proxy: no `\r`, `\n`, U+0085, U+2028, U+2029,
/// and it reads back as `v`.
fn assert_forwardable(line: &[u8], v: &Value) -> Result<(), TestCaseError> {
    let out = escape_breaks(line);
    for bad in [
        &b"\r"[..],
        b"\n",
        "\u{85}".as_bytes(),
        "\u{2028}".as_bytes(),
        "\u{2029}".as_bytes(),
    ] {
        prop_assert!(
            !out.windows(bad.len()).any(|w| w == bad),
            "{:?} in {:?}",
            bad,
            String::from_utf8_lossy(&out)
        );
    }
    let back: Value = serde_json::from_slice(&out).unwrap();
    prop_assert_eq!(&back, v);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The id scanner: split-independent, and in agreement with serde_json on valid JSON.

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        // What some readers take for line breaks, inside strings.
        prop::sample::select(vec![
            "\u{85}",
            "a\u{2028}b",
            "\u{2029}",
            "\r\n\u{b}\u{c}\u{1c}\u{1e}"
        ])
        .prop_map(|s| Value::String(s.into())),
        // The texts a scanner must not take for structure.
        prop::sample::select(vec![
            r#""id":1,"#,
            r#"\"id\":"#,
            "\\",
            "}{][",
            "\u{2028}\u{0}\u{1f}",
        ])
        .prop_map(|s| Value::String(s.into())),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop_oneof![Just("id".to_string()), ".{0,6}"], inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn id_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        Just(Value::Null),
        json_value(),
    ]
}

/// A top-level message: some of `id`, `method`, `result`, `error`, and other members.
fn message() -> impl Strategy<Value = Map<String, Value>> {
    (
        prop::collection::vec((".{0,8}", json_value()), 0..4),
        prop::option::of(id_value()),
        prop::option::of(json_value()),
        prop::option::of(json_value()),
        prop::option::of(json_value()),
        any::<bool>(),
    )
        .prop_map(|(others, id, method, result, error, id_last)| {
            let mut m = Map::new();
            let put = |m: &mut Map<String, Value>| {
                if let Some(id) = &id {
                    m.insert("id".into(), id.clone());
                }
            };
            if !id_last {
                put(&mut m);
            }
            for (k, v) in others {
                if !["id", "method", "result", "error"].contains(&k.as_str()) {
                    m.insert(k, v);
                }
            }
            for (k, v) in [("method", method), ("result", result), ("error", error)] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            if id_last {
                put(&mut m);
            }
            m
        })
}

fn scan_chunked(line: &[u8], step: usize) -> tc_shim::wire::scan::Top {
    let mut s = Scanner::new();
    for c in line.chunks(step.max(1)) {
        s.feed(c);
    }
    s.finish()
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn scanner_agrees_with_serde_json(m in message(), pretty in any::<bool>(), step in 1usize..9) {
        let text = if pretty {
            serde_json::to_string_pretty(&m).unwrap()
        } else {
            serde_json::to_string(&m).unwrap()
        };
        let t = scan_chunked(text.as_bytes(), step);
        // Compared with what serde_json reads back (the proxy's own parse of a line that
        // fits), not with `m`: without `float_roundtrip` a float may come back one ulp off.
        let m: Map<String, Value> = serde_json::from_str(&text).unwrap();
        let raw_id_len = m.get("id").map(|v| v.to_string().len()).unwrap_or(0);
        let want_id = m
            .get("id")
            .filter(|v| v.is_string() || v.is_number())
            .filter(|_| raw_id_len <= MAX_ID_LEN)
            .cloned();
        prop_assert_eq!(&t.id, &want_id, "{}", text);
        prop_assert_eq!(t.has_method, m.contains_key("method"));
        prop_assert_eq!(t.has_result, m.contains_key("result"));
        prop_assert_eq!(t.has_error, m.contains_key("error"));
        prop_assert!(t.complete && !t.malformed, "{}", text);
    }

    #[test]
    fn scanner_ignores_how_bytes_are_split(data in line_bytes(), step in 1usize..17) {
        prop_assert_eq!(scan_chunked(&data, step), scan(&data));
    }

    #[test]
    fn scanner_survives_mutated_messages(
        m in message(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = serde_json::to_vec(&m).unwrap();
        for (i, x) in flips {
            let i = i.index(b.len());
            b[i] = x;
        }
        b.truncate(cut.index(b.len() + 1));
        // Deterministic and split-independent on broken input too.
        prop_assert_eq!(scan_chunked(&b, 3), scan(&b));
    }
}

// ---------------------------------------------------------------------------------------
// The git index reader: round trips of valid indexes (v2, v3, v4), no panic on the rest.

#[derive(Debug, Clone)]
struct IdxEntry {
    name: Vec<u8>,
    mode: u32,
    oid: [u8; 20],
    stage: u8,
    extended: bool,
}

fn idx_entry() -> impl Strategy<Value = IdxEntry> {
    (
        prop::collection::vec(
            prop_oneof![
                4 => prop::sample::select(b"ab/._-".to_vec()),
                1 => 1u8..=255
            ],
            1..40,
        ),
        prop::sample::select(vec![0o100644u32, 0o100755, 0o120000, 0o160000]),
        any::<[u8; 20]>(),
        0u8..4,
        any::<bool>(),
    )
        .prop_map(|(name, mode, oid, stage, extended)| IdxEntry {
            name,
            mode,
            oid,
            stage,
            extended,
        })
}

/// git's offset varint (`encode_varint` in git's varint.c).
fn varint(mut v: usize) -> Vec<u8> {
    let mut out = vec![(v & 127) as u8];
    v >>= 7;
    while v != 0 {
        v -= 1;
        out.push(0x80 | (v & 127) as u8);
        v >>= 7;
    }
    out.reverse();
    out
}

fn encode_index(version: u32, entries: &[IdxEntry]) -> Vec<u8> {
    let mut b = b"DIRC".to_vec();
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    let mut prev: &[u8] = &[];
    for e in entries {
        let start = b.len();
        b.extend_from_slice(&[0x5a; 24]); // ctime, mtime, dev, ino: ignored
        b.extend_from_slice(&e.mode.to_be_bytes());
        b.extend_from_slice(&[0x33; 12]); // uid, gid, size: ignored
        b.extend_from_slice(&e.oid);
        let ext = e.extended && version >= 3;
        let flags = (e.name.len().min(0xfff) as u16)
            | ((e.stage as u16) << 12)
            | if ext { 0x4000 } else { 0 };
        b.extend_from_slice(&flags.to_be_bytes());
        if ext {
            b.extend_from_slice(&0x2000u16.to_be_bytes()); // intent-to-add
        }
        if version == 4 {
            let common = prev.iter().zip(&e.name).take_while(|(a, b)| a == b).count();
            b.extend_from_slice(&varint(prev.len() - common));
            b.extend_from_slice(&e.name[common..]);
            b.push(0);
        } else {
            b.extend_from_slice(&e.name);
            let len = b.len() - start;
            b.resize(start + (len + 8) / 8 * 8, 0);
        }
        prev = &e.name;
    }
    b.extend_from_slice(&[0xee; 20]); // trailing checksum: not checked
    b
}

fn expected(entries: &[IdxEntry]) -> Vec<Entry> {
    let mut out: Vec<Entry> = entries
        .iter()
        .map(|e| Entry {
            path: tc_shim::engine::judge::targets::lossless(&e.name),
            mode: e.mode,
            oid: hex::encode(e.oid),
            stage: e.stage,
        })
        .collect();
    out.sort_by(|a, b| (&a.path, a.stage).cmp(&(&b.path, b.stage)));
    out
}

fn index_prefix() -> impl Strategy<Value = Vec<u8>> {
    (0u32..6, any::<u32>(), 0u32..5).prop_map(|(version, big, small)| {
        let mut b = b"DIRC".to_vec();
        b.extend_from_slice(&version.to_be_bytes());
        b.extend_from_slice(&(if small == 4 { big } else { small }).to_be_bytes());
        b
    })
}

proptest! {
    #![proptest_config(config(384))]

    #[test]
    fn git_index_round_trips(version in 2u32..5, entries in prop::collection::vec(idx_entry(), 0..12)) {
        let b = encode_index(version, &entries);
        prop_assert_eq!(parse_index(&b), Ok(expected(&entries)));
    }

    #[test]
    fn git_index_mutations_are_values_or_named_errors(
        version in 2u32..5,
        entries in prop::collection::vec(idx_entry(), 1..6),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = encode_index(version, &entries);
        for (i, x) in flips {
            let i = i.index(b.len());
            b[i] = x;
        }
        b.truncate(cut.index(b.len() + 1));
        if let Ok(got) = parse_index(&b) {
            // Whatever was read is well formed: 40-hex oids, a 2-bit stage, sorted.
            prop_assert!(got.iter().all(|e| e.oid.len() == 40 && e.stage < 4));
            prop_assert!(got.windows(2).all(|w| (&w[0].path, w[0].stage) <= (&w[1].path, w[1].stage)));
        }
    }

    #[test]
    fn git_index_garbage_after_a_header(prefix in index_prefix(), rest in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut b = prefix;
        b.extend_from_slice(&rest);
        // Any outcome but a panic; the error type is the named enum.
        let _: Result<Vec<Entry>, IndexError> = parse_index(&b);
    }
}

// ---------------------------------------------------------------------------------------
// Corpus replay.

/// Runs `check` on every corpus file; a panic is reported with the file's name.
fn replay(target: &str, check: impl Fn(&str, &[u8])) {
    let mut failed = Vec::new();
    for (name, data) in tc_core::fuzz_corpus::read(target) {
        if catch_unwind(AssertUnwindSafe(|| check(&name, &data))).is_err() {
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "{target}: panicked on {failed:?}");
}

#[test]
fn corpus_client_lines() {
    replay("jsonrpc_line", |name, data| {
        // Frames agree with the model at a small cap (oversize lines) and at the real one.
        for max in [4096, tc_shim::wire::framing::MAX_LINE] {
            assert_eq!(frames(data, 7, max), model(data, max, false), "{name}");
        }
        let mut valid = 0;
        for f in frames(data, 64 * 1024, 4096) {
            let outcome = match f {
                M::Line(l) => parse_message(&l),
                M::Long(n, _) => Err(Rejected::TooLong(n)),
                M::InnerCr(_) => Err(Rejected::InnerCr),
            };
            match outcome {
                Ok(_) => valid += 1,
                Err(e) => assert!([PARSE_ERROR, INVALID_REQUEST].contains(&e.code()), "{e}"),
            }
        }
        if name.starts_with("valid-") {
            assert!(valid > 0, "{name}: a valid seed must parse");
        }
    });
}

#[test]
fn corpus_downstream_lines() {
    replay("downstream_line", |name, data| {
        for limit in [0, 64, 1 << 20] {
            assert_eq!(downs(data, 5, limit), model(data, limit, true), "{name}");
        }
        assert_eq!(scan_chunked(data, 1), scan(data), "{name}");
        if name.starts_with("valid-") {
            // Each valid seed is one response line whose id the scanner must find.
            let line = data.strip_suffix(b"\n").unwrap_or(data);
            let v: Value = serde_json::from_slice(line).unwrap();
            let t = scan(line);
            assert_eq!(
                t.id,
                v.get("id").filter(|i| !i.is_null()).cloned(),
                "{name}"
            );
            assert!(t.complete && !t.malformed, "{name}");
        }
    });
}

#[test]
fn corpus_git_index() {
    replay("gitindex", |name, data| {
        let r: Result<Vec<Entry>, IndexError> = parse_index(data);
        if name.starts_with("valid-") {
            let entries = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!entries.is_empty(), "{name}");
        }
    });
}
