//! Stdin fuzz of the real tc-shim (in front of the stdlib echo fixture, with a real tcd):
//! corpus lines and generated garbage must each be answered as JSON-RPC says — a line
//! that is not JSON with a parse error (-32700, id null), JSON that is not an object
//! with an invalid request (-32600, id null) — and the shim must keep answering after.
//!
//! Well-formed but odd objects (wrong member types, odd ids, odd `_meta`) are sent too:
//! nothing is expected of them but that the shim survives and every line it writes is JSON.

use tc_tests::security as security_support;
use tc_tests::shim as support;

use security_support::Shim;
use serde_json::{json, Value};
use support::*;
use tc_tests::{env_parse, Rng};

fn start(env: &Env) -> Shim {
    let fixture = fixture("echo_server.py");
    let argv = env.shim_argv_inline("echo", &["python3".into(), fixture.display().to_string()]);
    Shim::start(&argv, "error", None)
}

/// Probes and returns the codes of the id-null errors answered on the way, in order.
fn rejections(s: &mut Shim, what: &str) -> Vec<i64> {
    s.probe(what)
        .into_iter()
        .filter(|v| v.get("id") == Some(&Value::Null))
        .filter_map(|v| v["error"]["code"].as_i64())
        .collect()
}

fn env() -> Env {
    let mut env = Env::with(
        &Vault::bare("echo")
            .gate_when(
                "hello",
                r#"{ equals = { arg = "who", value = "boss" } }"#,
                r#""none""#,
            )
            .gate("nuke", r#"{ paths = ["path"] }"#),
    );
    env.start_tcd();
    env
}

/// What the shim must answer a client line with: Some(code) for a rejection under id null,
/// None for anything else (a message forwarded or handled, or refused under its own id;
/// nothing to check but survival).
/// A raw `\r` inside the line refuses it whatever it holds (a downstream could split it
/// there): under the id of the request it holds, if it parses as one with a usable id.
/// A request whose id a downstream could echo as another value is refused, under id null
/// when that id is not even a string or a number. A `tools/call` with `"id": null` is
/// refused too: it can be neither answered nor gated.
fn expected(line: &[u8]) -> Option<i64> {
    let parsed = serde_json::from_slice::<Value>(line);
    if line.contains(&b'\r') {
        let own_id = parsed.as_ref().ok().is_some_and(|v| {
            v.get("method").is_some_and(Value::is_string) && v.get("id").is_some_and(usable_id)
        });
        return (!own_id).then_some(-32600);
    }
    match parsed {
        Err(_) => Some(-32700),
        Ok(v) if !v.is_object() => Some(-32600),
        // Refused whatever it holds; under its own id when it has one to answer under.
        Ok(v) if first_duplicate(line).is_some() => {
            let top_id = first_duplicate(line) == Some((0, "id".to_string()));
            let own_id =
                v.get("method").is_some_and(Value::is_string) && v.get("id").is_some_and(usable_id);
            (top_id || !own_id).then_some(-32600)
        }
        Ok(v)
            if v.get("method") == Some(&json!("tools/call"))
                && v.get("id") == Some(&Value::Null) =>
        {
            Some(-32600)
        }
        Ok(v) if v.get("method").is_some_and(Value::is_string) => match v.get("id") {
            Some(id) if !id.is_null() && !usable_id(id) && !id.is_string() && !id.is_number() => {
                Some(-32600)
            }
            _ => None,
        },
        Ok(_) => None,
    }
}

/// The first member name an object in `line` gives twice (names compared in any letter
/// case), with the depth of its object (0: the top): an oracle apart from the shim's.
fn first_duplicate(line: &[u8]) -> Option<(usize, String)> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Walk<'a>(&'a mut Option<(usize, String)>, usize);
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            while a
                .next_element_seed(Walk(&mut *self.0, self.1 + 1))?
                .is_some()
            {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = a.next_key::<String>()? {
                if !seen.insert(k.to_uppercase().to_lowercase()) && self.0.is_none() {
                    *self.0 = Some((self.1, k));
                    return Ok(()); // the shim stops at the first
                }
                a.next_value_seed(Walk(&mut *self.0, self.1 + 1))?;
            }
            Ok(())
        }
    }
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(line);
    let _ = Walk(&mut found, 0).deserialize(&mut de);
    found
}

/// An id every downstream echoes as itself: a short string, or an integer written as one
/// within ±(2^53−1).
fn usable_id(id: &Value) -> bool {
    match id {
        Value::String(s) => s.len() <= 1024,
        Value::Number(n) => n.as_i64().is_some_and(|i| i.abs() < 1 << 53),
        _ => false,
    }
}

/// Lines the echo fixture cannot take (it is a stdlib Python loop, not under test):
/// `exit`/`hang`. A line with a raw `\r` inside is refused by the shim, never forwarded.
fn safe_to_forward(line: &[u8]) -> bool {
    if line.contains(&b'\r') {
        return true;
    }
    let v: Value = serde_json::from_slice(line).unwrap();
    let method = v.get("method").and_then(Value::as_str).unwrap_or("");
    !["exit", "hang"].contains(&method)
}

/// Splits a corpus file into the lines tc-shim's reader will see.
fn frames(data: &[u8]) -> Vec<&[u8]> {
    data.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .collect()
}

#[test]
fn shim_stdin_corpus_lines_are_answered_by_name_and_the_session_goes_on() {
    let env = env();
    let mut s = start(&env);
    let (mut rejected, mut forwarded) = (0, 0);
    for (name, data) in tc_core::fuzz_corpus::read("jsonrpc_line") {
        let mut want = Vec::new();
        for line in frames(&data) {
            match expected(line) {
                Some(code) => {
                    want.push(code);
                    rejected += 1;
                }
                None if safe_to_forward(line) => forwarded += 1,
                None => continue,
            }
            s.send(line);
        }
        assert_eq!(
            rejections(&mut s, &name),
            want,
            "{name}: the rejections, in order"
        );
    }
    assert!(rejected > 100 && forwarded > 10, "{rejected} {forwarded}");
    assert!(s.child.try_wait().unwrap().is_none(), "tc-shim exited");
}

fn value(r: &mut Rng, depth: u32) -> Value {
    match r.below(if depth == 0 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => json!(r.below(2) == 0),
        2 => json!(r.next_u64() as i64),
        3 => json!(
            [
                "",
                "x",
                "\u{0}",
                "é\u{2028}",
                "../../etc/passwd",
                "/etc",
                "tc1.a.b"
            ][r.below(7)]
        ),
        4 => json!((r.next_u64() as f64) / 7.0),
        5 | 6 => {
            let keys = [
                "id",
                "name",
                "arguments",
                "path",
                "elicit_token",
                "_meta",
                "requestState",
                "k",
            ];
            let mut m = serde_json::Map::new();
            for _ in 0..r.below(4) {
                m.insert(r.pick(&keys).to_string(), value(r, depth - 1));
            }
            Value::Object(m)
        }
        _ => Value::Array((0..r.below(4)).map(|_| value(r, depth - 1)).collect()),
    }
}

/// A message object with plausible members of implausible types.
fn odd_message(r: &mut Rng) -> Vec<u8> {
    let methods = [
        "tools/call",
        "tools/list",
        "notifications/cancelled",
        "initialize",
        "server/discover",
        "resources/read",
        "ping",
        "echo",
        "tc/mint",
    ];
    let mut m = serde_json::Map::new();
    m.insert("jsonrpc".into(), json!("2.0"));
    if r.below(5) != 0 {
        m.insert("method".into(), json!(r.pick(&methods)));
    }
    if r.below(4) != 0 {
        let id = match r.below(4) {
            0 => json!(format!("odd-{}", r.next_u64())),
            1 => json!(r.next_u64() as i64),
            _ => value(r, 2),
        };
        m.insert("id".into(), id);
    }
    let mut params = value(r, 3);
    if r.below(2) == 0 {
        params = json!({
            "name": *r.pick(&["hello", "nuke", "list_capabilities", "call_capability", "missing"]),
            "arguments": value(r, 3),
        });
        if r.below(3) == 0 {
            params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": value(r, 1)});
        }
    }
    m.insert("params".into(), params);
    serde_json::to_vec(&Value::Object(m)).unwrap()
}

/// A line that is not a message: bytes, token soup, a cut or corrupted message, nesting.
fn bad_line(r: &mut Rng) -> Vec<u8> {
    let mut b = match r.below(5) {
        0 => (0..r.below(200)).map(|_| r.next_u64() as u8).collect(),
        1 => {
            let toks: [&[u8]; 14] = [
                b"{", b"}", b"[", b"]", b"\"", b":", b",", b"1", b"-", b"e", b"null", b"\\u",
                b"\xff", b" ",
            ];
            (0..r.below(60))
                .flat_map(|_| r.pick(&toks).to_vec())
                .collect()
        }
        2 => {
            let mut m = odd_message(r);
            let cut = r.below(m.len());
            m.truncate(cut);
            m
        }
        3 => {
            let mut m = odd_message(r);
            for _ in 0..1 + r.below(3) {
                let i = r.below(m.len());
                m[i] = r.next_u64() as u8;
            }
            m
        }
        _ => {
            let d = 100 + r.below(5000);
            let (o, c): (&[u8], &[u8]) =
                *r.pick(&[(&b"["[..], &b"]"[..]), (&b"{\"a\":"[..], &b"}"[..])]);
            let mut v = o.repeat(d);
            v.extend_from_slice(b"1");
            v.extend_from_slice(&c.repeat(d));
            v
        }
    };
    b.retain(|&x| x != b'\n');
    b
}

#[test]
fn shim_stdin_generated_garbage_and_odd_messages() {
    let seed: u64 = env_parse("TC_FUZZ_SEED").unwrap_or(0x7c5e_ed00_0000_0001);
    let rounds: usize = env_parse("TC_FUZZ_ROUNDS").unwrap_or(50);
    let env = env();
    let mut s = start(&env);
    let mut r = Rng::new(seed | 1);
    let (mut rejected, mut odd) = (0, 0);
    for round in 0..rounds {
        let mut want = Vec::new();
        for _ in 0..40 {
            let line = if r.below(3) == 0 {
                odd_message(&mut r)
            } else {
                bad_line(&mut r)
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let line = line.strip_suffix(b"\r").unwrap_or(&line).to_vec();
            match expected(&line) {
                Some(code) => {
                    want.push(code);
                    rejected += 1;
                }
                None if safe_to_forward(&line) => odd += 1,
                None => continue,
            }
            s.send(&line);
        }
        let what = format!("seed {seed} round {round}");
        assert_eq!(
            rejections(&mut s, &what),
            want,
            "{what}: the rejections, in order"
        );
    }
    assert!(rejected > rounds * 10 && odd > rounds, "{rejected} {odd}");
    // Still a working proxy: tools/list answers (nuke is gated, so it is shown).
    let last = s.request(json!("last"), "tools/list", json!({}));
    assert!(last["result"]["tools"].as_array().is_some(), "{last}");
    assert!(s.child.try_wait().unwrap().is_none(), "tc-shim exited");
}
