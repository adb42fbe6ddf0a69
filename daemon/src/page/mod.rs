//! The approval page: tcd serves the raised requests, Approve (passkey, or TOTP in
//! guarded mode), Decline and the history on loopback HTTP, from its own runtime, to the
//! human whose `tcctl page` link opened the session, and to nobody else.
//!
//! - [`listen_addr`]: `[approvals] listen`, refused unless loopback.
//! - [`start`]: binds and serves until `draining` flips; [`start_remote`] the same for
//!   [`remote`]: the page over HTTPS off the machine (`[approvals] remote`), behind a
//!   passkey sign-in; its certificate in [`tls`].
//! - A request's view is `/requests/<ID>` (`ApprovalsConfig::request_url`); a session is
//!   opened at `/open?t=…` ([`links`]).

pub mod answer;
pub mod assets;
pub mod checks;
pub mod codes;
pub mod grants;
pub mod history;
pub mod links;
pub mod passkeys;
pub mod peer;
pub mod remote;
pub mod routes;
pub mod rpc;
pub mod security;
pub mod sse;
pub mod tls;
pub mod view;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tc_core::config::RemoteSpec;
use tokio::task::JoinHandle;

use crate::ledger::Ledger;
use crate::shutdown::Switch;

/// Everything a handler needs.
pub struct Page {
    /// Where the page listens (the server end of every connection, `peer.rs`).
    pub addr: SocketAddr,
    pub ledger: Arc<Ledger>,
    pub guard: security::Guard,
    pub sessions: security::Sessions,
    pub webauthn: webauthn_rs::Webauthn,
    pub draining: Switch,
    /// Wrong registration codes typed in each human's sessions (their codes are voided
    /// past a limit).
    pub code_failures: Mutex<HashMap<u32, u32>>,
    /// Set on the remote page (`remote.rs`): no peer uids, a sign-in, HTTPS.
    pub remote: Option<remote::Remote>,
}

/// Who a page session shows things to, and what it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Viewer {
    pub uid: u32,
    /// Sees every human's requests (personal mode's one human; root in guarded mode).
    pub all: bool,
    /// May look but not approve or decline (root in guarded mode: each human answers
    /// their own requests).
    pub read_only: bool,
}

impl Page {
    /// The viewer a session of `uid` is.
    pub fn viewer(&self, uid: u32) -> Viewer {
        match self.ledger.mode() {
            tc_core::config::Mode::Personal => Viewer {
                uid,
                all: true,
                read_only: false,
            },
            tc_core::config::Mode::Guarded => Viewer {
                uid,
                all: uid == 0,
                read_only: uid == 0,
            },
        }
    }

    /// Counts a wrong registration code typed in one of `uid`'s sessions; true when that
    /// was one too many, and `uid`'s codes are to be voided (the count starts again).
    pub fn code_failure(&self, uid: u32) -> bool {
        let mut m = self.code_failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(uid).or_default();
        *n += 1;
        if *n >= codes::MAX_FAILURES {
            m.remove(&uid);
            return true;
        }
        false
    }
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
    let addr = listener.local_addr()?;
    let page = Arc::new(Page {
        addr,
        ledger,
        guard: security::Guard::new(addr),
        sessions: security::Sessions::default(),
        webauthn,
        draining: draining.clone(),
        code_failures: Default::default(),
        remote: None,
    });
    let app = routes::router(page);
    tracing::info!(url = %tc_core::config::ApprovalsConfig::page_url(addr), "approval page ready");
    Ok(tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(draining.flipped())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the approval page stopped");
        }
    }))
}

/// Binds `spec.listen` (at start: a taken port fails tcd's start) and serves the remote
/// page ([`remote`]) over TLS until `draining` flips.
pub async fn start_remote(
    spec: &RemoteSpec,
    served: &tls::Served,
    ledger: Arc<Ledger>,
    draining: Switch,
) -> anyhow::Result<JoinHandle<()>> {
    let tcp = tokio::net::TcpListener::bind(spec.listen)
        .await
        .with_context(|| format!("[approvals] remote: cannot listen on {}", spec.listen))?;
    let addr: SocketAddr = tcp.local_addr()?;
    let listener = tls::Listener::new(tcp, served.config.clone())?;
    let page = Arc::new(Page {
        addr,
        ledger,
        guard: security::Guard::remote(spec),
        sessions: security::Sessions::default(),
        webauthn: remote::webauthn(spec)?,
        draining: draining.clone(),
        code_failures: Default::default(),
        remote: Some(remote::Remote::new(spec.origin.clone())),
    });
    let app = routes::router(page);
    tracing::info!(url = %spec.origin, listen = %addr, "approval page (remote) ready");
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, app.into_make_service())
            .with_graceful_shutdown(draining.flipped())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the remote approval page stopped");
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
            remote: None,
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
