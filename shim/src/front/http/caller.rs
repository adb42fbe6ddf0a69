//! Who an HTTP request comes from: `tc_auth`'s answer (`none` → `http-local`, or a bearer
//! token's `sub`), or the refusal the client is sent (status, `WWW-Authenticate`).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The caller of a request with these headers and this query string, or its refusal.
pub async fn caller(
    v: &tc_auth::Verifier,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<String, Response> {
    match v.caller(headers, query).await {
        Ok(c) => Ok(c.sub),
        Err(e) => Err(refusal(v, &e)),
    }
}

/// A refusal as sent: the error's status, its challenge, its fixed message.
pub fn refusal(v: &tc_auth::Verifier, e: &tc_auth::AuthError) -> Response {
    let mut r = (e.status(), e.to_string()).into_response();
    if let Some(c) = v.www_authenticate(e) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, c);
    }
    if e.status() == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}
