//! One token against one issuer's keys: the header's `alg` must be one the chosen key
//! verifies; `iss`, `aud`, `exp` and `sub` are required and checked; `sub` must be a
//! valid caller name; scopes come from `scope` (space-separated) or `scp` (array).

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, decode_header, Validation};
use serde::Deserialize;

use crate::keys::{KeySet, NoKey};
use crate::{AuthError, Caller, LEEWAY_SECONDS};

/// What a token must say about itself.
#[derive(Debug, Clone)]
pub struct Expect {
    pub issuer: String,
    pub audience: String,
}

/// Why a token was refused before or after the signature check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Its `kid` is not in the key set (the caller may refresh the set and retry).
    UnknownKid,
    /// Any other refusal.
    Auth(AuthError),
}

impl From<AuthError> for Refused {
    fn from(e: AuthError) -> Self {
        Refused::Auth(e)
    }
}

#[derive(Deserialize)]
struct Claims {
    // Optional here so a missing `sub` is refused by name (required_spec_claims).
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Scp>,
}

/// `scp` is an array at most issuers, a space-separated string at some.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    Text(String),
}

/// Verifies `token` against `keys`: the caller it names, or why not.
pub fn verify(token: &str, keys: &KeySet, expect: &Expect) -> Result<Caller, Refused> {
    let header = decode_header(token).map_err(|_| AuthError::Invalid("malformed token"))?;
    let candidates = match keys.candidates(&header) {
        Ok(c) => c,
        Err(NoKey::UnknownKid) => return Err(Refused::UnknownKid),
        Err(NoKey::WrongAlg) => {
            return Err(AuthError::Invalid("alg is not one the issuer's key uses").into())
        }
    };
    let mut last = AuthError::Invalid("bad signature");
    for key in candidates {
        let mut v = Validation::new(header.alg);
        v.algorithms = key.algs.clone();
        v.leeway = LEEWAY_SECONDS;
        v.validate_nbf = true;
        v.set_issuer(&[&expect.issuer]);
        v.set_audience(&[&expect.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        match decode::<Claims>(token, &key.key, &v) {
            Ok(data) => return caller(data.claims).map_err(Refused::Auth),
            // Another key with the same kid (or none) may still verify it.
            Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => continue,
            Err(e) => last = refusal(e.kind()),
        }
    }
    Err(last.into())
}

/// The one mapping from a library error to a fixed refusal phrase.
fn refusal(kind: &ErrorKind) -> AuthError {
    AuthError::Invalid(match kind {
        ErrorKind::ExpiredSignature => "expired",
        ErrorKind::ImmatureSignature => "not valid yet (nbf)",
        ErrorKind::InvalidIssuer => "wrong issuer",
        ErrorKind::InvalidAudience => "wrong audience",
        ErrorKind::MissingRequiredClaim(c) => match c.as_str() {
            "exp" => "no exp claim",
            "iss" => "no iss claim",
            "aud" => "no aud claim",
            _ => "no sub claim",
        },
        ErrorKind::InvalidAlgorithm => "alg is not one the issuer's key uses",
        _ => "malformed token",
    })
}

fn caller(c: Claims) -> Result<Caller, AuthError> {
    let sub = c.sub.unwrap_or_default();
    if tc_core::config::check_caller(&sub).is_err() {
        return Err(AuthError::Invalid(
            "sub is not a usable caller name ([A-Za-z0-9._@:-], at most 128)",
        ));
    }
    let mut scopes: Vec<String> = c
        .scope
        .as_deref()
        .unwrap_or("")
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    match c.scp {
        Some(Scp::List(l)) => scopes.extend(l),
        Some(Scp::Text(t)) => {
            scopes.extend(t.split(' ').filter(|s| !s.is_empty()).map(str::to_string))
        }
        None => {}
    }
    scopes.sort();
    scopes.dedup();
    Ok(Caller { sub, scopes })
}

/// The first of `required` that `caller` lacks, as a refusal.
pub fn check_scopes(caller: &Caller, required: &[String]) -> Result<(), AuthError> {
    match required.iter().find(|r| !caller.scopes.contains(r)) {
        Some(r) => Err(AuthError::InsufficientScope(r.clone())),
        None => Ok(()),
    }
}
