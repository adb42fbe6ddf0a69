//! The remote page's TLS: its certificate (files named in the config, or a self-signed
//! pair tcd makes once and keeps), the fingerprints `tcctl status` shows, and a listener
//! that hands axum only connections whose handshake finished.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use sha2::{Digest, Sha256};
use tc_core::config::CertSource;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A handshake not finished by then is dropped (a client that opens connections and sends
/// nothing holds no task for long).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once; past it new connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 64;

/// The certificate served, and what identifies it.
pub struct Served {
    pub config: Arc<ServerConfig>,
    /// SHA-256 of the leaf certificate, `AB:CD:…` (what a browser's certificate viewer shows).
    pub cert_sha256: String,
    /// base64 SHA-256 of its public key (SPKI): a pin that survives re-issuing with the same key.
    pub spki_sha256: String,
}

/// Where a self-signed pair is kept: `<cache_dir>/page-tls/{cert,key}.pem`.
pub fn self_signed_paths(cache_dir: &Path) -> (PathBuf, PathBuf) {
    let d = cache_dir.join("page-tls");
    (d.join("cert.pem"), d.join("key.pem"))
}

/// Loads (or, for a self-signed one not made yet, makes) the certificate for `host`.
pub fn load(src: &CertSource, host: &str, cache_dir: &Path) -> anyhow::Result<Served> {
    let (cert, key) = match src {
        CertSource::Files { cert, key } => (cert.clone(), key.clone()),
        CertSource::SelfSigned => {
            let (cert, key) = self_signed_paths(cache_dir);
            if !cert.exists() || !key.exists() {
                make_self_signed(host, &cert, &key)?;
            }
            (cert, key)
        }
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .with_context(|| pem_problem("tls_cert", &cert, "a PEM certificate chain"))?;
    let leaf = chain
        .first()
        .with_context(|| {
            format!(
                "[approvals] remote.tls_cert {}: no certificate in it",
                cert.display()
            )
        })?
        .clone();
    let pk = PrivateKeyDer::from_pem_file(&key)
        .with_context(|| pem_problem("tls_key", &key, "a PEM private key"))?;
    let config = ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, pk)
    .with_context(|| {
        format!(
            "[approvals] remote: {} and {} do not make a usable pair",
            cert.display(),
            key.display()
        )
    })?;
    Ok(Served {
        config: Arc::new(config),
        cert_sha256: colon_hex(&Sha256::digest(leaf.as_ref())),
        spki_sha256: spki_sha256(&leaf)?,
    })
}

/// What is wrong with `path` at `key`: unreadable, or not `what`.
fn pem_problem(key: &str, path: &Path, what: &str) -> String {
    match std::fs::File::open(path) {
        Err(_) => format!(
            "[approvals] remote.{key} {}: cannot read it",
            path.display()
        ),
        Ok(_) => format!("[approvals] remote.{key} {}: not {what}", path.display()),
    }
}

fn colon_hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn spki_sha256(leaf: &CertificateDer<'_>) -> anyhow::Result<String> {
    let (_, c) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| anyhow::anyhow!("[approvals] remote.tls_cert: unreadable certificate: {e}"))?;
    let spki = Sha256::digest(c.public_key().raw);
    Ok(base64::engine::general_purpose::STANDARD.encode(spki))
}

/// A new self-signed pair for `host`, the key written owner-only.
fn make_self_signed(host: &str, cert: &Path, key: &Path) -> anyhow::Result<()> {
    let made = rcgen::generate_simple_self_signed(vec![host.to_string()])
        .context("[approvals] remote: making a self-signed certificate")?;
    let dir = cert.parent().context("certificate path")?;
    crate::fsutil::ensure_private_dir(dir).with_context(|| dir.display().to_string())?;
    let key_pem = made.signing_key.serialize_pem();
    write_private(key, key_pem.as_bytes())?;
    write_private(cert, made.cert.pem().as_bytes())?;
    tracing::info!(cert = %cert.display(), "approval page: made a self-signed certificate");
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| tmp.display().to_string())?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| path.display().to_string())
}

/// Accepts TCP connections and finishes their TLS handshakes on their own tasks (one slow
/// client never holds up another's); axum sees only finished ones.
pub struct Listener {
    rx: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl Listener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Listener> {
        let local = tcp.local_addr()?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let acceptor = TlsAcceptor::from(config);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                // Serving ended (the listener was dropped): the port is let go at once.
                let accepted = tokio::select! {
                    _ = tx.closed() => return,
                    a = tcp.accept() => a,
                };
                let (sock, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "approval page (remote): accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, to_axum) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let shake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock));
                    match shake.await {
                        Ok(Ok(tls)) => {
                            drop(slot);
                            let _ = to_axum.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "approval page (remote): TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "approval page (remote): TLS handshake timed out")
                        }
                    }
                });
            }
        });
        Ok(Listener { rx, local })
    }
}

impl axum::serve::Listener for Listener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task ended (it never does while this listener lives): wait for
            // the shutdown that ends serving.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_pair_is_made_once_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let a = load(&CertSource::SelfSigned, "tc.example", d.path()).unwrap();
        let b = load(&CertSource::SelfSigned, "tc.example", d.path()).unwrap();
        assert_eq!(a.cert_sha256, b.cert_sha256, "kept, not made again");
        assert_eq!(a.cert_sha256.len(), 32 * 3 - 1);
        let (_, key) = self_signed_paths(d.path());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let bad = CertSource::Files {
            cert: key.clone(),
            key: key.clone(),
        };
        let e = load(&bad, "tc.example", d.path()).err().unwrap();
        assert!(format!("{e:#}").contains("remote.tls_cert"), "{e:#}");
    }
}
