//! `[approvals] remote`: the approval page served over HTTPS on a network address (for a
//! phone), the address it answers to (`public_url`) and its certificate: config types only.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// `[approvals] remote = { listen, public_url, tls_cert, tls_key }` or `tls = "self-signed"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemotePage {
    /// `ADDR:PORT` the HTTPS listener binds (any address, a fixed port).
    pub listen: String,
    /// The URL the phone opens, `https://NAME[:PORT]`: its host is the WebAuthn relying
    /// party (a DNS name, never an IP address) and the only `Host`/`Origin` answered.
    pub public_url: String,
    /// PEM certificate chain and private key (both or neither).
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// `"self-signed"`: tcd makes a key pair for `public_url`'s host in its cache
    /// directory on first start and keeps it (its fingerprint: `tcctl status`).
    #[serde(default)]
    pub tls: Option<RemoteTls>,
}

/// Where the certificate comes from when no files are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteTls {
    SelfSigned,
}

/// The certificate the remote page serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    Files { cert: PathBuf, key: PathBuf },
    SelfSigned,
}

/// `[approvals] remote`, checked: what tcd serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSpec {
    pub listen: SocketAddr,
    /// `https://host[:port]`, no path: the WebAuthn origin and the only `Origin` accepted.
    pub origin: String,
    /// The WebAuthn relying party id (the host, lower case).
    pub rp_id: String,
    /// The `Host` header the page answers to (`host`, or `host:port` off 443).
    pub host: String,
    pub cert: CertSource,
}

/// A broken rule: the key under `[approvals] remote` and why.
pub type RemoteProblem = (&'static str, String);

fn bad(key: &'static str, why: impl std::fmt::Display) -> RemoteProblem {
    (key, why.to_string())
}

impl RemotePage {
    /// The checked form, or every rule broken, each naming its key.
    pub fn spec(&self) -> Result<RemoteSpec, Vec<RemoteProblem>> {
        let mut errs = Vec::new();
        let listen = match self.listen.trim().parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 => Some(a),
            Ok(_) => {
                errs.push(bad(
                    "listen",
                    "give a fixed port (the phone's URL must not change)",
                ));
                None
            }
            Err(_) => {
                let why = format!("{:?} is not ADDR:PORT, e.g. \"0.0.0.0:8443\"", self.listen);
                errs.push(bad("listen", why));
                None
            }
        };
        let url = public_url(&self.public_url).map_err(|e| errs.push(bad("public_url", e)));
        let cert = match (&self.tls_cert, &self.tls_key, self.tls) {
            (Some(c), Some(k), None) => Some(CertSource::Files {
                cert: c.clone(),
                key: k.clone(),
            }),
            (None, None, Some(RemoteTls::SelfSigned)) => Some(CertSource::SelfSigned),
            (None, None, None) => {
                errs.push(bad(
                    "tls_cert",
                    "give tls_cert and tls_key, or tls = \"self-signed\"",
                ));
                None
            }
            (Some(_), Some(_), Some(_)) => {
                errs.push(bad(
                    "tls",
                    "give tls_cert and tls_key, or tls = \"self-signed\", not both",
                ));
                None
            }
            (c, _, _) => {
                let missing = if c.is_some() { "tls_key" } else { "tls_cert" };
                errs.push(bad(missing, "tls_cert and tls_key go together"));
                None
            }
        };
        match (listen, url, cert) {
            (Some(listen), Ok((origin, rp_id, host)), Some(cert)) if errs.is_empty() => {
                Ok(RemoteSpec {
                    listen,
                    origin,
                    rp_id,
                    host,
                    cert,
                })
            }
            _ => Err(errs),
        }
    }
}

/// `https://NAME[:PORT][/]` → (origin, relying party id, `Host` value).
fn public_url(s: &str) -> Result<(String, String, String), String> {
    let u = url::Url::parse(s.trim()).map_err(|e| format!("{s:?} is not a URL ({e})"))?;
    if u.scheme() != "https" {
        return Err(format!(
            "{s:?} must be https:// (passkeys and the session cookie need it)"
        ));
    }
    let host = match u.host() {
        Some(url::Host::Domain(d)) if d.contains('.') || d == "localhost" => d.to_string(),
        Some(url::Host::Domain(_)) | None => {
            return Err(format!(
                "{s:?} needs a DNS name with a dot, e.g. https://tc.home.arpa:8443"
            ))
        }
        Some(_) => {
            return Err(format!(
                "{s:?} names an IP address: a passkey's relying party must be a DNS name \
                 (give the machine a name, e.g. in /etc/hosts or your router's DNS)"
            ))
        }
    };
    if u.path() != "/" || u.query().is_some() || u.fragment().is_some() || !u.username().is_empty()
    {
        return Err(format!(
            "{s:?}: give scheme, host and port only (no path, query or user)"
        ));
    }
    let authority = match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    Ok((format!("https://{authority}"), host, authority))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> Result<RemoteSpec, Vec<RemoteProblem>> {
        let r: RemotePage = toml::from_str(toml_text).unwrap();
        r.spec()
    }

    #[test]
    fn a_named_https_url_and_a_certificate_make_a_spec() {
        let s = spec("listen = \"10.77.0.1:8443\"\npublic_url = \"https://TC.example:8443/\"\ntls = \"self-signed\"").unwrap();
        assert_eq!(s.origin, "https://tc.example:8443");
        assert_eq!(s.rp_id, "tc.example");
        assert_eq!(s.host, "tc.example:8443");
        assert_eq!(s.cert, CertSource::SelfSigned);
        let s = spec("listen = \"0.0.0.0:443\"\npublic_url = \"https://tc.example\"\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"").unwrap();
        assert_eq!(
            (s.origin.as_str(), s.host.as_str()),
            ("https://tc.example", "tc.example")
        );
    }

    #[test]
    fn every_broken_rule_names_its_key() {
        for (text, key) in [
            ("listen = \"0.0.0.0:0\"\npublic_url = \"https://a.b\"\ntls = \"self-signed\"", "listen"),
            ("listen = \"nope\"\npublic_url = \"https://a.b\"\ntls = \"self-signed\"", "listen"),
            ("listen = \"0.0.0.0:1\"\npublic_url = \"http://a.b\"\ntls = \"self-signed\"", "public_url"),
            ("listen = \"0.0.0.0:1\"\npublic_url = \"https://10.0.0.1\"\ntls = \"self-signed\"", "public_url"),
            ("listen = \"0.0.0.0:1\"\npublic_url = \"https://a.b/x\"\ntls = \"self-signed\"", "public_url"),
            ("listen = \"0.0.0.0:1\"\npublic_url = \"https://a.b\"", "tls_cert"),
            ("listen = \"0.0.0.0:1\"\npublic_url = \"https://a.b\"\ntls_cert = \"c\"", "tls_key"),
            ("listen = \"0.0.0.0:1\"\npublic_url = \"https://a.b\"\ntls_cert = \"c\"\ntls_key = \"k\"\ntls = \"self-signed\"", "tls"),
        ] {
            let e = spec(text).unwrap_err();
            assert!(e.iter().any(|(k, _)| *k == key), "{text}: {e:?}");
        }
        assert!(
            toml::from_str::<RemotePage>("listen = \"a\"\npublic_url = \"b\"\nport = 1").is_err()
        );
    }
}
