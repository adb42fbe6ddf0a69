//! The bearer token of one request: the `Authorization` header only (RFC 6750 2.1); an
//! `access_token` in the query string is refused in every mode (it ends up in logs).

use http::header::AUTHORIZATION;
use http::HeaderMap;

use crate::{AuthError, MAX_TOKEN_LEN};

/// Refuses a query string that carries `access_token` (under any percent-encoding).
pub fn refuse_query_token(query: Option<&str>) -> Result<(), AuthError> {
    let Some(q) = query else { return Ok(()) };
    if url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "access_token") {
        return Err(AuthError::QueryToken);
    }
    Ok(())
}

/// The bearer token in `headers`: [`AuthError::Missing`] when there is no bearer
/// credential, [`AuthError::Malformed`] for one that breaks RFC 6750's syntax.
pub fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
    let mut all = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = all.next() else {
        return Err(AuthError::Missing);
    };
    if all.next().is_some() {
        return Err(AuthError::Malformed("more than one Authorization header"));
    }
    let value = value
        .to_str()
        .map_err(|_| AuthError::Malformed("not visible ASCII"))?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        // Another scheme (Basic, …) is no bearer credential at all: challenge for one.
        return Err(AuthError::Missing);
    }
    let token = rest.trim_start_matches(' ');
    if token.is_empty() {
        return Err(AuthError::Malformed("empty bearer token"));
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(AuthError::Invalid("token too long"));
    }
    if !is_token68(token) {
        return Err(AuthError::Malformed("the bearer token is not token68"));
    }
    Ok(token)
}

/// RFC 7235 token68: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_token68(t: &str) -> bool {
    let body = t.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(AUTHORIZATION, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn query_tokens_are_refused_however_spelled() {
        for q in [
            "access_token=x",
            "a=1&access_token=",
            "access%5Ftoken=x",
            "b=2&access_token",
        ] {
            assert_eq!(
                refuse_query_token(Some(q)),
                Err(AuthError::QueryToken),
                "{q}"
            );
        }
        for q in ["", "access_tokens=x", "x=access_token", "token=1"] {
            assert_eq!(refuse_query_token(Some(q)), Ok(()), "{q}");
        }
        assert_eq!(refuse_query_token(None), Ok(()));
    }

    #[test]
    fn the_header_is_one_bearer_token68() {
        assert_eq!(bearer(&headers(&[b"Bearer abc.def-_"])), Ok("abc.def-_"));
        assert_eq!(bearer(&headers(&[b"bearer  ab+/=="])), Ok("ab+/=="));
        assert_eq!(bearer(&HeaderMap::new()), Err(AuthError::Missing));
        assert_eq!(
            bearer(&headers(&[b"Basic dXNlcg=="])),
            Err(AuthError::Missing)
        );
        for bad in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer a b",
            b"Bearer a\"b",
            b"Bearer ==",
            b"Bearer \xff",
        ] {
            assert!(
                matches!(bearer(&headers(&[bad])), Err(AuthError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            bearer(&headers(&[b"Bearer a", b"Bearer b"])),
            Err(AuthError::Malformed(_))
        ));
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_LEN + 1));
        assert_eq!(
            bearer(&headers(&[long.as_bytes()])),
            Err(AuthError::Invalid("token too long"))
        );
    }
}
