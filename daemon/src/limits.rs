//! Per-caller rate limits on what a model can make tcd write: a token bucket per
//! (vault, caller) in a bounded table, and the ledger's two uses of it.
//!
//! - [`Limits`]: the buckets (`[daemon] rate_limit_per_minute`, `rate_limit_burst`).
//! - [`Limits::charge`]: a Raise or a client-reported event past the rate is refused
//!   `rate_limited` and writes nothing; [`Limits::may_record`]: a refusal event past the
//!   rate is not written (the refusal itself still is what it is), only counted (the
//!   store's counters). The ledger calls both (`Ledger::charge`, `Ledger::may_record`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tc_core::Reason;

use crate::error::DaemonError;
use crate::store::Store;

/// At most this many (vault, caller) buckets are kept; past it, idle (full) buckets are
/// dropped, and if none is idle every new key shares one overflow bucket. The keys come
/// from clients of the socket (same uid), so the table must not grow with them.
pub const MAX_KEYS: usize = 1024;

/// A limit on one key is logged at most this often.
const LOG_EVERY_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
    logged_ms: Option<u64>,
}

/// Token buckets keyed by (vault, caller), refilled continuously on a monotonic clock.
pub struct Limits {
    per_ms: f64,
    burst: f64,
    per_minute: u32,
    start: Instant,
    table: Mutex<Table>,
}

struct Table {
    buckets: HashMap<(String, String), Bucket>,
    overflow: Bucket,
}

/// A refused take: when a token will be back, and whether to log this one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limited {
    pub retry_after_ms: u64,
    pub log: bool,
}

impl Bucket {
    fn full(burst: f64, now: u64) -> Bucket {
        Bucket {
            tokens: burst,
            at_ms: now,
            logged_ms: None,
        }
    }

    fn refill(&mut self, per_ms: f64, burst: f64, now: u64) {
        let dt = now.saturating_sub(self.at_ms) as f64;
        self.tokens = (self.tokens + dt * per_ms).min(burst);
        self.at_ms = now.max(self.at_ms);
    }

    fn take(&mut self, per_ms: f64, burst: f64, now: u64) -> Result<(), Limited> {
        self.refill(per_ms, burst, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let log = self
            .logged_ms
            .is_none_or(|t| now.saturating_sub(t) >= LOG_EVERY_MS);
        if log {
            self.logged_ms = Some(now);
        }
        Err(Limited {
            retry_after_ms: ((1.0 - self.tokens) / per_ms).ceil() as u64,
            log,
        })
    }
}

impl Limits {
    /// `per_minute` sustained, `burst` at once (both at least 1; config validation).
    pub fn new(per_minute: u32, burst: u32) -> Limits {
        let burst = f64::from(burst.max(1));
        Limits {
            per_ms: f64::from(per_minute.max(1)) / 60_000.0,
            burst,
            per_minute: per_minute.max(1),
            start: Instant::now(),
            table: Mutex::new(Table {
                buckets: HashMap::new(),
                overflow: Bucket::full(burst, 0),
            }),
        }
    }

    /// The configured limits, for messages.
    pub fn describe(&self) -> String {
        format!(
            "at most {} a minute, {} at once",
            self.per_minute, self.burst as u64
        )
    }

    /// Takes one token from the bucket of (vault, caller), now.
    pub fn take(&self, vault: &str, caller: &str) -> Result<(), Limited> {
        let now = self.start.elapsed().as_millis() as u64;
        self.take_at(vault, caller, now)
    }

    /// [`Limits::take`] at `now_ms` on the limiter's own clock (tests inject it).
    pub fn take_at(&self, vault: &str, caller: &str, now_ms: u64) -> Result<(), Limited> {
        let (per_ms, burst) = (self.per_ms, self.burst);
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let key = (vault.to_string(), caller.to_string());
        if !t.buckets.contains_key(&key) && t.buckets.len() >= MAX_KEYS {
            // Forget buckets that have refilled: they hold no debt.
            t.buckets.retain(|_, b| {
                b.refill(per_ms, burst, now_ms);
                b.tokens < burst
            });
            if t.buckets.len() >= MAX_KEYS {
                return t.overflow.take(per_ms, burst, now_ms);
            }
        }
        t.buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(burst, now_ms))
            .take(per_ms, burst, now_ms)
    }

    /// How many keys have a bucket (tests).
    pub fn keys(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .buckets
            .len()
    }
}

/// A label value for the metrics text: quotes, backslashes and control characters
/// escaped, at most 64 characters (vault and caller come from socket clients).
fn label(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars().take(64) {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

impl Limits {
    /// Charges one model-causable write to (vault, caller); past the rate it is refused
    /// `rate_limited`, counted (`tc_rate_limited_total`) and, once in a while, logged.
    pub fn charge(&self, store: &Store, vault: &str, caller: &str) -> Result<(), DaemonError> {
        let Err(l) = self.take(vault, caller) else {
            return Ok(());
        };
        self.limited(store, vault, caller, l, "refusing its requests");
        Err(DaemonError::refused(
            Reason::RateLimited,
            format!(
                "too many confirmation requests and refusals from caller {caller:?} in vault {vault:?} \
                 ({}); nothing was recorded; retry in {} s",
                self.describe(),
                l.retry_after_ms.div_ceil(1000)
            ),
        ))
    }

    /// Whether a refusal event of `kind` for (vault, caller) may be written: past the rate
    /// it is dropped and counted (`tc_events_dropped_total`) instead.
    pub fn may_record(&self, store: &Store, vault: &str, caller: &str, kind: &str) -> bool {
        let Err(l) = self.take(vault, caller) else {
            return true;
        };
        self.limited(store, vault, caller, l, "not recording its refusal events");
        store.bump(
            (
                "tc_events_dropped_total".into(),
                format!("kind=\"{}\"", label(kind)),
            ),
            1,
        );
        false
    }

    fn limited(&self, store: &Store, vault: &str, caller: &str, l: Limited, what: &str) {
        // Only keys that have a bucket of their own get their own series (bounded).
        let labels = if self.keys() < MAX_KEYS {
            format!("vault=\"{}\",caller=\"{}\"", label(vault), label(caller))
        } else {
            "vault=\"*\",caller=\"*\"".into()
        };
        store.bump(("tc_rate_limited_total".into(), labels), 1);
        if l.log {
            tracing::warn!(
                vault = %label(vault),
                caller = %label(caller),
                limit = %self.describe(),
                "rate limit reached: {what} for about {} s",
                l.retry_after_ms.div_ceil(1000)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full bucket gives `burst` at once, then one per 60/rate seconds; the refusal says
    /// when the next token is due; other keys are not affected.
    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let l = Limits::new(60, 3);
        for _ in 0..3 {
            l.take_at("v", "c", 0).unwrap();
        }
        let e = l.take_at("v", "c", 0).unwrap_err();
        assert_eq!(e.retry_after_ms, 1000);
        assert!(e.log);
        // Logged once per LOG_EVERY_MS, whatever the flood.
        assert!(!l.take_at("v", "c", 10).unwrap_err().log);
        l.take_at("other", "c", 0).unwrap();
        l.take_at("v", "other", 0).unwrap();
        let retry = l.take_at("v", "c", 500).unwrap_err().retry_after_ms;
        assert!((500..=501).contains(&retry), "{retry}");
        l.take_at("v", "c", 1000).unwrap();
        assert!(l.take_at("v", "c", 1000).is_err());
        // Refill stops at the burst, however long the pause.
        let later = 3_600_000;
        for _ in 0..3 {
            l.take_at("v", "c", later).unwrap();
        }
        // Logged again: the last log line is more than LOG_EVERY_MS old.
        assert!(l.take_at("v", "c", later).unwrap_err().log);
    }

    /// A flood of thousands a second gets at most burst + rate·t through.
    #[test]
    fn a_flood_gets_only_the_burst_and_the_refill() {
        let l = Limits::new(60, 120);
        let mut ok = 0;
        for i in 0..10_000u64 {
            // 10 000 calls over 2 s.
            if l.take_at("v", "stdio", i / 5).is_ok() {
                ok += 1;
            }
        }
        assert!((120..=123).contains(&ok), "{ok}");
    }

    /// The table never holds more than MAX_KEYS buckets: idle ones are dropped; with none
    /// idle, new keys share the overflow bucket (so they cannot mint fresh bursts).
    #[test]
    fn the_table_is_bounded() {
        let l = Limits::new(60, 2);
        for i in 0..MAX_KEYS {
            l.take_at(&i.to_string(), "c", 0).unwrap();
        }
        assert_eq!(l.keys(), MAX_KEYS);
        l.take_at("new-1", "c", 0).unwrap();
        l.take_at("new-2", "c", 0).unwrap();
        assert!(
            l.take_at("new-3", "c", 0).is_err(),
            "shared overflow bucket"
        );
        assert_eq!(l.keys(), MAX_KEYS);
        // Two seconds later every bucket refilled: idle ones go, the new key gets its own.
        l.take_at("new-4", "c", 2000).unwrap();
        assert_eq!(l.keys(), 1);
    }

    #[test]
    fn labels_are_escaped_and_clipped() {
        assert_eq!(label("a\"b\\c\nd\u{1b}"), "a\\\"b\\\\c\\nd\\u{1b}");
        assert_eq!(label(&"x".repeat(100)).len(), 64);
    }
}
