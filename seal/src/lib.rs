//! The sealed-blob codec behind request states and cursors: a JSON payload and an
//! HMAC-SHA256 tag, base64url, under a key of the blob's own kind.
//!
//! - [`seal`] / [`open`]: encode and verify (constant-time tag check, `subtle::ct_eq`).
//! - [`Sealed`]: the payload: binding, fingerprint, expiry, nonce, opaque inner bytes.
//!
//! Its own crate so that `fuzz/` links the codec without the daemon's tree (SQLite, tonic);
//! the daemon turns its errors into `invalid` refusals (`daemon/src/error.rs`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Version prefix; anything else is `invalid`.
pub const PREFIX: &str = "tc1.";
/// A sealed blob larger than this is refused before any decoding work.
pub use tc_core::MAX_SEALED_LEN;

/// Why a blob does not open; both are refused as `invalid`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SealError {
    /// Garbage, tampering and "sealed under another key" look the same, on purpose.
    #[error("not issued by this tcd (or tampered with, or from before a secret rotation)")]
    NotIssued,
    /// Authenticated inner bytes that do not decode: a bug.
    #[error("sealed payload is malformed")]
    Malformed,
}

/// What a request state or cursor carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sealed {
    /// Random; the consumed-state store keys on it.
    pub nonce: String,
    pub expires_at_ms: i64,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
    #[serde(default)]
    pub state_fp: String,
    /// base64url of caller-supplied bytes (a downstream's own requestState, a page position).
    #[serde(default)]
    pub inner: String,
}

fn mac(key: &[u8; 32], payload: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(payload);
    m
}

/// Seals `s` under `key`.
pub fn seal(key: &[u8; 32], s: &Sealed) -> String {
    let payload = serde_json::to_vec(s).expect("Sealed serializes");
    let tag = mac(key, &payload).finalize().into_bytes();
    format!("{PREFIX}{}.{}", B64.encode(&payload), B64.encode(tag))
}

/// Verifies and decodes a sealed blob. Every failure to authenticate is `invalid`:
/// garbage, tampering and "sealed under another key" look the same, on purpose.
pub fn open(key: &[u8; 32], blob: &str) -> Result<Sealed, SealError> {
    let invalid = || SealError::NotIssued;
    if blob.len() > MAX_SEALED_LEN {
        return Err(invalid());
    }
    let rest = blob.strip_prefix(PREFIX).ok_or_else(invalid)?;
    let (payload_b64, tag_b64) = rest.split_once('.').ok_or_else(invalid)?;
    let payload = B64.decode(payload_b64).map_err(|_| invalid())?;
    let tag = B64.decode(tag_b64).map_err(|_| invalid())?;
    let want = mac(key, &payload).finalize().into_bytes();
    if !tag_matches(&want, &tag) {
        return Err(invalid());
    }
    serde_json::from_slice(&payload).map_err(|_| invalid())
}

/// The one comparison of a presented tag with the expected one: constant time
/// (`subtle`), so response timing cannot reveal how many leading bytes were right.
/// A length mismatch is not secret and fails at once.
fn tag_matches(want: &[u8], got: &[u8]) -> bool {
    want.ct_eq(got).into()
}

/// Encodes inner bytes for [`Sealed::inner`].
pub fn encode_inner(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// Decodes [`Sealed::inner`] (authenticated already, so a failure is a bug, reported as invalid).
pub fn decode_inner(s: &str) -> Result<Vec<u8>, SealError> {
    B64.decode(s).map_err(|_| SealError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sealed {
        Sealed {
            nonce: "n".into(),
            expires_at_ms: 5,
            vault: "v".into(),
            tool: "t".into(),
            caller: "stdio".into(),
            args_hash: "h".into(),
            state_fp: "fp".into(),
            inner: encode_inner(b"\x00\x01inner"),
        }
    }

    /// Why a blob did not open (the daemon refuses every [`SealError`] as `invalid`:
    /// `daemon/src/error.rs`, tested there).
    fn refusal(r: Result<Sealed, SealError>) -> SealError {
        r.expect_err("expected a refusal")
    }

    #[test]
    fn round_trips_under_the_same_key_only() {
        let k1 = [1u8; 32];
        let blob = seal(&k1, &sample());
        assert_eq!(open(&k1, &blob).unwrap(), sample());
        assert_eq!(
            decode_inner(&open(&k1, &blob).unwrap().inner).unwrap(),
            b"\x00\x01inner"
        );
        assert_eq!(refusal(open(&[2u8; 32], &blob)), SealError::NotIssued);
    }

    #[test]
    fn every_single_byte_change_is_invalid() {
        let k = [7u8; 32];
        let blob = seal(&k, &sample());
        for i in 0..blob.len() {
            let mut b = blob.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let Ok(s) = String::from_utf8(b) else {
                continue;
            };
            if s != blob {
                assert_eq!(refusal(open(&k, &s)), SealError::NotIssued, "byte {i}");
            }
        }
    }

    #[test]
    fn garbage_is_invalid_not_a_panic() {
        let k = [0u8; 32];
        for g in [
            "",
            "tc1.",
            "tc1..",
            "tc1.!!!.???",
            "x.y",
            &"a".repeat(MAX_SEALED_LEN + 1),
        ] {
            assert_eq!(refusal(open(&k, g)), SealError::NotIssued, "{g:?}");
        }
    }
}

/// Property tests and the replay of `fuzz/corpus/sealed/` (made by `fuzz/gen_corpus.py`):
/// whatever string a client presents, `open` answers a payload or a refusal with a
/// [`SealError`] (which the daemon refuses as `invalid`), never a panic, and never accepts a changed blob.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use tc_core::fuzz_corpus::proptest_config as config;

    /// The key the corpus's valid and `macd-*` blobs are sealed under.
    const CORPUS_KEY: [u8; 32] = [0x42; 32];

    /// Why a blob did not open, if it did not.
    fn refusal(r: &Result<Sealed, SealError>) -> Option<SealError> {
        r.as_ref().err().cloned()
    }

    fn sealed() -> impl Strategy<Value = Sealed> {
        (
            ".{0,20}",
            any::<i64>(),
            prop::collection::vec(".{0,16}", 4),
            ".{0,70}",
            prop::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(nonce, expires_at_ms, f, state_fp, inner)| Sealed {
                nonce,
                expires_at_ms,
                vault: f[0].clone(),
                tool: f[1].clone(),
                caller: f[2].clone(),
                args_hash: f[3].clone(),
                state_fp,
                inner: encode_inner(&inner),
            })
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn round_trip(s in sealed(), key in any::<[u8; 32]>()) {
            let blob = seal(&key, &s);
            prop_assert!(blob.len() <= MAX_SEALED_LEN);
            prop_assert_eq!(open(&key, &blob).unwrap(), s);
        }

        #[test]
        fn any_change_is_invalid(
            s in sealed(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let key = [9u8; 32];
            let blob = seal(&key, &s);
            let mut chars: Vec<char> = blob.chars().collect();
            for (i, c) in edits {
                let i = i.index(chars.len());
                chars[i] = c;
            }
            chars.truncate(cut.index(chars.len() + 1).max(1));
            let changed: String = chars.into_iter().collect();
            if changed != blob {
                prop_assert_eq!(refusal(&open(&key, &changed)), Some(SealError::NotIssued), "{}", changed);
            }
        }

        #[test]
        fn any_string_is_a_payload_or_invalid(g in ".{0,200}", dotted in any::<bool>()) {
            let g = if dotted { format!("{PREFIX}{g}") } else { g };
            let r = open(&CORPUS_KEY, &g);
            prop_assert!(r.is_ok() || refusal(&r).is_some());
        }

        /// Authentic tags over arbitrary payloads: serde decides, never a panic.
        #[test]
        fn macd_arbitrary_payloads(payload in prop::collection::vec(any::<u8>(), 0..300)) {
            let tag = mac(&CORPUS_KEY, &payload).finalize().into_bytes();
            let blob = format!("{PREFIX}{}.{}", B64.encode(&payload), B64.encode(tag));
            let r = open(&CORPUS_KEY, &blob);
            prop_assert_eq!(r.is_ok(), serde_json::from_slice::<Sealed>(&payload).is_ok());
            prop_assert!(r.is_ok() || refusal(&r).is_some());
        }
    }

    #[test]
    fn tags_compare_in_constant_time_and_by_length() {
        let t = [5u8; 32];
        assert!(tag_matches(&t, &t));
        let mut u = t;
        u[31] ^= 1;
        assert!(!tag_matches(&t, &u));
        assert!(!tag_matches(&t, &t[..31]));
        assert!(!tag_matches(&t, &[]));
    }

    #[test]
    fn corpus_sealed() {
        let mut wrong = Vec::new();
        for (name, bytes) in tc_core::fuzz_corpus::read("sealed") {
            // Clients send a protobuf string: always UTF-8 by the time it reaches `open`.
            let text = String::from_utf8_lossy(&bytes);
            let outcome = std::panic::catch_unwind(|| match open(&CORPUS_KEY, &text) {
                Ok(_) => "opened",
                // Every refusal is `invalid` to the daemon (`daemon/src/error.rs`).
                Err(SealError::NotIssued) => "invalid",
                Err(SealError::Malformed) => "malformed",
            });
            let want_ok = name.starts_with("valid-") || name.starts_with("macd-ok-");
            match outcome {
                Ok("opened") if want_ok => {}
                Ok("invalid") if !want_ok => {}
                other => wrong.push(format!("{name}: {other:?}")),
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
