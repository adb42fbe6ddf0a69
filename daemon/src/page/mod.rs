//! The approval page (DESIGN 11): tcd serves the raised requests, Approve (passkey, or
//! TOTP in guarded mode), Decline and the history on loopback HTTP, from its own runtime.
//!
//! - [`listen_addr`]: `[approvals] listen`, refused unless loopback.
//! - [`start`]: binds and serves until `draining` flips.
//! - A request's view is `/requests/<ID>` (`ApprovalsConfig::request_url`).

pub mod assets;
pub mod codes;
pub mod history;
pub mod passkeys;
pub mod routes;
pub mod security;
pub mod sse;
pub mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::task::JoinHandle;

use crate::ledger::Ledger;
use crate::shutdown::Switch;

/// Everything a handler needs.
pub struct Page {
    pub ledger: Arc<Ledger>,
    pub guard: security::Guard,
    pub sessions: security::Sessions,
    pub webauthn: webauthn_rs::Webauthn,
    pub draining: Switch,
    /// Wrong registration codes typed so far (all codes are voided past a limit).
    pub code_failures: std::sync::atomic::AtomicU32,
}

/// `[approvals] listen`, parsed: None when unset; an error for anything not loopback.
pub fn listen_addr(cfg: &tc_core::config::ApprovalsConfig) -> anyhow::Result<Option<SocketAddr>> {
    cfg.listen_addr().map_err(anyhow::Error::msg)
}

/// Binds the page's socket (at start, so a taken port fails tcd's start with a clear
/// error) and serves it on the current runtime until `draining` flips.
pub async fn start(
    addr: SocketAddr,
    ledger: Arc<Ledger>,
    draining: Switch,
) -> anyhow::Result<JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("approval page: cannot listen on {addr}"))?;
    let webauthn = passkeys::webauthn(addr.port())?;
    let page = Arc::new(Page {
        ledger,
        guard: security::Guard::new(addr),
        sessions: security::Sessions::default(),
        webauthn,
        draining: draining.clone(),
        code_failures: Default::default(),
    });
    let app = routes::router(page);
    tracing::info!(url = %tc_core::config::ApprovalsConfig::page_url(addr), "approval page ready");
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(draining.flipped())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the approval page stopped");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tc_core::config::ApprovalsConfig;

    fn parse(s: &str) -> anyhow::Result<Option<SocketAddr>> {
        listen_addr(&ApprovalsConfig {
            listen: Some(s.into()),
        })
    }

    #[test]
    fn listen_must_be_loopback_with_a_port() {
        assert_eq!(listen_addr(&ApprovalsConfig::default()).unwrap(), None);
        assert!(parse("127.0.0.1:7777").unwrap().is_some());
        assert!(parse("[::1]:7777").unwrap().is_some());
        for bad in [
            "0.0.0.0:7777",
            "192.168.1.2:7777",
            "[::]:7777",
            "localhost",
            "127.0.0.1:0",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
