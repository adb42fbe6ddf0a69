//! Why a request has no caller ([`AuthError`]: its HTTP status, RFC 6750 error code and
//! `WWW-Authenticate` value) and why a verifier could not be built ([`SetupError`]).

use http::{HeaderValue, StatusCode};

/// Why a request is refused. Messages are fixed phrases: never a token, a claim the
/// client chose, or anything read from a key server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header (401, no error code: RFC 6750 3.1).
    #[error("a bearer token is required")]
    Missing,
    /// A malformed `Authorization` header (400 `invalid_request`).
    #[error("malformed Authorization header: {0}")]
    Malformed(&'static str),
    /// `access_token` in the query string (400 `invalid_request`): URLs end up in logs.
    #[error("bearer tokens are not accepted in the query string; send an Authorization header")]
    QueryToken,
    /// The token does not verify (401 `invalid_token`).
    #[error("invalid token: {0}")]
    Invalid(&'static str),
    /// The token lacks a required scope (403 `insufficient_scope`).
    #[error("the token lacks scope {0}")]
    InsufficientScope(String),
    /// Tokens cannot be checked right now (tcd or the key server unreachable): 503.
    #[error("cannot verify tokens right now: {0}")]
    Unavailable(&'static str),
}

impl AuthError {
    /// The HTTP status to answer with.
    pub fn status(&self) -> StatusCode {
        match self {
            AuthError::Missing | AuthError::Invalid(_) => StatusCode::UNAUTHORIZED,
            AuthError::Malformed(_) | AuthError::QueryToken => StatusCode::BAD_REQUEST,
            AuthError::InsufficientScope(_) => StatusCode::FORBIDDEN,
            AuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The RFC 6750 `error` code, if any.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            AuthError::Missing | AuthError::Unavailable(_) => None,
            AuthError::Malformed(_) | AuthError::QueryToken => Some("invalid_request"),
            AuthError::Invalid(_) => Some("invalid_token"),
            AuthError::InsufficientScope(_) => Some("insufficient_scope"),
        }
    }

    /// The `WWW-Authenticate` value for this refusal (RFC 6750 3, RFC 9728 5.1):
    /// `resource_metadata` is the metadata URL, `scopes` the scopes every token needs.
    /// None for 503, and under `mode = "none"` (no metadata URL: there is no scheme).
    pub fn www_authenticate(
        &self,
        resource_metadata: Option<&str>,
        scopes: &[String],
    ) -> Option<HeaderValue> {
        let rm = resource_metadata?;
        if matches!(self, AuthError::Unavailable(_)) {
            return None;
        }
        let mut v = format!("Bearer resource_metadata=\"{}\"", quoted(rm));
        if let Some(code) = self.code() {
            v.push_str(&format!(", error=\"{code}\""));
            if let AuthError::Invalid(why) | AuthError::Malformed(why) = self {
                v.push_str(&format!(", error_description=\"{}\"", quoted(why)));
            }
        }
        if !scopes.is_empty() {
            v.push_str(&format!(", scope=\"{}\"", quoted(&scopes.join(" "))));
        }
        HeaderValue::from_str(&v).ok()
    }
}

/// Text safe inside a quoted-string: no quote, backslash or control byte.
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
        .collect()
}

/// Why a [`crate::Verifier`] could not be built: the front refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A `[vaults.http.auth]` rule (the key under it and why).
    #[error("[vaults.http.auth] {0}: {1}")]
    Config(&'static str, String),
    /// `mode = "none"` on a bind other processes and machines can reach.
    #[error(
        "mode = \"none\" serves every request as the one caller http-local: it needs a loopback \
         bind, not {0} (use mode = \"jwt\" or \"oidc\", or bind 127.0.0.1)"
    )]
    NoneOnPublicBind(std::net::SocketAddr),
    /// A `public_keys` file that is not a usable public key.
    #[error("public key {path}: {why}")]
    Key { path: String, why: String },
    /// OIDC discovery or the JWKS failed at start.
    #[error("{0}")]
    Remote(String),
    /// HS256 tokens need tcd, and no connection to it was given.
    #[error(
        "mode = \"jwt\" without jwks_url or public_keys verifies tokens with tcd; no tcd given"
    )]
    NoTcd,
}

#[cfg(test)]
mod tests {
    use super::*;

    const RM: &str = "https://tc.example/.well-known/oauth-protected-resource/mcp";

    fn header(e: &AuthError, scopes: &[&str]) -> String {
        let s: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        e.www_authenticate(Some(RM), &s)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }

    #[test]
    fn statuses_and_challenges_follow_rfc_6750() {
        assert_eq!(AuthError::Missing.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            header(&AuthError::Missing, &[]),
            format!("Bearer resource_metadata=\"{RM}\"")
        );
        let e = AuthError::Invalid("expired");
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            header(&e, &["mcp:tools"]),
            format!(
                "Bearer resource_metadata=\"{RM}\", error=\"invalid_token\", \
                 error_description=\"expired\", scope=\"mcp:tools\""
            )
        );
        let e = AuthError::InsufficientScope("b".into());
        assert_eq!(e.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            header(&e, &["a", "b"]),
            format!(
                "Bearer resource_metadata=\"{RM}\", error=\"insufficient_scope\", scope=\"a b\""
            )
        );
        assert_eq!(AuthError::QueryToken.status(), StatusCode::BAD_REQUEST);
        assert!(header(&AuthError::QueryToken, &[]).contains("error=\"invalid_request\""));
        let e = AuthError::Unavailable("tcd");
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(header(&e, &[]), "");
        assert!(AuthError::Missing.www_authenticate(None, &[]).is_none());
    }

    #[test]
    fn quoted_strings_cannot_be_broken_out_of() {
        assert_eq!(quoted("a\"b\\c\r\nd"), "abcd");
    }
}
