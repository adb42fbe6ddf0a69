//! [`Verifier`]: built once per front from `[vaults.http.auth]`, asked once per request.
//! `none` → `http-local`; `jwt` → static keys, a JWKS URL, or tcd (HS256); `oidc` →
//! discovery. Query tokens are refused and required scopes checked in every mode.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tc_core::config::{AuthMode, HttpAuth, HTTP_LOCAL_CALLER};

use crate::jwt::{self, Expect, Refused};
use crate::keys::KeySet;
use crate::metadata::ProtectedResource;
use crate::remote::{self, RemoteKeys};
use crate::request::{bearer, refuse_query_token};
use crate::tcd::{TcdTokens, TcdVerifier};
use crate::{AuthError, Caller, SetupError};

/// What a front knows when it builds its verifier.
pub struct Setup<'a> {
    pub auth: &'a HttpAuth,
    /// The address the front is bound to.
    pub bind: SocketAddr,
    /// The MCP endpoint's path (`/mcp`): the default resource is `http://{bind}{path}`.
    pub path: &'a str,
    /// tcd's `VerifyToken`, needed by `jwt` without `jwks_url`/`public_keys`.
    pub tcd: Option<Arc<dyn TcdTokens>>,
}

enum Mode {
    Local,
    Static(KeySet, Expect),
    Remote(RemoteKeys, Expect),
    Tcd(TcdVerifier),
}

/// Decides who each request comes from.
pub struct Verifier {
    mode: Mode,
    scopes: Vec<String>,
    metadata: Option<ProtectedResource>,
    metadata_url: Option<String>,
}

impl Verifier {
    /// Checks the config and the bind, loads keys (`jwt` with `public_keys`), fetches
    /// the JWKS (`jwks_url`) or runs discovery (`oidc`): any failure refuses the start.
    pub async fn new(s: Setup<'_>) -> Result<Verifier, SetupError> {
        let a = s.auth;
        let listen = s.bind.to_string();
        // The config was validated whole at load; here the first broken rule refuses.
        if let Some((k, why)) = a.check(Some(&listen)).into_iter().next() {
            return Err(SetupError::Config(k, why));
        }
        if a.mode == AuthMode::None {
            if !s.bind.ip().is_loopback() {
                return Err(SetupError::NoneOnPublicBind(s.bind));
            }
            return Ok(Verifier {
                mode: Mode::Local,
                scopes: Vec::new(),
                metadata: None,
                metadata_url: None,
            });
        }
        let resource = resource(a, &s)?;
        let audience = a.audience.clone().unwrap_or_default();
        let expect = |issuer: &str| Expect {
            issuer: issuer.to_string(),
            audience: audience.clone(),
        };
        let floor = Duration::from_secs(a.jwks_refresh_floor_seconds);
        let mode = match (a.mode, &a.issuer, &a.jwks_url) {
            (AuthMode::Oidc, Some(iss), _) => {
                let http = remote::client().map_err(SetupError::Remote)?;
                let jwks = remote::discover(&http, iss)
                    .await
                    .map_err(SetupError::Remote)?;
                let keys = RemoteKeys::load(http, jwks, floor)
                    .await
                    .map_err(SetupError::Remote)?;
                Mode::Remote(keys, expect(iss))
            }
            (AuthMode::Jwt, Some(iss), Some(url)) => {
                let http = remote::client().map_err(SetupError::Remote)?;
                let keys = RemoteKeys::load(http, url.clone(), floor)
                    .await
                    .map_err(SetupError::Remote)?;
                Mode::Remote(keys, expect(iss))
            }
            (AuthMode::Jwt, Some(iss), None) => Mode::Static(load_pems(a)?, expect(iss)),
            (AuthMode::Jwt, None, None) => {
                let tcd = s.tcd.clone().ok_or(SetupError::NoTcd)?;
                Mode::Tcd(TcdVerifier::new(tcd, audience.clone()))
            }
            // HttpAuth::check refused every other combination; refused again, not a panic.
            _ => {
                return Err(SetupError::Config(
                    "mode",
                    "no key source for this combination".into(),
                ))
            }
        };
        let authorization_servers = match (&a.authorization_servers, &a.issuer) {
            (list, _) if !list.is_empty() => list.clone(),
            (_, Some(iss)) => vec![iss.clone()],
            _ => Vec::new(),
        };
        let metadata = ProtectedResource {
            resource,
            authorization_servers,
            scopes_supported: a.scopes.clone(),
        };
        Ok(Verifier {
            mode,
            scopes: a.scopes.clone(),
            metadata_url: Some(metadata.url()),
            metadata: Some(metadata),
        })
    }

    /// Who sent a request with these headers and this query string (the URI's part
    /// after `?`, if any). Under `none` an `Authorization` header is ignored: it is
    /// never read, so it can neither help nor hurt.
    pub async fn caller(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Caller, AuthError> {
        refuse_query_token(query)?;
        let caller = match &self.mode {
            Mode::Local => {
                return Ok(Caller {
                    sub: HTTP_LOCAL_CALLER.to_string(),
                    scopes: Vec::new(),
                })
            }
            Mode::Static(keys, expect) => {
                let token = bearer(headers)?;
                jwt::verify(token, keys, expect).map_err(|r| match r {
                    Refused::UnknownKid => AuthError::Invalid("unknown kid"),
                    Refused::Auth(e) => e,
                })?
            }
            Mode::Remote(keys, expect) => keys.verify(bearer(headers)?, expect).await?,
            Mode::Tcd(tcd) => tcd.verify(bearer(headers)?).await?,
        };
        jwt::check_scopes(&caller, &self.scopes)?;
        Ok(caller)
    }

    /// The `WWW-Authenticate` value to send with `e` (None under `none`, and for 503).
    pub fn www_authenticate(&self, e: &AuthError) -> Option<HeaderValue> {
        e.www_authenticate(self.metadata_url.as_deref(), &self.scopes)
    }

    /// The RFC 9728 metadata to serve at [`ProtectedResource::paths`] (None under `none`).
    pub fn metadata(&self) -> Option<&ProtectedResource> {
        self.metadata.as_ref()
    }
}

/// The configured resource, or `http://{bind}{path}` on a loopback bind.
fn resource(a: &HttpAuth, s: &Setup<'_>) -> Result<String, SetupError> {
    match &a.resource {
        Some(r) => Ok(r.clone()),
        None if s.bind.ip().is_loopback() => Ok(format!("http://{}{}", s.bind, s.path)),
        None => Err(SetupError::Config(
            "resource",
            format!(
                "required on a non-loopback bind ({}): the URL clients use for this endpoint",
                s.bind
            ),
        )),
    }
}

fn load_pems(a: &HttpAuth) -> Result<KeySet, SetupError> {
    let mut set = KeySet::default();
    for p in &a.public_keys {
        let key_err = |why: String| SetupError::Key {
            path: p.display().to_string(),
            why,
        };
        let text = std::fs::read(p).map_err(|e| key_err(e.to_string()))?;
        set.keys.push(KeySet::pem_key(&text).map_err(key_err)?);
    }
    Ok(set)
}
