//! The sealed-blob codec behind request states and cursors: a JSON payload and an
//! HMAC-SHA256 tag, base64url, under a key of the blob's own kind.
//!
//! - [`seal`] / [`open`]: encode and verify (constant-time tag check).
//! - [`Sealed`]: the payload: binding, fingerprint, expiry, nonce, opaque inner bytes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tc_core::Reason;

use crate::error::DaemonError;

/// Version prefix; anything else is `invalid`.
const PREFIX: &str = "tc1.";
/// A sealed blob larger than this is refused before any decoding work.
pub const MAX_SEALED_LEN: usize = 64 * 1024;

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
pub fn open(key: &[u8; 32], blob: &str) -> Result<Sealed, DaemonError> {
    let invalid = || {
        DaemonError::refused(
            Reason::Invalid,
            "not issued by this tcd (or tampered with, or from before a secret rotation)",
        )
    };
    if blob.len() > MAX_SEALED_LEN {
        return Err(invalid());
    }
    let rest = blob.strip_prefix(PREFIX).ok_or_else(invalid)?;
    let (payload_b64, tag_b64) = rest.split_once('.').ok_or_else(invalid)?;
    let payload = B64.decode(payload_b64).map_err(|_| invalid())?;
    let tag = B64.decode(tag_b64).map_err(|_| invalid())?;
    // `verify_slice` compares in constant time.
    mac(key, &payload)
        .verify_slice(&tag)
        .map_err(|_| invalid())?;
    serde_json::from_slice(&payload).map_err(|_| invalid())
}

/// Encodes inner bytes for [`Sealed::inner`].
pub fn encode_inner(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// Decodes [`Sealed::inner`] (authenticated already, so a failure is a bug, reported as invalid).
pub fn decode_inner(s: &str) -> Result<Vec<u8>, DaemonError> {
    B64.decode(s)
        .map_err(|_| DaemonError::refused(Reason::Invalid, "sealed payload is malformed"))
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

    fn reason(r: Result<Sealed, DaemonError>) -> Reason {
        match r {
            Err(DaemonError::Refused { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
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
        assert_eq!(reason(open(&[2u8; 32], &blob)), Reason::Invalid);
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
                assert_eq!(reason(open(&k, &s)), Reason::Invalid, "byte {i}");
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
            assert_eq!(reason(open(&k, g)), Reason::Invalid, "{g:?}");
        }
    }
}
