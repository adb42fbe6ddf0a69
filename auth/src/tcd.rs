//! Tokens minted by tcd (`tcctl token mint`, HS256 under a key only tcd holds): tcd
//! verifies them (`VerifyToken`), reached through [`TcdTokens`] so this crate needs no
//! gRPC; a success is cached by the token's SHA-256 so not every request is an RPC.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::{AuthError, Caller};

/// What tcd says about a token it verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub sub: String,
    pub scopes: Vec<String>,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
}

/// Why tcd did not verify a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcdRefusal {
    /// Past its `exp` (tcd's reason `expired`).
    Expired,
    /// Not minted by this tcd, for another audience, tampered with, or minted before a
    /// secret rotation (tcd's reason `invalid`, or any other refusal).
    Invalid,
    /// tcd could not be asked (not running, overloaded).
    Unavailable,
}

/// The future [`TcdTokens::verify_token`] returns.
pub type VerifyFuture<'a> = Pin<Box<dyn Future<Output = Result<Verified, TcdRefusal>> + Send + 'a>>;

/// tcd's `VerifyToken` RPC, as the front's daemon client provides it.
pub trait TcdTokens: Send + Sync {
    fn verify_token<'a>(&'a self, token: &'a str, audience: &'a str) -> VerifyFuture<'a>;
}

/// Most cached verifications; a full cache drops its expired entries, then all.
pub const CACHE_ENTRIES: usize = 4096;
/// Longest a verification is trusted without asking tcd again: a `tcctl rotate-secret`
/// voids minted tokens here within this time.
pub const CACHE_FOR: Duration = Duration::from_secs(60);

/// Verifies tcd tokens through tcd, with the cache.
pub struct TcdVerifier {
    tcd: std::sync::Arc<dyn TcdTokens>,
    audience: String,
    cache: Mutex<HashMap<[u8; 32], (Caller, Instant)>>,
}

impl TcdVerifier {
    pub fn new(tcd: std::sync::Arc<dyn TcdTokens>, audience: String) -> Self {
        TcdVerifier {
            tcd,
            audience,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The caller `token` names, from the cache or from tcd.
    pub async fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        // Only HS256 tokens are tcd's: anything else costs no RPC.
        match jsonwebtoken::decode_header(token) {
            Ok(h) if h.alg == jsonwebtoken::Algorithm::HS256 => {}
            _ => return Err(AuthError::Invalid("not a token minted by tcd")),
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(c) = self.cached(&digest) {
            return Ok(c);
        }
        let v = self
            .tcd
            .verify_token(token, &self.audience)
            .await
            .map_err(|r| match r {
                TcdRefusal::Expired => AuthError::Invalid("expired"),
                TcdRefusal::Invalid => {
                    AuthError::Invalid("not minted by this tcd for this audience")
                }
                TcdRefusal::Unavailable => AuthError::Unavailable("tcd is not reachable"),
            })?;
        // tcd checked it at mint time; checked again so nothing else can slip through.
        if tc_core::config::check_caller(&v.sub).is_err() {
            return Err(AuthError::Invalid("sub is not a usable caller name"));
        }
        let caller = Caller {
            sub: v.sub,
            scopes: v.scopes,
        };
        self.remember(digest, &caller, v.exp);
        Ok(caller)
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<Caller> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        match c.get(digest) {
            Some((caller, until)) if Instant::now() < *until => Some(caller.clone()),
            Some(_) => {
                c.remove(digest);
                None
            }
            None => None,
        }
    }

    fn remember(&self, digest: [u8; 32], caller: &Caller, exp: i64) {
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let left = Duration::from_secs(exp.saturating_sub(now_s).max(0) as u64);
        if left.is_zero() {
            return;
        }
        let until = Instant::now() + left.min(CACHE_FOR);
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= CACHE_ENTRIES {
            let now = Instant::now();
            c.retain(|_, (_, u)| *u > now);
            if c.len() >= CACHE_ENTRIES {
                c.clear();
            }
        }
        c.insert(digest, (caller.clone(), until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A fake tcd: accepts "good" tokens for audience "tc", counts its calls.
    struct Fake {
        calls: AtomicUsize,
        exp: i64,
    }

    impl TcdTokens for Fake {
        fn verify_token<'a>(&'a self, token: &'a str, audience: &'a str) -> VerifyFuture<'a> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let ok = audience == "tc" && token.ends_with(".good");
            let exp = self.exp;
            Box::pin(async move {
                if token.ends_with(".down") {
                    return Err(TcdRefusal::Unavailable);
                }
                if token.ends_with(".old") {
                    return Err(TcdRefusal::Expired);
                }
                ok.then(|| Verified {
                    sub: "alice".into(),
                    scopes: vec![],
                    exp,
                })
                .ok_or(TcdRefusal::Invalid)
            })
        }
    }

    /// An HS256 header (`{"alg":"HS256","typ":"JWT"}`) and a claims part; tcd decides.
    fn tok(tail: &str) -> String {
        format!("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.{tail}")
    }

    fn now_s() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[tokio::test]
    async fn a_verified_token_is_asked_once_and_refusals_every_time() {
        let fake = Arc::new(Fake {
            calls: AtomicUsize::new(0),
            exp: now_s() + 3600,
        });
        let v = TcdVerifier::new(fake.clone(), "tc".into());
        for _ in 0..3 {
            assert_eq!(v.verify(&tok("good")).await.unwrap().sub, "alice");
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        for _ in 0..2 {
            assert!(matches!(
                v.verify(&tok("bad")).await,
                Err(AuthError::Invalid(_))
            ));
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
        assert_eq!(
            v.verify(&tok("old")).await,
            Err(AuthError::Invalid("expired"))
        );
        assert!(matches!(
            v.verify(&tok("down")).await,
            Err(AuthError::Unavailable(_))
        ));
        // Not HS256 (here RS256): refused without asking tcd.
        let before = fake.calls.load(Ordering::SeqCst);
        let rs = "eyJhbGciOiJSUzI1NiJ9.e30.good";
        assert!(v.verify(rs).await.is_err());
        assert!(v.verify("garbage").await.is_err());
        assert_eq!(fake.calls.load(Ordering::SeqCst), before);
    }

    #[tokio::test]
    async fn another_audience_and_expired_answers_are_not_cached() {
        let fake = Arc::new(Fake {
            calls: AtomicUsize::new(0),
            exp: now_s() - 1,
        });
        let v = TcdVerifier::new(fake.clone(), "tc".into());
        // tcd said yes with an exp already past (clock skew): not remembered.
        v.verify(&tok("good")).await.unwrap();
        v.verify(&tok("good")).await.unwrap();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
        let other = TcdVerifier::new(fake.clone(), "elsewhere".into());
        assert!(other.verify(&tok("good")).await.is_err());
    }
}
