//! Request ids: matched by JSON value (a number by its value, whatever its spelling),
//! refused when a downstream could not echo them faithfully, kept in bounded tables.
//!
//! Every place the shim matches an answer to a request (pending, held, wakers, the
//! governor) keys it with [`IdKey`], so `3`, `3.0` and `3e0` are one id; a client request
//! whose id a JavaScript or Python server would echo differently is refused up front
//! ([`check_request_id`]), so no answer can slip past its entry.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The largest integer every JSON reader keeps exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INT: i64 = (1 << 53) - 1;

/// A string id longer than this is refused: tables hold ids, and they must stay small.
pub const MAX_ID_BYTES: usize = 1024;

/// At most this many client requests are in flight at once (forwarded and held).
pub const MAX_IN_FLIGHT: usize = 4096;

/// A forwarded request the downstream has not answered for this long may be dropped
/// (its caller answered with an error) to make room when the table is full.
pub const STALE_AFTER: Duration = Duration::from_secs(10 * 60);

/// An id as matched: numbers by value, strings by content. `Other` holds what no
/// accepted request can carry (a fraction, an unsafe integer, a bool, ...): it never
/// matches a tracked request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IdKey {
    Num(i64),
    Str(Box<str>),
    Other(Box<str>),
}

impl IdKey {
    /// The key of any JSON value used as an id.
    pub fn of(id: &Value) -> IdKey {
        match id {
            Value::String(s) => IdKey::Str(s.as_str().into()),
            Value::Number(n) => match safe_int(n) {
                Some(i) => IdKey::Num(i),
                None => IdKey::Other(n.to_string().into()),
            },
            other => IdKey::Other(other.to_string().into()),
        }
    }

    /// The id as a JSON value (exact for every id a request may carry).
    pub fn to_value(&self) -> Value {
        match self {
            IdKey::Num(i) => Value::from(*i),
            IdKey::Str(s) => Value::from(&**s),
            IdKey::Other(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        }
    }
}

/// A number equal to a safe integer, by value (`3.0` and `-0.0` included).
fn safe_int(n: &serde_json::Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return (i.abs() <= MAX_SAFE_INT).then_some(i);
    }
    let f = n.as_f64()?;
    (f.fract() == 0.0 && f.abs() <= MAX_SAFE_INT as f64).then_some(f as i64)
}

/// Whether a client (or server) request may carry this id: a string of at most
/// [`MAX_ID_BYTES`], or an integer written as one (no fraction, no exponent, not `-0`)
/// within ±(2^53−1). Anything else a downstream may echo as another value (`3.0` as
/// `3`, a big integer rounded), and its answer would then match no entry.
pub fn check_request_id(id: &Value) -> Result<(), BadId> {
    match id {
        Value::String(s) if s.len() <= MAX_ID_BYTES => Ok(()),
        Value::String(s) => Err(BadId::LongString(s.len())),
        Value::Number(n) if n.as_i64().is_some_and(|i| i.abs() <= MAX_SAFE_INT) => Ok(()),
        Value::Number(n) => Err(BadId::Number(n.to_string())),
        _ => Err(BadId::Kind),
    }
}

/// Why a request id is refused (see [`check_request_id`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadId {
    #[error("request id of {0} bytes: tc-shim accepts string ids of at most {MAX_ID_BYTES} bytes")]
    LongString(usize),
    #[error(
        "request id {0} refused: a numeric id must be an integer written without fraction or \
         exponent, between -{MAX_SAFE_INT} and {MAX_SAFE_INT} (a downstream could echo it as \
         another number); use a string or such an integer"
    )]
    Number(String),
    #[error("a request id must be a string or an integer")]
    Kind,
}

/// The id to answer a refused request with: its own when it is a string or a number
/// (the client can match it), else null.
pub fn answer_id(id: &Value) -> Value {
    match id {
        Value::String(_) | Value::Number(_) => id.clone(),
        _ => Value::Null,
    }
}

/// Removes `k` from a table of requests; an emptied table gives its buckets back, since
/// an idle conversation of the HTTP front would otherwise keep room for every request it
/// once had in flight.
pub fn take<K, Q, V>(map: &mut HashMap<K, V>, k: &Q) -> Option<V>
where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    let v = map.remove(k);
    if map.is_empty() && map.capacity() > 0 {
        *map = HashMap::new();
    }
    v
}

/// A table of requests in flight by [`IdKey`], each stamped with when it was added.
#[derive(Debug)]
pub struct IdTable<V> {
    map: HashMap<IdKey, (Instant, V)>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            map: HashMap::new(),
        }
    }
}

impl<V> IdTable<V> {
    pub fn insert(&mut self, k: IdKey, v: V) -> Option<V> {
        self.insert_at(k, v, Instant::now())
    }

    fn insert_at(&mut self, k: IdKey, v: V, now: Instant) -> Option<V> {
        self.map.insert(k, (now, v)).map(|(_, v)| v)
    }

    pub fn get(&self, k: &IdKey) -> Option<&V> {
        self.map.get(k).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, k: &IdKey) -> Option<&mut V> {
        self.map.get_mut(k).map(|(_, v)| v)
    }

    pub fn remove(&mut self, k: &IdKey) -> Option<V> {
        take(&mut self.map, k).map(|(_, v)| v)
    }

    pub fn contains_key(&self, k: &IdKey) -> bool {
        self.map.contains_key(k)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &IdKey> {
        self.map.keys()
    }

    /// Removes and returns the entries added at least `age` before `now`.
    pub fn take_older(&mut self, age: Duration, now: Instant) -> Vec<(IdKey, V)> {
        let old: Vec<IdKey> = self
            .map
            .iter()
            .filter(|(_, (t, _))| now.saturating_duration_since(*t) >= age)
            .map(|(k, _)| k.clone())
            .collect();
        old.into_iter()
            .filter_map(|k| take(&mut self.map, &k).map(|(_, v)| (k, v)))
            .collect()
    }
}

impl<V> IntoIterator for IdTable<V> {
    type Item = (IdKey, V);
    type IntoIter = std::iter::Map<
        std::collections::hash_map::IntoIter<IdKey, (Instant, V)>,
        fn((IdKey, (Instant, V))) -> (IdKey, V),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.map.into_iter().map(|(k, (_, v))| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_are_keyed_by_value_strings_by_content() {
        let three = IdKey::of(&json!(3));
        for same in ["3.0", "3e0", "0.3e1", "3.000"] {
            let v: Value = serde_json::from_str(same).unwrap();
            assert_eq!(IdKey::of(&v), three, "{same}");
        }
        let zero = IdKey::of(&json!(0));
        for same in ["-0", "-0.0", "0.0", "0e5"] {
            let v: Value = serde_json::from_str(same).unwrap();
            assert_eq!(IdKey::of(&v), zero, "{same}");
        }
        assert_ne!(IdKey::of(&json!("3")), three);
        assert_ne!(IdKey::of(&json!(3.5)), three);
        // Past 2^53 numbers are not keyed as integers: a reader may have rounded them.
        let big: Value = serde_json::from_str("9007199254740993").unwrap();
        assert!(matches!(IdKey::of(&big), IdKey::Other(_)));
        assert!(matches!(IdKey::of(&json!(true)), IdKey::Other(_)));
        assert!(matches!(IdKey::of(&json!([1])), IdKey::Other(_)));
        for v in [
            json!(7),
            json!(-7),
            json!("x\u{2028}y"),
            json!(MAX_SAFE_INT),
        ] {
            assert_eq!(IdKey::of(&v).to_value(), v);
        }
    }

    #[test]
    fn request_ids_must_echo_faithfully() {
        for ok in [
            "1",
            "-1",
            "0",
            "9007199254740991",
            "-9007199254740991",
            "\"a\"",
        ] {
            let v: Value = serde_json::from_str(ok).unwrap();
            assert!(check_request_id(&v).is_ok(), "{ok}");
        }
        for bad in [
            "3.0",
            "1e2",
            "-0.0",
            "-0",
            "0.5",
            "9007199254740992",
            "-9007199254740992",
            "18446744073709551615",
            "true",
            "[1]",
            "{\"a\":1}",
            "null",
        ] {
            let v: Value = serde_json::from_str(bad).unwrap();
            assert!(check_request_id(&v).is_err(), "{bad}");
        }
        assert!(check_request_id(&json!("x".repeat(MAX_ID_BYTES))).is_ok());
        assert!(check_request_id(&json!("x".repeat(MAX_ID_BYTES + 1))).is_err());
        assert_eq!(answer_id(&json!(3.0)), json!(3.0));
        assert_eq!(answer_id(&json!({"a": 1})), Value::Null);
    }

    #[test]
    fn old_entries_are_taken_by_age() {
        let mut t = IdTable::default();
        let t0 = Instant::now();
        t.insert_at(IdKey::of(&json!(1)), "a", t0);
        t.insert_at(IdKey::of(&json!("b")), "b", t0 + Duration::from_secs(60));
        assert!(t
            .take_older(STALE_AFTER, t0 + Duration::from_secs(59))
            .is_empty());
        let old = t.take_older(STALE_AFTER, t0 + STALE_AFTER);
        assert_eq!(old, vec![(IdKey::Num(1), "a")]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&IdKey::of(&json!("b"))), Some(&"b"));
        let rest: Vec<_> = t.into_iter().collect();
        assert_eq!(rest, vec![(IdKey::Str("b".into()), "b")]);
    }

    #[test]
    fn an_emptied_table_keeps_no_buckets() {
        let mut t = IdTable::default();
        t.insert(IdKey::of(&json!(1)), "a");
        t.insert(IdKey::of(&json!(2)), "b");
        assert_eq!(t.remove(&IdKey::of(&json!(1))), Some("a"));
        assert!(t.map.capacity() > 0, "a table in use keeps its buckets");
        assert_eq!(t.remove(&IdKey::of(&json!(2))), Some("b"));
        assert_eq!(t.map.capacity(), 0);
        assert_eq!(t.remove(&IdKey::of(&json!(2))), None);
    }
}
