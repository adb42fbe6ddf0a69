//! Webhook targets: a JSON POST signed with HMAC-SHA256 under a shared secret, over the
//! timestamp and the exact body bytes, so a receiver can refuse forgeries and replays.
//!
//! `X-Tc-Timestamp: <unix seconds>` and `X-Tc-Signature: sha256=<hex>`, where the MAC is
//! of `<timestamp>.<body>`; the body's `delivery` (copied to `X-Tc-Delivery`) is the same
//! on every retry of one push.

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use super::{Attempt, Notice};

pub const SIGNATURE_HEADER: &str = "x-tc-signature";
pub const TIMESTAMP_HEADER: &str = "x-tc-timestamp";
pub const DELIVERY_HEADER: &str = "x-tc-delivery";

/// A webhook and its shared secret (read from `secret_file` at start).
pub struct Webhook {
    pub url: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Webhook {
    /// Never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook").field("url", &self.url).finish()
    }
}

/// `sha256=<hex>` of HMAC-SHA256(secret, "<timestamp>.<body>").
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    // new_from_slice takes a key of any length (HMAC hashes a long one).
    let mut mac = <Hmac<Sha256>>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// What the receiver gets: the request's names and link, nothing of the call itself.
pub fn body(n: &Notice) -> Vec<u8> {
    let v = json!({
        "event": "tc.request.raised",
        "request_id": n.request_id,
        "vault": n.vault,
        "tool": n.tool,
        "caller": n.caller,
        "url": n.link,
        "raised_at_ms": n.raised_at_ms,
        "expires_at_ms": n.expires_at_ms,
        // In the signed body (the header is a copy): a replay inside the receiver's
        // freshness window is told apart by it, and it cannot be changed unsigned.
        "delivery": n.delivery,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

impl Webhook {
    /// One attempt at delivering `n`, signed now (a retry carries a fresh timestamp, so
    /// a receiver's freshness window holds however long the retries took).
    pub async fn send(&self, client: &reqwest::Client, n: &Notice) -> Attempt {
        let body = body(n);
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let sig = sign(&self.secret, ts, &body);
        let req = client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(TIMESTAMP_HEADER, ts.to_string())
            .header(SIGNATURE_HEADER, sig)
            .header(DELIVERY_HEADER, &n.delivery)
            .body(body);
        Attempt::of(req.send().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_over_timestamp_and_body() {
        // From another implementation: printf '1700000000.{}' | openssl dgst -sha256 -hmac k
        let want = "sha256=c6ef4734033cee2367414a0939385eca0397754aa7a59716da7463a9298b5146";
        assert_eq!(sign(b"k", 1_700_000_000, b"{}"), want);
        assert_ne!(sign(b"k", 1_700_000_001, b"{}"), want, "the time is signed");
        assert_ne!(sign(b"k", 1_700_000_000, b"{ }"), want, "so is every byte");
    }

    #[test]
    fn the_body_names_the_request_and_nothing_of_the_call() {
        let n = Notice::sample();
        let v: serde_json::Value = serde_json::from_slice(&body(&n)).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "caller",
                "delivery",
                "event",
                "expires_at_ms",
                "raised_at_ms",
                "request_id",
                "tool",
                "url",
                "vault"
            ]
        );
        assert!(!format!(
            "{:?}",
            Webhook {
                url: "u".into(),
                secret: b"s3cr3t".to_vec()
            }
        )
        .contains("s3cr3t"));
    }
}
