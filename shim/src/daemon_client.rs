//! The shim's gRPC client of `tcd`: lazy connection (reconnects on the next gated
//! call after a failure), and the mode tcd reports; Raise / Redeem / Release / RecordConsumed / SealState /
//! OpenState / SealCursor / OpenCursor / AppendEvent / VerifyToken (HTTP callers).
//! Deliberately no Mint or MintToken: only the operator mints.

use std::path::PathBuf;

use tc_proto::v1::confirm_client::ConfirmClient;
use tc_proto::v1::{self, Binding};
use tokio::sync::Mutex;
use tonic::transport::Channel;

/// Why a daemon call failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Could not reach the daemon at all (not running, socket missing, transport broke).
    #[error("the tc daemon is unreachable at {socket}: {why}")]
    Unreachable { socket: PathBuf, why: String },
    /// The daemon answered with a refusal (or another error status).
    #[error("{0}")]
    Refused(tonic::Status),
}

impl DaemonError {
    /// The machine-readable refusal reason, if this is a domain refusal.
    pub fn reason(&self) -> Option<tc_core::Reason> {
        match self {
            DaemonError::Refused(s) => tc_proto::reason(s),
            DaemonError::Unreachable { .. } => None,
        }
    }
}

/// What a raise shows the human besides the binding.
#[derive(Debug, Clone, Default)]
pub struct Raise {
    pub summary: String,
    pub args_json: String,
    pub covers: String,
    /// The gate's preview (`preview.rs`); "" when it declares none.
    pub preview: String,
    /// Where the call's file-naming arguments really lead (what grants are matched on).
    pub real_paths: tc_core::grant::RealPaths,
}

/// A raised request: its id, and the live grant that approved it at once, if one did.
#[derive(Debug, Clone, PartialEq)]
pub struct Raised {
    pub request_id: String,
    pub grant_id: Option<String>,
}

/// A lazily connected client.
pub struct Daemon {
    pub socket: PathBuf,
    /// Guarded mode: the uid the daemon must run as (SO_PEERCRED, on every connect).
    daemon_uid: Option<u32>,
    client: Mutex<Option<ConfirmClient<Channel>>>,
    /// The mode tcd reported at the last connect (`Status.mode`); empty until then.
    mode: std::sync::RwLock<String>,
}

impl Daemon {
    /// A client for the socket at `socket`; nothing is connected yet.
    pub fn new(socket: PathBuf) -> Daemon {
        Daemon {
            socket,
            daemon_uid: None,
            client: Mutex::new(None),
            mode: std::sync::RwLock::new(String::new()),
        }
    }

    /// A client that trusts the socket only when it is served by `uid` (guarded mode).
    pub fn checked(socket: PathBuf, uid: u32) -> Daemon {
        Daemon {
            daemon_uid: Some(uid),
            ..Daemon::new(socket)
        }
    }

    /// The policy tcd runs with: its config file's text and path (guarded mode).
    pub async fn policy(&self) -> Result<(String, PathBuf), DaemonError> {
        let mut c = self.client().await?;
        match c.get_policy(v1::GetPolicyRequest {}).await {
            Ok(r) => {
                let r = r.into_inner();
                Ok((r.config_toml, PathBuf::from(r.source)))
            }
            Err(s) => Err(self.fail(s).await),
        }
    }

    fn unreachable(&self, why: impl ToString) -> DaemonError {
        DaemonError::Unreachable {
            socket: self.socket.clone(),
            why: why.to_string(),
        }
    }

    async fn client(&self) -> Result<ConfirmClient<Channel>, DaemonError> {
        let mut guard = self.client.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let channel = match self.daemon_uid {
            Some(uid) => tc_proto::connect_checked(&self.socket, uid).await,
            None => tc_proto::connect(&self.socket).await,
        }
        .map_err(|e| self.unreachable(format!("{e} ({})", source_chain(&e))))?;
        let mut c = ConfirmClient::new(channel);
        let status = c
            .status(v1::StatusRequest {})
            .await
            .map_err(|e| self.unreachable(e.message()))?
            .into_inner();
        if status.protocol != tc_proto::PROTOCOL {
            return Err(self.unreachable(format!(
                "daemon speaks protocol {}, this shim {}",
                status.protocol,
                tc_proto::PROTOCOL
            )));
        }
        *self.mode.write().unwrap_or_else(|p| p.into_inner()) = status.mode;
        *guard = Some(c.clone());
        Ok(c)
    }

    /// Whether a client's `accept` must not approve by itself: anything but a daemon that
    /// said "personal" (an older tcd without the field, too) is treated as guarded.
    pub fn guarded(&self) -> bool {
        self.mode() != "personal"
    }

    /// The mode tcd reported ("personal", "guarded"; "unknown" before any connect).
    pub fn mode(&self) -> String {
        let m = self.mode.read().unwrap_or_else(|p| p.into_inner());
        if m.is_empty() {
            "unknown".into()
        } else {
            m.clone()
        }
    }

    /// Maps an RPC error: transport-level failures drop the connection so the next call reconnects.
    async fn fail(&self, s: tonic::Status) -> DaemonError {
        if tc_proto::reason(&s).is_none()
            && matches!(
                s.code(),
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
            )
        {
            *self.client.lock().await = None;
            return self.unreachable(s.message());
        }
        DaemonError::Refused(s)
    }

    /// Records a raised request (what the human is shown of it: the summary, the full
    /// arguments, what an approval covers); returns its short id, and the grant that
    /// covers it if one does (then it is approved already).
    pub async fn raise(
        &self,
        binding: Binding,
        state_fp: &str,
        text: Raise,
    ) -> Result<Raised, DaemonError> {
        let mut c = self.client().await?;
        let r = c
            .raise(v1::RaiseRequest {
                binding: Some(binding),
                state_fp: state_fp.into(),
                summary: text.summary,
                args_json: text.args_json,
                covers: text.covers,
                preview: text.preview,
                real_paths: text
                    .real_paths
                    .into_iter()
                    .map(|(arg, p)| {
                        let outside = p.is_none();
                        let paths = p.unwrap_or_default();
                        (arg, v1::RealPaths { paths, outside })
                    })
                    .collect(),
            })
            .await;
        match r {
            Ok(r) => {
                let r = r.into_inner();
                let grant_id = Some(r.grant_id).filter(|g| !g.is_empty());
                Ok(Raised {
                    request_id: r.request_id,
                    grant_id,
                })
            }
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Redeems the approval a human gave this call's raised request (`tcctl approve`):
    /// the redemption id, or `not_approved` / `declined` / `expired` / `replay_drift`.
    pub async fn redeem_approved(
        &self,
        binding: Binding,
        current_fp: &str,
    ) -> Result<String, DaemonError> {
        self.redeem_held(binding, current_fp, false).await
    }

    /// [`DaemonClient::redeem_approved`] right after this shim's own raise of the call,
    /// which a grant covered: the only redeem that runs an approval a grant made.
    pub async fn redeem_granted(
        &self,
        binding: Binding,
        current_fp: &str,
    ) -> Result<String, DaemonError> {
        self.redeem_held(binding, current_fp, true).await
    }

    async fn redeem_held(
        &self,
        binding: Binding,
        current_fp: &str,
        under_grant: bool,
    ) -> Result<String, DaemonError> {
        let mut c = self.client().await?;
        match c
            .redeem(v1::RedeemRequest {
                binding: Some(binding),
                current_state_fp: current_fp.into(),
                approved_request: true,
                under_grant,
                ..Default::default()
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().redemption_id),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Spends a token against the call being made now; returns the redemption id.
    pub async fn redeem(
        &self,
        token: &str,
        binding: Binding,
        current_fp: &str,
    ) -> Result<String, DaemonError> {
        let mut c = self.client().await?;
        match c
            .redeem(v1::RedeemRequest {
                token: token.into(),
                binding: Some(binding),
                current_state_fp: current_fp.into(),
                ..Default::default()
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().redemption_id),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// The status of raised request `id` in `vault` ("pending", "approved", "declined",
    /// "expired"), or `None` when tcd no longer lists it.
    pub async fn request_status(
        &self,
        vault: &str,
        id: &str,
    ) -> Result<Option<String>, DaemonError> {
        let mut c = self.client().await?;
        match c
            .list_pending(v1::ListPendingRequest {
                vault: vault.into(),
            })
            .await
        {
            Ok(r) => Ok(r
                .into_inner()
                .requests
                .into_iter()
                .find(|p| p.request_id == id)
                .map(|p| p.status)),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Declines the raised request `id` (the human said no in the MCP client).
    pub async fn decline(&self, id: &str, reason: &str) -> Result<(), DaemonError> {
        let mut c = self.client().await?;
        match c
            .decline(v1::DeclineRequest {
                request_id: id.into(),
                reason: reason.into(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Gives a redemption's token back (nothing ran).
    pub async fn release(&self, redemption_id: &str, reason: &str) -> Result<(), DaemonError> {
        let mut c = self.client().await?;
        match c
            .release(v1::ReleaseRequest {
                redemption_id: redemption_id.into(),
                reason: reason.into(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Records that the gated call was forwarded (`tc.elicit.consumed`) by `route`
    /// (`cli_token` with its redemption, `legacy_elicitation` or `request_state`).
    pub async fn consumed(
        &self,
        binding: Binding,
        state_fp: &str,
        route: &str,
        redemption_id: &str,
    ) -> Result<(), DaemonError> {
        let mut c = self.client().await?;
        match c
            .record_consumed(v1::RecordConsumedRequest {
                binding: Some(binding),
                state_fp: state_fp.into(),
                route: route.into(),
                redemption_id: redemption_id.into(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) => Err(self.fail(s).await),
        }
    }
}

impl Daemon {
    /// Seals a confirmation state for the call `binding` against target state `state_fp`,
    /// carrying `inner` (empty for our own confirmation; a downstream's state otherwise).
    pub async fn seal_state(
        &self,
        binding: Binding,
        state_fp: &str,
        inner: Vec<u8>,
    ) -> Result<String, DaemonError> {
        let mut c = self.client().await?;
        match c
            .seal_state(v1::SealStateRequest {
                binding: Some(binding),
                state_fp: state_fp.into(),
                inner,
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().request_state),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Opens a sealed state for `binding`. With `consume` it is spent; a non-empty
    /// `current_fp` that differs from the sealed fingerprint is refused as `replay_drift`.
    /// Returns what it was sealed with (fingerprint and inner bytes).
    pub async fn open_state(
        &self,
        state: &str,
        binding: Binding,
        consume: bool,
        current_fp: &str,
    ) -> Result<v1::OpenStateReply, DaemonError> {
        let mut c = self.client().await?;
        match c
            .open_state(v1::OpenStateRequest {
                request_state: state.into(),
                binding: Some(binding),
                consume,
                current_state_fp: current_fp.into(),
            })
            .await
        {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Appends one of the client-appendable audit events for the call `binding`.
    pub async fn append_event(
        &self,
        kind: &str,
        binding: &Binding,
        state_fp: &str,
        detail: serde_json::Value,
    ) -> Result<(), DaemonError> {
        self.append(v1::AppendEventRequest {
            kind: kind.into(),
            vault: binding.vault.clone(),
            tool: binding.tool.clone(),
            caller: binding.caller.clone(),
            args_hash: binding.args_hash.clone(),
            state_fp: state_fp.into(),
            detail_json: detail.to_string(),
        })
        .await
    }
}

/// The governor's uses of the daemon: paging cursors and its audit events.
impl Daemon {
    /// Seals a paging cursor for `binding` at `position`.
    pub async fn seal_cursor(
        &self,
        binding: Binding,
        position: Vec<u8>,
    ) -> Result<String, DaemonError> {
        let mut c = self.client().await?;
        match c
            .seal_cursor(v1::SealCursorRequest {
                binding: Some(binding),
                position,
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().cursor),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Opens a cursor presented with the call being made now; returns its position.
    pub async fn open_cursor(
        &self,
        cursor: &str,
        binding: Binding,
    ) -> Result<Vec<u8>, DaemonError> {
        let mut c = self.client().await?;
        match c
            .open_cursor(v1::OpenCursorRequest {
                cursor: cursor.into(),
                binding: Some(binding),
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().position),
            Err(s) => Err(self.fail(s).await),
        }
    }

    /// Appends a client-appendable event (e.g. `tc.governor.overflow`) as given.
    pub async fn append(&self, ev: v1::AppendEventRequest) -> Result<(), DaemonError> {
        let mut c = self.client().await?;
        match c.append_event(ev).await {
            Ok(_) => Ok(()),
            Err(s) => Err(self.fail(s).await),
        }
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}

/// tcd's `VerifyToken` for the HTTP front's `[vaults.http.auth] mode = "jwt"` without
/// keys: `tc_auth::Verifier` asks through this (and caches what tcd accepted).
impl tc_auth::TcdTokens for Daemon {
    fn verify_token<'a>(
        &'a self,
        token: &'a str,
        audience: &'a str,
    ) -> tc_auth::tcd::VerifyFuture<'a> {
        use tc_auth::TcdRefusal;
        Box::pin(async move {
            let mut c = self.client().await.map_err(|_| TcdRefusal::Unavailable)?;
            let req = v1::VerifyTokenRequest {
                token: token.into(),
                audience: audience.into(),
            };
            match c.verify_token(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    Ok(tc_auth::Verified {
                        sub: r.sub,
                        scopes: r.scopes,
                        exp: r.exp,
                    })
                }
                Err(s) => Err(match self.fail(s).await.reason() {
                    Some(tc_core::Reason::Expired) => TcdRefusal::Expired,
                    Some(_) => TcdRefusal::Invalid,
                    None => TcdRefusal::Unavailable,
                }),
            }
        })
    }
}
