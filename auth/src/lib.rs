//! Who an HTTP request to tc's Streamable HTTP front comes from (`[vaults.http.auth]`),
//! independent of the HTTP stack: a [`Verifier`] turns headers and query into a [`Caller`]
//! or an [`AuthError`] that carries its status and `WWW-Authenticate` challenge.
//!
//! - [`request`]: the bearer token of a request (header only; query tokens refused).
//! - [`keys`]: public keys (PEM files, JWKS documents) and which may check a token.
//! - [`jwt`]: verifying a token against keys: alg from the key, iss/aud/exp/sub checked.
//! - [`remote`]: JWKS and OIDC discovery over HTTPS, cached, refresh floor.
//! - [`tcd`]: tokens minted by tcd (HS256), verified by tcd, cached by digest.
//! - [`metadata`]: RFC 9728 Protected Resource Metadata and its well-known paths.
//! - [`error`]: [`AuthError`] (per request) and [`SetupError`] (at start).

pub mod error;
pub mod jwt;
pub mod keys;
pub mod metadata;
pub mod remote;
pub mod request;
pub mod tcd;
mod verifier;

pub use error::{AuthError, SetupError};
pub use metadata::ProtectedResource;
pub use tcd::{TcdRefusal, TcdTokens, Verified};
pub use verifier::{Setup, Verifier};

/// Who a request comes from: the token's `sub` (checked by
/// [`tc_core::config::check_caller`]) and the scopes it carries; under `mode = "none"`
/// always [`tc_core::config::HTTP_LOCAL_CALLER`] with no scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub sub: String,
    pub scopes: Vec<String>,
}

/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY_SECONDS: u64 = 30;
/// Longest bearer token read; longer ones are refused before any decoding.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

#[cfg(test)]
mod tests;
