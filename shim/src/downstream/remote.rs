//! The remote server as configured: its URL and the headers sent with every request
//! (`[vaults.headers]`, the bearer token read once at start), and the MCP headers that
//! mirror one message's body (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`).

use std::sync::Arc;

use anyhow::{bail, Context};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use tc_core::config::VaultConfig;

use crate::wire::mcp_headers;
pub use crate::wire::peek::Peek;

/// Where the remote server is and what every request to it carries. The header values
/// (the bearer token among them) are secrets: Debug shows names only. Shared, not copied:
/// the HTTP front holds one per conversation.
#[derive(Clone)]
pub struct Remote(Arc<Target>);

/// What a [`Remote`] shares (reached through it: `remote.url`, `remote.headers`).
pub struct Target {
    pub url: url::Url,
    pub headers: HeaderMap,
    /// The vault's `ca_file` (PEM), read at start; empty without one.
    pub ca: Vec<u8>,
}

impl std::ops::Deref for Remote {
    type Target = Target;

    fn deref(&self) -> &Target {
        &self.0
    }
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("Remote")
            .field("url", &self.shown())
            .field("headers", &format_args!("{names:?} (values redacted)"))
            .finish()
    }
}

impl Remote {
    /// The connections to this server (one pool, shared by whoever clones it).
    pub fn client(&self) -> anyhow::Result<super::client::Client> {
        let proxies = [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
        ];
        if let Some(p) = proxies.iter().find(|p| std::env::var_os(p).is_some()) {
            tracing::warn!("{p} is set, but tc-shim connects to the remote MCP server {} directly (it uses no proxy)", self.shown());
        }
        super::client::Client::new(&self.url, &self.ca)
            .with_context(|| format!("remote MCP server {}", self.shown()))
    }

    /// The url for logs and errors (no query string: it may hold a key).
    pub fn shown(&self) -> std::borrow::Cow<'_, str> {
        tc_core::config::shown_url(self.url.as_str())
    }

    /// The vault's `url`, headers and bearer token (read now, from its file or variable).
    pub fn from_config(v: &VaultConfig) -> anyhow::Result<Remote> {
        let Some(url) = &v.url else {
            bail!("vault {:?} has no url", v.id)
        };
        let url = url::Url::parse(url).with_context(|| format!("vault {:?}: url", v.id))?;
        let mut headers = HeaderMap::new();
        for (k, val) in &v.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .with_context(|| format!("[vaults.headers] {k:?} is not a header name"))?;
            let mut value = HeaderValue::from_str(val)
                .map_err(|_| anyhow::anyhow!("[vaults.headers] {k}: invalid value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        if let Some(b) = &v.bearer {
            headers.insert(AUTHORIZATION, bearer(b)?);
        }
        let ca = match &v.ca_file {
            Some(f) => std::fs::read(f).with_context(|| {
                format!("vault {:?}: cannot read ca_file {}", v.id, f.display())
            })?,
            None => Vec::new(),
        };
        Ok(Remote(Arc::new(Target { url, headers, ca })))
    }
}

/// `Bearer <token>` from the file or variable; the token itself is never in a message.
fn bearer(b: &tc_core::config::Bearer) -> anyhow::Result<HeaderValue> {
    let (token, from) = match (&b.file, &b.env) {
        (Some(f), None) => (
            std::fs::read_to_string(f)
                .with_context(|| format!("[vaults.bearer] cannot read {}", f.display()))?,
            format!("file {}", f.display()),
        ),
        (None, Some(e)) => (
            std::env::var(e).map_err(|_| {
                anyhow::anyhow!(
                    "[vaults.bearer] environment variable {e} is not set (or not UTF-8)"
                )
            })?,
            format!("environment variable {e}"),
        ),
        _ => bail!("[vaults.bearer]: give exactly one of file or env"),
    };
    let token = token.trim();
    // RFC 6750 token68 characters: nothing that could end or split the header.
    let ok = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
    if token.is_empty() || !token.chars().all(ok) {
        bail!("[vaults.bearer] the token in {from} is empty or not a valid bearer token");
    }
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        anyhow::anyhow!("[vaults.bearer] the token in {from} is not a valid header")
    })?;
    v.set_sensitive(true);
    Ok(v)
}

impl Peek {
    /// The headers a 2026-07-28 request carries mirroring its body.
    pub fn mirror(&self, h: &mut HeaderMap) {
        let (Some(v), Some(m)) = (&self.modern, &self.method) else {
            return;
        };
        for (name, value) in [
            ("mcp-protocol-version", Some(v.as_str())),
            ("mcp-method", Some(m.as_str())),
            ("mcp-name", self.name.as_deref()),
        ] {
            if let Some(val) =
                value.and_then(|x| HeaderValue::from_str(&mcp_headers::encode(x)).ok())
            {
                h.insert(HeaderName::from_static(name), val);
            }
        }
    }
}

/// A session id or protocol version the server gave: visible ASCII, bounded.
pub fn server_token(v: &[u8]) -> Option<HeaderValue> {
    let ok = !v.is_empty() && v.len() <= 1024 && v.iter().all(|b| (0x21..=0x7e).contains(b));
    ok.then(|| HeaderValue::from_bytes(v).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    #[test]
    fn a_modern_call_mirrors_method_name_and_version() {
        let line = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
            "name":"echo","arguments":{},"_meta":{crate::wire::era::META_VERSION:"2026-07-28"}}});
        let p = Peek::of(line.to_string().as_bytes());
        assert!(p.is_request());
        let mut h = HeaderMap::new();
        p.mirror(&mut h);
        assert_eq!(h["mcp-method"], "tools/call");
        assert_eq!(h["mcp-name"], "echo");
        assert_eq!(h["mcp-protocol-version"], "2026-07-28");
        let line = json!({"jsonrpc":"2.0","id":4,"method":"resources/read","params":{
            "uri":"file:///é x","_meta":{crate::wire::era::META_VERSION:"2026-07-28"}}});
        let mut h = HeaderMap::new();
        Peek::of(line.to_string().as_bytes()).mirror(&mut h);
        assert_eq!(
            h["mcp-name"],
            format!(
                "=?base64?{}?=",
                base64::engine::general_purpose::STANDARD.encode("file:///é x")
            )
        );
    }

    #[test]
    fn a_legacy_message_gets_no_mirror_headers() {
        let line = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}});
        let mut h = HeaderMap::new();
        Peek::of(line.to_string().as_bytes()).mirror(&mut h);
        assert!(h.is_empty());
        let cancel =
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}});
        let p = Peek::of(cancel.to_string().as_bytes());
        assert!(!p.is_request());
        assert_eq!(p.cancels, Some(json!(3)));
    }

    #[test]
    fn server_tokens_are_visible_ascii() {
        assert!(server_token(b"abc-123").is_some());
        assert!(server_token(b"a b").is_none());
        assert!(server_token(b"a\r\n").is_none());
        assert!(server_token(b"").is_none());
    }

    #[test]
    fn the_bearer_token_never_shows_in_debug_or_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tok");
        std::fs::write(&f, "s3cr3t-T0ken\n").unwrap();
        let text = format!(
            "[[vaults]]\nid = \"r\"\nurl = \"http://127.0.0.1:9/mcp\"\n[vaults.headers]\nX-Api-Key = \"k3y\"\n[vaults.bearer]\nfile = \"{}\"\n",
            f.display()
        );
        let cfg = tc_core::Config::parse(&text, std::path::Path::new("/c.toml")).unwrap();
        let r = Remote::from_config(cfg.vault("r").unwrap()).unwrap();
        assert_eq!(r.headers[AUTHORIZATION], "Bearer s3cr3t-T0ken");
        let dbg = format!("{r:?} {:?}", r.headers);
        assert!(!dbg.contains("s3cr3t") && !dbg.contains("k3y"), "{dbg}");
        std::fs::write(&f, "bad token with spaces s3cr3t").unwrap();
        let e = Remote::from_config(cfg.vault("r").unwrap()).unwrap_err();
        assert!(!format!("{e:#}").contains("s3cr3t"), "{e:#}");
    }
}
