//! Bearer tokens for HTTP callers (`[vaults.http.auth] mode = "jwt"` without keys): HS256
//! JWTs under the secret's `bearer` key, `iss` "tcd", signed and checked by `jsonwebtoken`.
//!
//! Only the exact header tcd writes is accepted, so nothing else a token's header says
//! (`alg`, `kid`, `jku`, `crit`…) is ever interpreted.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};
use serde::{Deserialize, Serialize};
use tc_core::config::{check_caller, scope_ok, TCD_TOKEN_ISSUER};
use tc_core::Reason;

use crate::error::DaemonError;

/// The one header tcd mints and accepts.
const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;
/// `ttl_seconds = 0` means this.
pub const DEFAULT_TTL_SECONDS: u64 = 3600;
/// Longest lifetime a token may be minted with.
pub const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// Longest token and audience looked at.
const MAX_TOKEN_LEN: usize = 8 * 1024;
const MAX_AUDIENCE_LEN: usize = 512;
const MAX_SCOPES: usize = 32;

/// A token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: String,
    pub iat: i64,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
    /// Random: two tokens minted in the same second differ.
    pub jti: String,
}

impl Claims {
    /// The scopes, split.
    pub fn scopes(&self) -> Vec<String> {
        self.scope
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

fn bad(msg: impl Into<String>) -> DaemonError {
    DaemonError::refused(Reason::BadArgument, msg)
}

fn check_audience(aud: &str) -> Result<(), DaemonError> {
    if aud.is_empty() || aud.len() > MAX_AUDIENCE_LEN || aud.chars().any(char::is_control) {
        return Err(bad(
            "audience must be 1 to 512 characters, no control characters (the vault's [vaults.http.auth] audience)",
        ));
    }
    Ok(())
}

/// A token for `sub`, valid `ttl_seconds` (0: an hour) from `now_s`, for `audience`.
pub fn mint(
    key: &[u8; 32],
    sub: &str,
    ttl_seconds: u64,
    audience: &str,
    scopes: &[String],
    now_s: i64,
) -> Result<(String, Claims), DaemonError> {
    check_caller(sub).map_err(|why| bad(format!("sub: {why}")))?;
    check_audience(audience)?;
    let ttl = if ttl_seconds == 0 {
        DEFAULT_TTL_SECONDS
    } else {
        ttl_seconds
    };
    if ttl > MAX_TTL_SECONDS {
        return Err(bad("ttl_seconds: at most 30 days"));
    }
    if scopes.len() > MAX_SCOPES || scopes.iter().any(|s| !scope_ok(s)) {
        return Err(bad(
            "scopes: at most 32, each printable ASCII without space or quote",
        ));
    }
    let claims = Claims {
        iss: TCD_TOKEN_ISSUER.into(),
        sub: sub.into(),
        aud: audience.into(),
        iat: now_s,
        exp: now_s + ttl as i64,
        scope: scopes.join(" "),
        jti: crate::random::b64(12),
    };
    let payload = serde_json::to_vec(&claims).expect("claims serialize");
    // Signed over tcd's own header bytes rather than through `jsonwebtoken::encode`,
    // whose header orders its fields otherwise: tokens minted before keep checking.
    let signed = format!("{}.{}", B64.encode(HEADER), B64.encode(payload));
    let sig = jsonwebtoken::crypto::sign(
        signed.as_bytes(),
        &EncodingKey::from_secret(key),
        Algorithm::HS256,
    )
    .map_err(|e| DaemonError::Internal(format!("signing a bearer token: {e}")))?;
    Ok((format!("{signed}.{sig}"), claims))
}

/// The claims of `token` if tcd minted it under `key` for `audience` and it has not
/// expired at `now_s`. Refusals: `expired`, else `invalid` (garbage, tampering, another
/// tcd or a rotated secret, another audience: the message says which it can tell).
pub fn check(
    key: &[u8; 32],
    token: &str,
    audience: &str,
    now_s: i64,
) -> Result<Claims, DaemonError> {
    let invalid = |why: &str| DaemonError::refused(Reason::Invalid, why.to_string());
    let not_ours =
        "not a token minted by this tcd (or tampered with, or minted before a secret rotation)";
    if token.len() > MAX_TOKEN_LEN {
        return Err(invalid(not_ours));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid(not_ours));
    };
    if h != B64.encode(HEADER) {
        return Err(invalid(not_ours));
    }
    let c = jsonwebtoken::decode::<Claims>(
        token,
        &DecodingKey::from_secret(key),
        &validation(audience),
    )
    .map_err(|e| match e.kind() {
        ErrorKind::InvalidAudience => invalid("minted for another audience"),
        _ => invalid(not_ours),
    })?
    .claims;
    if c.exp <= now_s {
        return Err(DaemonError::refused(
            Reason::Expired,
            "the token has expired",
        ));
    }
    check_caller(&c.sub).map_err(|why| invalid(&format!("sub: {why}")))?;
    Ok(c)
}

/// HS256 only, tcd's issuer and this audience, every claim tcd writes required. Expiry is
/// checked in [`check`] against `now_s` (the service's clock, injected by the tests), so
/// `jsonwebtoken` reads no clock of its own and allows no leeway.
fn validation(audience: &str) -> Validation {
    let mut v = Validation::new(Algorithm::HS256);
    v.set_issuer(&[TCD_TOKEN_ISSUER]);
    v.set_audience(&[audience]);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v.validate_exp = false;
    v.validate_nbf = false;
    v.leeway = 0;
    v
}

/// `MintToken`: mints with the ledger's key and records `tc.bearer.minted` (who, for
/// which audience, until when; never the token). Runs on the store thread.
pub fn mint_recorded(
    l: &crate::ledger::Ledger,
    sub: &str,
    ttl_seconds: u64,
    audience: &str,
    scopes: &[String],
) -> Result<(String, i64), DaemonError> {
    let now_s = tc_core::now_ms() / 1000;
    let (token, c) = mint(&l.bearer_key(), sub, ttl_seconds, audience, scopes, now_s)?;
    l.store.append(crate::record::NewEvent {
        kind: tc_core::codes::events::BEARER_MINTED,
        caller: c.sub.clone(),
        detail: serde_json::json!({ "audience": c.aud, "exp": c.exp, "scope": c.scope }),
        ..Default::default()
    })?;
    Ok((token, c.exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: [u8; 32] = [3; 32];

    /// `signed` (`header.payload`) with its HS256 signature under `key` appended.
    fn signed_under(key: &[u8], signed: &str) -> String {
        let sig = jsonwebtoken::crypto::sign(
            signed.as_bytes(),
            &EncodingKey::from_secret(key),
            Algorithm::HS256,
        )
        .unwrap();
        format!("{signed}.{sig}")
    }

    fn message(r: Result<Claims, DaemonError>) -> String {
        match r {
            Err(DaemonError::Refused { message, .. }) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn reason(r: Result<Claims, DaemonError>) -> Reason {
        match r {
            Err(DaemonError::Refused { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn minted_tokens_check_for_their_audience_until_they_expire() {
        let scopes = vec!["mcp".to_string()];
        let (t, c) = mint(&K, "alice", 60, "tc-notes", &scopes, 1000).unwrap();
        assert_eq!((c.iss.as_str(), c.exp), ("tcd", 1060));
        let got = check(&K, &t, "tc-notes", 1059).unwrap();
        assert_eq!((got.sub.as_str(), got.scopes()), ("alice", scopes.clone()));
        assert_eq!(reason(check(&K, &t, "tc-notes", 1060)), Reason::Expired);
        assert_eq!(reason(check(&K, &t, "other", 1000)), Reason::Invalid);
        assert_eq!(
            reason(check(&[4; 32], &t, "tc-notes", 1000)),
            Reason::Invalid
        );
        let (t2, _) = mint(&K, "alice", 60, "tc-notes", &scopes, 1000).unwrap();
        assert_ne!(t, t2, "jti makes tokens distinct");
        assert_eq!(
            mint(&K, "a", 0, "x", &[], 0).unwrap().1.exp,
            DEFAULT_TTL_SECONDS as i64
        );
    }

    #[test]
    fn every_change_and_any_other_header_is_invalid() {
        let (t, _) = mint(&K, "bob", 60, "aud", &[], 0).unwrap();
        for i in 0..t.len() {
            let mut b = t.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let s = String::from_utf8(b).unwrap();
            if s != t {
                assert_eq!(reason(check(&K, &s, "aud", 1)), Reason::Invalid, "byte {i}");
            }
        }
        // The same claims under `alg: none`, or re-signed under another header.
        let (_, rest) = t.split_once('.').unwrap();
        let none = format!("{}.{rest}", B64.encode(r#"{"alg":"none"}"#));
        assert_eq!(reason(check(&K, &none, "aud", 1)), Reason::Invalid);
        let payload = rest.split('.').next().unwrap();
        let h = B64.encode(r#"{"typ":"JWT","alg":"HS256"}"#);
        let forged = signed_under(&K, &format!("{h}.{payload}"));
        assert_eq!(reason(check(&K, &forged, "aud", 1)), Reason::Invalid);
        for g in ["", "a.b", "a.b.c.d", &"x".repeat(9000)] {
            assert_eq!(reason(check(&K, g, "aud", 1)), Reason::Invalid, "{g}");
        }
    }

    #[test]
    fn mint_refuses_bad_arguments() {
        for (sub, ttl, aud, scopes) in [
            ("alice bob", 60, "a", vec![]),
            ("stdio", 60, "a", vec![]),
            ("alice", MAX_TTL_SECONDS + 1, "a", vec![]),
            ("alice", 60, "", vec![]),
            ("alice", 60, "a\n", vec![]),
            ("alice", 60, "a", vec!["two words".to_string()]),
        ] {
            let r = mint(&K, sub, ttl, aud, &scopes, 0).map(|(_, c)| c);
            assert_eq!(
                reason(r),
                Reason::BadArgument,
                "{sub} {ttl} {aud:?} {scopes:?}"
            );
        }
    }

    #[test]
    fn alg_none_other_algorithms_and_other_keys_are_invalid() {
        let (t, _) = mint(&K, "bob", 60, "aud", &[], 0).unwrap();
        let payload = t.split('.').nth(1).unwrap();
        // An unsigned token, as RFC 7519 spells it (empty signature), and with the
        // header tcd writes but no signature.
        let none = format!("{}.{payload}.", B64.encode(r#"{"alg":"none","typ":"JWT"}"#));
        assert_eq!(reason(check(&K, &none, "aud", 1)), Reason::Invalid);
        let unsigned = format!("{}.{payload}.", B64.encode(HEADER));
        assert_eq!(reason(check(&K, &unsigned, "aud", 1)), Reason::Invalid);
        // The same claims under HS512, signed with the right key.
        let h512 = B64.encode(r#"{"alg":"HS512","typ":"JWT"}"#);
        let signed = format!("{h512}.{payload}");
        let sig = jsonwebtoken::crypto::sign(
            signed.as_bytes(),
            &EncodingKey::from_secret(&K),
            Algorithm::HS512,
        )
        .unwrap();
        let hs512 = format!("{signed}.{sig}");
        assert_eq!(reason(check(&K, &hs512, "aud", 1)), Reason::Invalid);
        // tcd's header and claims signed under another key (another tcd, a rotated
        // secret), and under an empty one.
        for key in [&[4u8; 32][..], b""] {
            let other = signed_under(key, &format!("{}.{payload}", B64.encode(HEADER)));
            assert_eq!(reason(check(&K, &other, "aud", 1)), Reason::Invalid);
            assert!(message(check(&K, &other, "aud", 1)).contains("not a token minted"));
        }
    }

    #[test]
    fn the_refusal_says_audience_or_expiry_when_it_can_tell() {
        let (t, _) = mint(&K, "bob", 60, "aud", &[], 0).unwrap();
        assert_eq!(
            message(check(&K, &t, "other", 1)),
            "minted for another audience"
        );
        assert_eq!(message(check(&K, &t, "aud", 60)), "the token has expired");
    }

    /// A token as tcd minted it before `jsonwebtoken` (header, claims and HMAC-SHA256
    /// written by hand) still checks: an upgrade does not log callers out.
    #[test]
    fn a_token_minted_by_hand_before_still_checks() {
        use hmac::{Hmac, Mac};
        let claims = r#"{"iss":"tcd","sub":"alice","aud":"tc-notes","iat":0,"exp":100,"scope":"mcp","jti":"abc"}"#;
        let signed = format!("{}.{}", B64.encode(HEADER), B64.encode(claims));
        let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&K).unwrap();
        m.update(signed.as_bytes());
        let t = format!("{signed}.{}", B64.encode(m.finalize().into_bytes()));
        let c = check(&K, &t, "tc-notes", 99).unwrap();
        assert_eq!(
            (c.sub.as_str(), c.scopes()),
            ("alice", vec!["mcp".to_string()])
        );
        // A claim tcd always writes, missing: not ours.
        let no_sub = r#"{"iss":"tcd","aud":"tc-notes","iat":0,"exp":100,"jti":"abc"}"#;
        let signed = format!("{}.{}", B64.encode(HEADER), B64.encode(no_sub));
        assert_eq!(
            reason(check(&K, &signed_under(&K, &signed), "tc-notes", 1)),
            Reason::Invalid
        );
    }
}
