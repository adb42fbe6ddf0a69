//! Who an HTTP request comes from, as the front needs it: a caller id, or a refusal with
//! its status and `WWW-Authenticate` challenge. `mode = "none"` lives here; the token
//! modes plug in through [`Callers`].

use std::future::Future;
use std::pin::Pin;

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

/// A request the front will not serve for want of a (good) credential.
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    /// The `WWW-Authenticate` value (401/403), if any.
    pub challenge: Option<String>,
    pub message: String,
}

pub type CallerFuture<'a> = Pin<Box<dyn Future<Output = Result<String, Refusal>> + Send + 'a>>;

/// How the front learns the caller of a request.
pub trait Callers: Send + Sync {
    /// The caller of a request with these headers (the query string was already checked).
    fn caller<'a>(&'a self, headers: &'a HeaderMap) -> CallerFuture<'a>;
    /// RFC 9728 metadata: the well-known paths it is served at and the document.
    fn metadata(&self) -> Option<(Vec<String>, Value)> {
        None
    }
}

/// `mode = "none"`: every request is the one caller `http-local` (loopback binds only;
/// the front refuses to start otherwise). A bearer token sent anyway is not looked at:
/// it could name no one this mode knows.
pub struct Local;

impl Callers for Local {
    fn caller<'a>(&'a self, _: &'a HeaderMap) -> CallerFuture<'a> {
        Box::pin(async { Ok(tc_core::config::HTTP_LOCAL_CALLER.to_string()) })
    }
}

/// A credential in the query string is refused in every mode: URLs end up in logs,
/// history and `Referer` headers.
pub fn query_token(query: Option<&str>) -> Result<(), Refusal> {
    let named = query.is_some_and(|q| {
        q.split('&').any(|kv| {
            let k = kv.split('=').next().unwrap_or("");
            k.eq_ignore_ascii_case("access_token") || k.eq_ignore_ascii_case("token")
        })
    });
    if named {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            challenge: Some("Bearer error=\"invalid_request\"".into()),
            message: "a token in the query string is refused: send it in the Authorization header"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_tokens_are_refused_whatever_their_case() {
        assert!(query_token(None).is_ok());
        assert!(query_token(Some("a=1&b=2")).is_ok());
        for q in ["access_token=x", "a=1&Access_Token=x", "token=abc"] {
            assert_eq!(
                query_token(Some(q)).unwrap_err().status,
                StatusCode::BAD_REQUEST
            );
        }
    }
}
