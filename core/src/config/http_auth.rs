//! The rules for `[vaults.http.auth]` that serde cannot express, and the one rule for
//! what an HTTP caller's name (a token's `sub`) may be: shared by tcd, tc-auth and tcctl.

use super::http::{AuthMode, HttpAuth, HTTP_LOCAL_CALLER};
use crate::STDIO_CALLER;

/// Longest caller name (a token's `sub`) accepted.
pub const MAX_CALLER_LEN: usize = 128;
/// The `iss` of the HS256 tokens tcd mints (`tcctl token mint`).
pub const TCD_TOKEN_ISSUER: &str = "tcd";

/// Whether `sub` may name an HTTP caller. It ends up in bindings, audit events, logs
/// and the commands `tcctl pending` prints, so it is held to `[A-Za-z0-9._@:-]`, at most
/// [`MAX_CALLER_LEN`]; the local callers' names are reserved (a token for `stdio` would
/// redeem approvals given to the editor's own shim).
pub fn check_caller(sub: &str) -> Result<(), &'static str> {
    if sub.is_empty() {
        return Err("sub is empty");
    }
    if sub.len() > MAX_CALLER_LEN {
        return Err("sub is longer than 128 bytes");
    }
    if !sub
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._@:-".contains(&b))
    {
        return Err("sub may hold only A-Z a-z 0-9 . _ @ : -");
    }
    if sub == STDIO_CALLER || sub == HTTP_LOCAL_CALLER {
        return Err("sub names a local caller (stdio, http-local)");
    }
    Ok(())
}

/// A config problem: the key under `[vaults.http.auth]` and why.
pub type AuthRule = (&'static str, String);

impl HttpAuth {
    /// Checks the combination of keys for this mode; `listen` is `[vaults.http] listen`
    /// (mode `none` on a non-loopback address is refused here and again at bind time).
    /// The mode's combination is reported by its first broken rule (the next ones often
    /// follow from it); the keys every mode shares, each.
    pub fn check(&self, listen: Option<&str>) -> Vec<AuthRule> {
        let mode = match self.mode {
            AuthMode::None => self.check_none(listen),
            AuthMode::Jwt => self.check_jwt(),
            AuthMode::Oidc => self.check_oidc(),
        };
        mode.err().into_iter().chain(self.check_common()).collect()
    }

    fn check_none(&self, listen: Option<&str>) -> Result<(), AuthRule> {
        let set = [
            ("issuer", self.issuer.is_some()),
            ("audience", self.audience.is_some()),
            ("jwks_url", self.jwks_url.is_some()),
            ("public_keys", !self.public_keys.is_empty()),
            ("scopes", !self.scopes.is_empty()),
            ("resource", self.resource.is_some()),
            (
                "authorization_servers",
                !self.authorization_servers.is_empty(),
            ),
        ];
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err((
                key,
                "only with mode = \"jwt\" or \"oidc\" (mode is \"none\")".into(),
            ));
        }
        if let Some(addr) = listen.and_then(|l| l.parse::<std::net::SocketAddr>().ok()) {
            if !addr.ip().is_loopback() {
                return Err((
                    "mode",
                    format!(
                        "\"none\" serves every request as one caller: only on a loopback bind, \
                         not {addr} (use \"jwt\" or \"oidc\")"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_jwt(&self) -> Result<(), AuthRule> {
        need_audience(self)?;
        if let Some(u) = &self.jwks_url {
            if !self.public_keys.is_empty() {
                return Err((
                    "public_keys",
                    "give jwks_url or public_keys, not both".into(),
                ));
            }
            check_url(u).map_err(|e| ("jwks_url", e))?;
        }
        let hs256 = self.jwks_url.is_none() && self.public_keys.is_empty();
        match (&self.issuer, hs256) {
            (Some(_), true) => Err((
                "issuer",
                "tokens minted by tcd (no jwks_url, no public_keys) have issuer \"tcd\": leave it unset"
                    .into(),
            )),
            (None, false) => Err(("issuer", "required with jwks_url or public_keys".into())),
            (Some(i), false) if i.is_empty() => Err(("issuer", "must not be empty".into())),
            _ => Ok(()),
        }?;
        if let Some(p) = self.public_keys.iter().find(|p| !p.is_absolute()) {
            return Err((
                "public_keys",
                format!("{} must be an absolute path", p.display()),
            ));
        }
        Ok(())
    }

    fn check_oidc(&self) -> Result<(), AuthRule> {
        need_audience(self)?;
        for (key, on) in [
            ("jwks_url", self.jwks_url.is_some()),
            ("public_keys", !self.public_keys.is_empty()),
        ] {
            if on {
                return Err((
                    key,
                    "not with mode = \"oidc\": the keys come from discovery".into(),
                ));
            }
        }
        let issuer = self
            .issuer
            .as_deref()
            .ok_or(("issuer", "required with mode = \"oidc\"".to_string()))?;
        check_url(issuer).map_err(|e| ("issuer", e))
    }

    /// The keys every mode shares: each broken one.
    fn check_common(&self) -> Vec<AuthRule> {
        let mut broken = Vec::new();
        if self.jwks_refresh_floor_seconds == 0 {
            broken.push(("jwks_refresh_floor_seconds", "must be at least 1".into()));
        }
        if let Some(s) = self.scopes.iter().find(|s| !scope_ok(s)) {
            broken.push((
                "scopes",
                format!("{s:?} is not a scope (printable ASCII, no space, no quote or backslash)"),
            ));
        }
        if let Some(r) = &self.resource {
            match check_url(r) {
                Err(e) => broken.push(("resource", e)),
                Ok(()) if r.contains('#') => {
                    broken.push(("resource", "must not carry a fragment (RFC 9728)".into()))
                }
                Ok(()) => {}
            }
        }
        if let Some(e) = self
            .authorization_servers
            .iter()
            .find_map(|a| check_url(a).err())
        {
            broken.push(("authorization_servers", e));
        }
        broken
    }
}

fn need_audience(a: &HttpAuth) -> Result<(), AuthRule> {
    match a.audience.as_deref() {
        Some(s) if !s.is_empty() => Ok(()),
        _ => Err((
            "audience",
            "required with mode = \"jwt\" or \"oidc\" (the `aud` every token must carry)".into(),
        )),
    }
}

/// A scope token as RFC 6749 3.3 allows it, and safe inside a quoted header parameter.
pub fn scope_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// An `https://` URL, or `http://` to a loopback host (a key source in the clear off this
/// machine could be swapped by anyone on the path).
pub fn check_url(s: &str) -> Result<(), String> {
    let u = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL ({e})"))?;
    if !u.username().is_empty() || u.password().is_some() {
        return Err(format!("{s:?} must not carry credentials"));
    }
    match (u.scheme(), u.host()) {
        ("https", Some(_)) => Ok(()),
        ("http", Some(h)) if host_is_loopback(&h) => Ok(()),
        ("http", Some(_)) => Err(format!(
            "{s:?}: plain http only to a loopback host; use https"
        )),
        _ => Err(format!("{s:?} must be an https:// URL")),
    }
}

fn host_is_loopback(h: &url::Host<&str>) -> bool {
    match h {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(toml_text: &str) -> HttpAuth {
        toml::from_str(toml_text).unwrap()
    }

    fn key(a: &HttpAuth, listen: Option<&str>) -> &'static str {
        a.check(listen).first().expect("a broken rule").0
    }

    #[test]
    fn callers_are_held_to_a_short_safe_charset() {
        for ok in [
            "alice",
            "bob@example.com",
            "svc:ci-1",
            "A.b_c-9",
            &"x".repeat(128),
        ] {
            assert_eq!(check_caller(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            &"x".repeat(129),
            "alice bob",
            "a\nb",
            "a;rm",
            "auth0|123",
            "al\u{0131}ce",
            "$(id)",
            "stdio",
            "http-local",
        ] {
            assert!(check_caller(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn none_takes_no_token_keys_and_no_public_bind() {
        assert!(auth("").check(Some("127.0.0.1:8080")).is_empty());
        assert!(auth("").check(Some("[::1]:8080")).is_empty());
        assert!(auth("").check(None).is_empty());
        assert_eq!(key(&auth(""), Some("0.0.0.0:8080")), "mode");
        assert_eq!(key(&auth(""), Some("192.168.1.2:80")), "mode");
        assert_eq!(key(&auth("audience = \"x\""), None), "audience");
        assert_eq!(key(&auth("scopes = [\"a\"]"), None), "scopes");
    }

    #[test]
    fn jwt_needs_audience_and_an_issuer_for_foreign_keys() {
        let hs = auth("mode = \"jwt\"\naudience = \"tc\"");
        assert!(hs.check(None).is_empty());
        assert_eq!(key(&auth("mode = \"jwt\""), None), "audience");
        assert_eq!(
            key(
                &auth("mode = \"jwt\"\naudience = \"tc\"\nissuer = \"x\""),
                None
            ),
            "issuer"
        );
        let jwks = "mode = \"jwt\"\naudience = \"tc\"\njwks_url = \"https://id.example/jwks\"";
        assert_eq!(key(&auth(jwks), None), "issuer");
        assert!(auth(&format!("{jwks}\nissuer = \"https://id.example\""))
            .check(None)
            .is_empty());
        let both = format!("{jwks}\nissuer = \"i\"\npublic_keys = [\"/k.pem\"]");
        assert_eq!(key(&auth(&both), None), "public_keys");
        let http = "mode = \"jwt\"\naudience = \"tc\"\nissuer = \"i\"\njwks_url = \"http://id.example/jwks\"";
        assert_eq!(key(&auth(http), None), "jwks_url");
        let local = http.replace("id.example", "127.0.0.1:9");
        assert!(auth(&local).check(None).is_empty());
        let rel = "mode = \"jwt\"\naudience = \"tc\"\nissuer = \"i\"\npublic_keys = [\"k.pem\"]";
        assert_eq!(key(&auth(rel), None), "public_keys");
    }

    #[test]
    fn oidc_needs_issuer_url_and_audience() {
        let ok = "mode = \"oidc\"\naudience = \"tc\"\nissuer = \"https://id.example\"";
        assert!(auth(ok).check(None).is_empty());
        assert_eq!(
            key(&auth("mode = \"oidc\"\naudience = \"tc\""), None),
            "issuer"
        );
        assert_eq!(
            key(
                &auth("mode = \"oidc\"\nissuer = \"https://id.example\""),
                None
            ),
            "audience"
        );
        let keys = format!("{ok}\njwks_url = \"https://id.example/j\"");
        assert_eq!(key(&auth(&keys), None), "jwks_url");
        let creds = "mode = \"oidc\"\naudience = \"tc\"\nissuer = \"https://u:p@id.example\"";
        assert_eq!(key(&auth(creds), None), "issuer");
        assert_eq!(
            key(&auth(&format!("{ok}\nscopes = [\"a b\"]")), None),
            "scopes"
        );
        assert_eq!(
            key(
                &auth(&format!("{ok}\njwks_refresh_floor_seconds = 0")),
                None
            ),
            "jwks_refresh_floor_seconds"
        );
        assert_eq!(
            key(
                &auth(&format!("{ok}\nresource = \"https://x/mcp#f\"")),
                None
            ),
            "resource"
        );
    }

    #[test]
    fn the_modes_first_rule_and_every_shared_key_are_reported() {
        let a = auth(
            "mode = \"jwt\"\njwks_refresh_floor_seconds = 0\nscopes = [\"a b\"]\n\
             resource = \"ftp://x\"\nauthorization_servers = [\"https://ok\", \"ftp://no\"]",
        );
        let keys: Vec<_> = a.check(None).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "audience",
                "jwks_refresh_floor_seconds",
                "scopes",
                "resource",
                "authorization_servers"
            ]
        );
    }

    #[test]
    fn validate_names_the_vaults_key() {
        let text =
            "[[vaults]]\nid = \"v\"\nroot = \"/tmp\"\n[vaults.http]\nlisten = \"0.0.0.0:8080\"\n\
                    [vaults.http.auth]\nmode = \"oidc\"\nissuer = \"https://id.example\"\n";
        let e = crate::Config::parse(text, std::path::Path::new("/c.toml")).unwrap_err();
        match e {
            crate::config::ConfigError::Invalid { problems, .. } => {
                let keys: Vec<_> = problems.0.iter().map(|p| p.key.as_str()).collect();
                assert_eq!(keys, ["vaults[0].http.auth.audience"])
            }
            other => panic!("{other}"),
        }
        let ok = format!("{text}audience = \"tc\"\n");
        assert!(crate::Config::parse(&ok, std::path::Path::new("/c.toml")).is_ok());
    }
}
