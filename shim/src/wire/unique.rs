//! The parse of a client line: a `serde_json::Value` built as serde_json builds it, except
//! that an object naming a member twice is refused instead of keeping the last one.
//!
//! Which duplicate a server acts on is its JSON parser's choice (the last for serde_json,
//! Python and Node, the first for others), so a message that names `name`, `method` or a
//! path twice could be judged on one value and run on another. Clients never need it.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::collections::HashSet;
use std::fmt;

/// What went wrong: the text is not JSON, or it is JSON naming a member twice.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Syntax(serde_json::Error),
    #[error(
        "a JSON object names the member {:?} twice{} (at column {}); which one a server \
         acts on depends on its parser, so tc-shim does not forward such a message",
        .0.name, if .0.case { " (in another letter case: some parsers match names so)" } else { "" },
        .0.column
    )]
    Duplicate(Dup),
}

impl Error {
    /// The message's own `id` is the name given twice: it has no one id to be answered
    /// under.
    pub fn is_top_level_id(&self) -> bool {
        matches!(self, Error::Duplicate(d) if d.top && d.name == "id")
    }
}

/// The first member name found twice, where.
#[derive(Debug)]
pub struct Dup {
    pub name: String,
    pub column: usize,
    /// In the top-level object (not nested).
    pub top: bool,
    /// The two spellings differ in letter case only.
    pub case: bool,
}

/// Parses `bytes` as one JSON value, refusing any object with a duplicate member name.
pub fn from_slice(bytes: &[u8]) -> Result<Value, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut dup = None;
    let parsed = Unique {
        dup: &mut dup,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (parsed, dup) {
        (Err(e), Some((name, depth, case))) => Err(Error::Duplicate(Dup {
            name,
            column: e.column(),
            top: depth == 0,
            case,
        })),
        (Err(e), None) => Err(Error::Syntax(e)),
        (Ok(v), _) => Ok(v),
    }
}

/// The seed carrying where to put the first duplicate name found and how deep the value
/// being read is (0: the top; the error serde hands back only has text).
struct Unique<'a> {
    dup: &'a mut Option<(String, usize, bool)>,
    depth: usize,
}

impl Unique<'_> {
    fn inner(&mut self, nested: usize) -> Unique<'_> {
        Unique {
            dup: &mut *self.dup,
            depth: nested,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        // JSON text cannot spell a non-finite number; serde_json maps one to null too.
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut me = self;
        let depth = me.depth + 1;
        while let Some(v) = seq.next_element_seed(me.inner(depth))? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut me = self;
        let depth = me.depth;
        let mut m = Map::new();
        let mut folded = Folded::default();
        while let Some(k) = map.next_key::<String>()? {
            let same = m.contains_key(&k);
            if same || folded.clashes(&m, &k) {
                let e = de::Error::custom(format_args!("duplicate member {k:?}"));
                *me.dup = Some((k, depth, !same));
                return Err(e);
            }
            let v = map.next_value_seed(me.inner(depth + 1))?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

/// An object's names as a case-insensitive parser matches them (Go's `encoding/json`
/// matches struct fields so, `K` (Kelvin) and `ſ` included): kept only once some name is
/// not plain lowercase ASCII, so the common message pays nothing.
#[derive(Default)]
struct Folded(Option<HashSet<String>>);

impl Folded {
    /// Whether `k` folds to the fold of a name already in `m`.
    fn clashes(&mut self, m: &Map<String, Value>, k: &str) -> bool {
        let set = match &mut self.0 {
            Some(set) => set,
            None if plain(k) => return false,
            None => self.0.insert(m.keys().map(|n| fold(n)).collect()),
        };
        !set.insert(fold(k))
    }
}

fn plain(k: &str) -> bool {
    k.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase())
}

/// Upper then lower: `ſ` → `S` → `s`, `K` (Kelvin) → `k`; folds more than Go's simple
/// folding does (`ß` → `ss`), which only refuses more.
fn fold(k: &str) -> String {
    if plain(k) {
        return k.to_owned();
    }
    // Twice: `ẞ` → `ß` → `SS` → `ss`, as `ß` (review4 finding 2).
    let once = k.to_uppercase().to_lowercase();
    once.to_uppercase().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_as_serde_json(text: &str) {
        let ours = from_slice(text.as_bytes()).unwrap();
        let theirs: Value = serde_json::from_str(text).unwrap();
        assert_eq!(ours, theirs, "{text}");
    }

    #[test]
    fn builds_the_value_serde_json_builds() {
        for t in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,-2,3.5,1e300,null,true,"s\u00e9"]}}}"#,
            r#"[]"#,
            r#"  {"a":{"b":{"c":{}}}}  "#,
            r#"18446744073709551615"#,
            r#"-9223372036854775808"#,
            r#""\ud83d\ude00""#,
            r#"{"a":1,"b":2,"a\u0000":3}"#,
        ] {
            same_as_serde_json(t);
        }
    }

    #[test]
    fn refuses_a_member_named_twice_at_any_depth() {
        for (t, name) in [
            (r#"{"method":"ping","method":"tools/call"}"#, "method"),
            (r#"{"params":{"name":"a","name":"b"}}"#, "name"),
            (r#"{"p":[{"x":{"path":"/a","path":"/b"}}]}"#, "path"),
            // The same name spelled with an escape is the same name.
            (r#"{"name":"a","n\u0061me":"b"}"#, "name"),
        ] {
            assert!(matches!(from_slice(t.as_bytes()), Err(Error::Duplicate(d)) if !d.case));
            match from_slice(t.as_bytes()) {
                Err(Error::Duplicate(d)) => {
                    assert_eq!(d.name, name, "{t}");
                    assert!(d.column > 0, "{t}");
                    assert_eq!(
                        d.top,
                        t.starts_with(r#"{"method""#) || t.starts_with(r#"{"name""#)
                    );
                }
                other => panic!("{t}: {other:?}"),
            }
        }
    }

    #[test]
    fn refuses_names_equal_in_another_letter_case() {
        for (t, second) in [
            (r#"{"a":{"path":"x","Path":"y"}}"#, "Path"),
            (r#"{"a":{"PATH":"x","path":"y"}}"#, "path"),
            (r#"{"a":{"k":1,"\u212a":2}}"#, "\u{212a}"),
            (r#"{"a":{"\u017fize":1,"SIZE":2}}"#, "SIZE"),
            (r#"{"a":{"x":1,"Straße":1,"STRASSE":2}}"#, "STRASSE"),
        ] {
            match from_slice(t.as_bytes()) {
                Err(Error::Duplicate(d)) => {
                    assert!(d.case && !d.top, "{t}");
                    assert_eq!(d.name, second, "{t}");
                }
                other => panic!("{t}: {other:?}"),
            }
        }
        // Names that differ otherwise are not folded together.
        same_as_serde_json(r#"{"path":1,"paths":2,"Pat":3,"é":4,"É2":5,"_":6}"#);
    }

    /// review4 finding 2: `ß` and `ẞ` (U+1E9E) are one name to Go's `encoding/json` (its
    /// fold maps every rune of a case orbit to the smallest, U+00DF) and to Java's
    /// `toLowerCase` (Jackson's case-insensitive properties): `fold` maps `ß` to `ss` but
    /// `ẞ` to `ß`, so the two are not found equal.
    #[test]
    fn sharp_s_and_capital_sharp_s_are_one_name() {
        let t = "{\"a\":{\"stra\u{df}e\":\"x\",\"stra\u{1e9e}e\":\"y\"}}";
        assert!(
            matches!(from_slice(t.as_bytes()), Err(Error::Duplicate(d)) if d.case),
            "{t}"
        );
    }

    #[test]
    fn only_a_top_level_id_named_twice_leaves_no_id_to_answer() {
        let top = from_slice(br#"{"id":1,"method":"x","id":2}"#).unwrap_err();
        assert!(top.is_top_level_id());
        let nested = from_slice(br#"{"id":1,"params":{"id":1,"id":2}}"#).unwrap_err();
        assert!(matches!(&nested, Error::Duplicate(d) if d.name == "id" && !d.top));
        assert!(!nested.is_top_level_id());
        let in_array = from_slice(br#"[{"id":1,"id":2}]"#).unwrap_err();
        assert!(!in_array.is_top_level_id());
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        for t in [
            &b"{"[..],
            b"{\"a\":1,}",
            b"[1 2]",
            b"{} {}",
            b"\"\xff\"",
            b"1e400",
        ] {
            let theirs = serde_json::from_slice::<Value>(t).is_err();
            match from_slice(t) {
                Err(Error::Syntax(_)) => assert!(theirs, "{t:?}"),
                other => panic!("{t:?}: {other:?}"),
            }
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(matches!(from_slice(deep.as_bytes()), Err(Error::Syntax(_))));
    }
}
