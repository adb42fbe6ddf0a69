//! The tc.v1 `Confirm` service: turns RPCs into [`Ledger`] calls on the store thread
//! and results into replies, with the one error mapping from [`crate::error`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tc_proto::v1::{self, confirm_server::Confirm};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use tc_core::config::Mode;
use tc_core::Reason;

use crate::auth;
use crate::error::DaemonError;
use crate::factor::{self, Approver};
use crate::ledger::Ledger;
use crate::page;
use crate::record::{Binding, NewEvent};
use crate::shutdown::Switch;

/// Everything `Status` reports besides the ledger.
pub struct Info {
    pub socket: PathBuf,
    pub cache_dir: PathBuf,
    pub started: Instant,
    /// The config file tcd loaded and its text (`GetPolicy`).
    pub policy: Option<(PathBuf, String)>,
    /// Where the approval page listens, when it is on (`OpenPage`).
    pub page: Option<SocketAddr>,
    /// The remote page, when it is on (`OpenPage`, `Status`).
    pub remote: Option<RemoteInfo>,
}

/// The remote page as `Status` shows it and its links start.
#[derive(Debug, Clone, Default)]
pub struct RemoteInfo {
    pub origin: String,
    pub cert_sha256: String,
    pub spki_sha256: String,
}

/// The service object.
pub struct Service {
    ledger: Arc<Ledger>,
    info: Arc<Info>,
    draining: Switch,
}

impl Service {
    /// `draining` flips at shutdown: `ListEvents --follow` streams then end with
    /// `unavailable` instead of holding their connection open through the grace.
    pub fn new(ledger: Arc<Ledger>, info: Info, draining: Switch) -> Self {
        Service {
            ledger,
            info: Arc::new(info),
            draining,
        }
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Ledger) -> Result<T, DaemonError> + Send + 'static,
    ) -> Result<T, DaemonError> {
        // The ledger call runs on the store thread, grouped with whatever else is queued,
        // and its result comes back only after that group's commit.
        let ledger = self.ledger.clone();
        self.ledger.store.call(move || f(&ledger)).await
    }
}

impl Service {
    /// Who approves with request `r`: its peer and the code it carries. In guarded mode a
    /// request whose peer the transport cannot name approves nothing.
    fn approver<T>(&self, r: &Request<T>, f: Option<&v1::Factor>) -> Result<Approver, DaemonError> {
        let code = f.map(|f| f.totp.clone());
        match auth::peer(r) {
            Some(p) => Ok(Approver { uid: p.uid, code }),
            None if self.ledger.mode() == Mode::Personal => Ok(Approver { uid: 0, code }),
            None => Err(DaemonError::refused(
                Reason::NotPermitted,
                "guarded mode: the caller's uid is unknown",
            )),
        }
    }

    /// The human whose factor an Enroll/Confirm/Unlock request names, after checking that
    /// this is guarded mode and the caller root (also enforced centrally: defence in depth).
    fn factor_user<T>(&self, r: &Request<T>, user: &str) -> Result<(u32, String), DaemonError> {
        if self.ledger.mode() != Mode::Guarded {
            return Err(DaemonError::refused(
                Reason::NotPermitted,
                "factors exist in guarded mode only (`[daemon] mode = \"guarded\"`)",
            ));
        }
        if auth::peer(r).map(|p| p.uid) != Some(0) {
            return Err(DaemonError::refused(
                Reason::NotPermitted,
                "only root may enroll, confirm or unlock a factor",
            ));
        }
        factor::human_uid(self.ledger.humans(), user)
    }
}

/// The binding as the ledger keeps it: in guarded mode its caller names the human whose
/// session sent it (`tc_core::owner`), so one human's request, token, state or cursor is
/// never another's, whatever the two send.
fn binding(owner: Option<u32>, b: Option<v1::Binding>) -> Result<Binding, Status> {
    let b = b.ok_or_else(|| {
        Status::from(DaemonError::refused(
            tc_core::Reason::BadArgument,
            "binding is required",
        ))
    })?;
    let mut b = Binding {
        vault: b.vault,
        tool: b.tool,
        caller: b.caller,
        args_hash: b.args_hash,
    };
    b.check()?;
    if let Some(uid) = owner {
        b.caller = tc_core::owner::qualify(&b.caller, uid);
    }
    Ok(b)
}

impl Service {
    /// Whose bindings the peer of `r` sends: its uid in guarded mode, `None` in personal
    /// mode (one human). Read before the request is taken apart.
    fn owner<T>(&self, r: &Request<T>) -> Result<Option<u32>, DaemonError> {
        match self.ledger.mode() {
            Mode::Guarded => Ok(Some(self.peer_uid(r)?)),
            Mode::Personal => Ok(None),
        }
    }

    /// The peer's uid; in guarded mode a peer the transport cannot name is refused
    /// (personal mode: tcd's one user, 0 standing for it).
    fn peer_uid<T>(&self, r: &Request<T>) -> Result<u32, DaemonError> {
        match auth::peer(r) {
            Some(p) => Ok(p.uid),
            None if self.ledger.mode() == Mode::Personal => Ok(0),
            None => Err(DaemonError::refused(
                Reason::NotPermitted,
                "guarded mode: the caller's uid is unknown",
            )),
        }
    }

    /// Whose rows the peer of `r` may see: `None` for all (personal mode, root).
    fn visible_owner<T>(&self, r: &Request<T>) -> Result<Option<u32>, DaemonError> {
        match self.ledger.mode() {
            Mode::Personal => Ok(None),
            Mode::Guarded => Ok(Some(self.peer_uid(r)?).filter(|u| *u != 0)),
        }
    }

    /// A binding as its client knows it: the owner is said by `raised_by_uid`.
    fn to_proto(&self, b: &Binding) -> v1::Binding {
        let caller = match self.ledger.mode() {
            Mode::Guarded => tc_core::owner::unqualified(&b.caller),
            Mode::Personal => &b.caller,
        };
        v1::Binding {
            vault: b.vault.clone(),
            tool: b.tool.clone(),
            caller: caller.to_string(),
            args_hash: b.args_hash.clone(),
        }
    }
}

#[tonic::async_trait]
impl Confirm for Service {
    async fn status(
        &self,
        _: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusReply>, Status> {
        let (pending, live, events, store) = self
            .run(|l| l.counts().map(|(p, t, e)| (p, t, e, l.store.describe())))
            .await?;
        let src = self.ledger.key_source();
        let remote = self.info.remote.clone().unwrap_or_default();
        Ok(Response::new(v1::StatusReply {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: tc_proto::PROTOCOL,
            socket: self.info.socket.display().to_string(),
            cache_dir: self.info.cache_dir.display().to_string(),
            ephemeral: matches!(src, crate::secret::KeySource::Ephemeral),
            key_source: src.describe(),
            uptime_seconds: self.info.started.elapsed().as_secs(),
            pending_requests: pending,
            live_tokens: live,
            events,
            elicit_ttl_seconds: self.ledger.ttl_seconds(),
            mode: self.ledger.mode().as_str().into(),
            store,
            remote_page_url: remote.origin,
            remote_cert_sha256: remote.cert_sha256,
            remote_spki_sha256: remote.spki_sha256,
        }))
    }

    async fn raise(
        &self,
        r: Request<v1::RaiseRequest>,
    ) -> Result<Response<v1::RaiseReply>, Status> {
        let uid = crate::auth::peer(&r).map(|p| p.uid);
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let raised = self
            .run(move |l| {
                let paths = real_paths(r.real_paths);
                let text = crate::approvals::RaiseText {
                    summary: &r.summary,
                    args_json: &r.args_json,
                    covers: &r.covers,
                    preview: &r.preview,
                    real_paths: Some(&paths),
                };
                l.raise_request(&b, &r.state_fp, &text, uid)
            })
            .await?;
        Ok(Response::new(v1::RaiseReply {
            raised_at_ms: raised.raised_at_ms,
            expires_at_ms: raised.expires_at_ms,
            request_id: raised.request_id,
            grant_id: raised.grant_id.unwrap_or_default(),
        }))
    }

    async fn mint(&self, r: Request<v1::MintRequest>) -> Result<Response<v1::MintReply>, Status> {
        let approver = self.approver(&r, r.get_ref().factor.as_ref())?;
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let (token, expires_at_ms, state_fp) = self
            .run(move |l| l.mint(&b, r.state_fp.as_deref(), &approver))
            .await?;
        Ok(Response::new(v1::MintReply {
            token,
            expires_at_ms,
            state_fp,
        }))
    }

    async fn redeem(
        &self,
        r: Request<v1::RedeemRequest>,
    ) -> Result<Response<v1::RedeemReply>, Status> {
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let redemption_id = self
            .run(move |l| {
                if r.approved_request && r.token.is_empty() && r.under_grant {
                    l.redeem_granted(&b, &r.current_state_fp)
                } else if r.approved_request && r.token.is_empty() {
                    l.redeem_approved(&b, &r.current_state_fp)
                } else {
                    l.redeem(&r.token, &b, &r.current_state_fp)
                }
            })
            .await?;
        Ok(Response::new(v1::RedeemReply { redemption_id }))
    }

    async fn release(
        &self,
        r: Request<v1::ReleaseRequest>,
    ) -> Result<Response<v1::ReleaseReply>, Status> {
        let r = r.into_inner();
        self.run(move |l| l.release(&r.redemption_id, &r.reason))
            .await?;
        Ok(Response::new(v1::ReleaseReply {}))
    }

    async fn record_consumed(
        &self,
        r: Request<v1::RecordConsumedRequest>,
    ) -> Result<Response<v1::RecordConsumedReply>, Status> {
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        self.run(move |l| l.consumed(&b, &r.state_fp, &r.route, &r.redemption_id))
            .await?;
        Ok(Response::new(v1::RecordConsumedReply {}))
    }

    async fn seal_state(
        &self,
        r: Request<v1::SealStateRequest>,
    ) -> Result<Response<v1::SealStateReply>, Status> {
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let (request_state, expires_at_ms) = self
            .run(move |l| l.seal_state(&b, &r.state_fp, &r.inner))
            .await?;
        Ok(Response::new(v1::SealStateReply {
            request_state,
            expires_at_ms,
        }))
    }

    async fn open_state(
        &self,
        r: Request<v1::OpenStateRequest>,
    ) -> Result<Response<v1::OpenStateReply>, Status> {
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let s = self
            .run(move |l| l.open_state(&r.request_state, &b, r.consume, &r.current_state_fp))
            .await?;
        let inner =
            tc_seal::decode_inner(&s.inner).map_err(|e| Status::from(DaemonError::from(e)))?;
        Ok(Response::new(v1::OpenStateReply {
            state_fp: s.state_fp,
            inner,
            expires_at_ms: s.expires_at_ms,
        }))
    }

    async fn seal_cursor(
        &self,
        r: Request<v1::SealCursorRequest>,
    ) -> Result<Response<v1::SealCursorReply>, Status> {
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let (cursor, expires_at_ms) = self.run(move |l| l.seal_cursor(&b, &r.position)).await?;
        Ok(Response::new(v1::SealCursorReply {
            cursor,
            expires_at_ms,
        }))
    }

    async fn open_cursor(
        &self,
        r: Request<v1::OpenCursorRequest>,
    ) -> Result<Response<v1::OpenCursorReply>, Status> {
        let owner = self.owner(&r)?;
        let r = r.into_inner();
        let b = binding(owner, r.binding)?;
        let position = self.run(move |l| l.open_cursor(&r.cursor, &b)).await?;
        Ok(Response::new(v1::OpenCursorReply { position }))
    }

    async fn append_event(
        &self,
        r: Request<v1::AppendEventRequest>,
    ) -> Result<Response<v1::AppendEventReply>, Status> {
        let owner = self.owner(&r)?;
        let mut r = r.into_inner();
        if let Some(uid) = owner {
            r.caller = tc_core::owner::qualify(&r.caller, uid);
        }
        let detail = if r.detail_json.is_empty() {
            serde_json::json!({})
        } else {
            match serde_json::from_str::<serde_json::Value>(&r.detail_json) {
                Ok(v @ serde_json::Value::Object(_)) => v,
                _ => {
                    return Err(DaemonError::refused(
                        tc_core::Reason::BadArgument,
                        "detail_json must be a JSON object",
                    )
                    .into())
                }
            }
        };
        let ev = NewEvent {
            kind: "",
            vault: r.vault,
            tool: r.tool,
            caller: r.caller,
            args_hash: r.args_hash,
            state_fp: r.state_fp,
            detail,
            owner,
        };
        let id = self
            .run(move |l| l.append_client_event(&r.kind, ev))
            .await?;
        Ok(Response::new(v1::AppendEventReply { id }))
    }

    type ListEventsStream = ReceiverStream<Result<v1::Event, Status>>;

    async fn list_events(
        &self,
        r: Request<v1::ListEventsRequest>,
    ) -> Result<Response<Self::ListEventsStream>, Status> {
        // A guarded human follows their own events only (root: all).
        let owner = self.visible_owner(&r)?;
        let r = r.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let ledger = self.ledger.clone();
        // Subscribe before the first read so nothing committed in between is missed.
        let mut committed = ledger.store.subscribe();
        let draining = self.draining.flipped();
        tokio::spawn(async move {
            tokio::pin!(draining);
            let mut after = r.after_id;
            let mut left = if r.limit == 0 {
                u64::MAX
            } else {
                u64::from(r.limit)
            };
            loop {
                let batch_limit = left.min(500) as u32;
                let l = ledger.clone();
                let batch = match ledger
                    .store
                    .call(move || l.store.events_for(after, batch_limit, owner))
                    .await
                {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(Status::from(e))).await;
                        return;
                    }
                };
                let full = batch.len() as u32 == batch_limit;
                for e in batch {
                    after = e.id;
                    left -= 1;
                    let ev = v1::Event {
                        id: e.id,
                        at_ms: e.at_ms,
                        kind: e.kind,
                        vault: e.vault,
                        tool: e.tool,
                        caller: e.caller,
                        args_hash: e.args_hash,
                        state_fp: e.state_fp,
                        detail_json: e.detail,
                    };
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                }
                if left == 0 || (!full && !r.follow) {
                    return;
                }
                if !full {
                    tokio::select! {
                        res = committed.recv() => {
                            if let Err(tokio::sync::broadcast::error::RecvError::Closed) = res { return; }
                        }
                        _ = tx.closed() => return,
                        _ = &mut draining => {
                            let _ = tx.send(Err(Status::unavailable("tcd is shutting down"))).await;
                            return;
                        }
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_pending(
        &self,
        r: Request<v1::ListPendingRequest>,
    ) -> Result<Response<v1::ListPendingReply>, Status> {
        // A guarded human sees their own requests only: another's arguments and previews
        // are the content of files they may not be able to read (root: all).
        let owner = self.visible_owner(&r)?;
        let vault = r.into_inner().vault;
        let rows = self.run(move |l| l.pending(&vault)).await?;
        Ok(Response::new(v1::ListPendingReply {
            requests: rows
                .into_iter()
                .filter(|p| owner.is_none() || p.raised_by_uid == owner)
                .map(|p| v1::PendingRequest {
                    binding: Some(self.to_proto(&p.binding)),
                    state_fp: p.state_fp,
                    summary: p.summary,
                    raised_at_ms: p.raised_at_ms,
                    expires_at_ms: p.expires_at_ms,
                    minted: p.minted,
                    request_id: p.request_id,
                    status: p.status.into(),
                    args_json: p.args_json,
                    raised_by_uid: p.raised_by_uid.unwrap_or(u32::MAX),
                    covers: p.covers,
                    reason: p.reason,
                    preview: p.preview,
                })
                .collect(),
        }))
    }

    async fn counters(
        &self,
        _: Request<v1::CountersRequest>,
    ) -> Result<Response<v1::CountersReply>, Status> {
        let rows = self.ledger.store.counters();
        Ok(Response::new(v1::CountersReply {
            counters: rows
                .into_iter()
                .map(|(name, labels, value)| v1::Counter {
                    name,
                    labels,
                    value,
                })
                .collect(),
        }))
    }

    async fn rotate_secret(
        &self,
        _: Request<v1::RotateSecretRequest>,
    ) -> Result<Response<v1::RotateSecretReply>, Status> {
        let voided_tokens = self.run(|l| l.rotate_secret()).await?;
        Ok(Response::new(v1::RotateSecretReply { voided_tokens }))
    }

    // Stubs of the guarded-mode and approver RPCs (issues 16, 17): filled in by their
    // modules; until then they say so instead of pretending.
    async fn approve(
        &self,
        r: Request<v1::ApproveRequest>,
    ) -> Result<Response<v1::ApproveReply>, Status> {
        let peer = crate::auth::peer(&r);
        let r = r.into_inner();
        let Some(peer) = peer else {
            return Err(DaemonError::refused(
                tc_core::Reason::NotPermitted,
                "the approver's uid is unknown (not a Unix-socket peer)",
            )
            .into());
        };
        let who = crate::factor::Approver {
            uid: peer.uid,
            code: r.factor.map(|f| f.totp).filter(|c| !c.is_empty()),
        };
        let ask = r.grant.map(crate::grants::wire::ask_of).transpose()?;
        let a = self
            .run(move |l| {
                let proof = crate::approvals::Proof::Code(&who);
                l.approve_granting(&r.request_id, proof, ask.as_ref())
            })
            .await?;
        Ok(Response::new(v1::ApproveReply {
            binding: Some(self.to_proto(&a.binding)),
            state_fp: a.state_fp,
            expires_at_ms: a.expires_at_ms,
            grant_id: a.grant_id.unwrap_or_default(),
        }))
    }

    async fn list_grants(
        &self,
        r: Request<v1::ListGrantsRequest>,
    ) -> Result<Response<v1::ListGrantsReply>, Status> {
        let viewer = crate::auth::peer(&r).map(|p| p.uid);
        let rows = self.run(move |l| l.grants(viewer)).await?;
        let now = tc_core::now_ms();
        let grants = rows
            .iter()
            .map(|g| {
                let caller = self.to_proto(&Binding {
                    caller: g.caller.clone(),
                    ..Default::default()
                });
                crate::grants::wire::to_proto(g, &caller.caller, now)
            })
            .collect();
        Ok(Response::new(v1::ListGrantsReply { grants }))
    }

    async fn revoke_grant(
        &self,
        r: Request<v1::RevokeGrantRequest>,
    ) -> Result<Response<v1::RevokeGrantReply>, Status> {
        let viewer = crate::auth::peer(&r).map(|p| p.uid);
        let id = r.into_inner().grant_id;
        self.run(move |l| l.revoke_grant(&id, viewer)).await?;
        Ok(Response::new(v1::RevokeGrantReply {}))
    }

    async fn decline(
        &self,
        r: Request<v1::DeclineRequest>,
    ) -> Result<Response<v1::DeclineReply>, Status> {
        let uid = crate::auth::peer(&r).map(|p| p.uid);
        let r = r.into_inner();
        self.run(move |l| l.decline(&r.request_id, &r.reason, uid))
            .await?;
        Ok(Response::new(v1::DeclineReply {}))
    }

    async fn enroll_factor(
        &self,
        r: Request<v1::EnrollFactorRequest>,
    ) -> Result<Response<v1::EnrollFactorReply>, Status> {
        let (uid, label) = self.factor_user(&r, &r.get_ref().user)?;
        let (otpauth_uri, secret_base32) = self
            .run(move |l| {
                l.store.write(|tx, evs| {
                    Ok(Ok(factor::enroll(tx, evs, uid, &label, tc_core::now_ms())?))
                })
            })
            .await?;
        Ok(Response::new(v1::EnrollFactorReply {
            otpauth_uri,
            secret_base32,
        }))
    }

    async fn confirm_factor(
        &self,
        r: Request<v1::ConfirmFactorRequest>,
    ) -> Result<Response<v1::ConfirmFactorReply>, Status> {
        let (uid, _) = self.factor_user(&r, &r.get_ref().user)?;
        let code = r.into_inner().factor.map(|f| f.totp).unwrap_or_default();
        self.run(move |l| {
            l.store
                .write(|tx, evs| factor::confirm(tx, evs, uid, &code, tc_core::now_ms()))
        })
        .await?;
        Ok(Response::new(v1::ConfirmFactorReply {}))
    }

    async fn unlock_factor(
        &self,
        r: Request<v1::UnlockFactorRequest>,
    ) -> Result<Response<v1::UnlockFactorReply>, Status> {
        let (uid, _) = self.factor_user(&r, &r.get_ref().user)?;
        self.run(move |l| l.store.write(|tx, evs| Ok(factor::unlock(tx, evs, uid))))
            .await?;
        Ok(Response::new(v1::UnlockFactorReply {}))
    }

    /// The exact text tcd runs with: guarded shims take their gates from it (and merge
    /// the user's own file over it tighten-only), not from a file the agent can edit.
    async fn get_policy(
        &self,
        _: Request<v1::GetPolicyRequest>,
    ) -> Result<Response<v1::GetPolicyReply>, Status> {
        let (source, config_toml) = match &self.info.policy {
            Some((p, t)) => (p.display().to_string(), t.clone()),
            None => (String::new(), String::new()),
        };
        Ok(Response::new(v1::GetPolicyReply {
            config_toml,
            source,
        }))
    }

    async fn open_page(
        &self,
        r: Request<v1::OpenPageRequest>,
    ) -> Result<Response<v1::OpenPageReply>, Status> {
        let uid = self.peer_uid(&r)?;
        let r = r.into_inner();
        let reply = if r.remote {
            let origin = self.info.remote.as_ref().map(|x| x.origin.clone());
            self.run(move |l| page::rpc::open_remote(l, origin, uid))
                .await?
        } else {
            let addr = self.info.page;
            self.run(move |l| page::rpc::open_page(l, addr, uid, r.request_id))
                .await?
        };
        Ok(Response::new(reply))
    }

    async fn passkey_code(
        &self,
        r: Request<v1::PasskeyCodeRequest>,
    ) -> Result<Response<v1::PasskeyCodeReply>, Status> {
        let uid = self.peer_uid(&r)?;
        let user = r.into_inner().user;
        let reply = self
            .run(move |l| page::rpc::passkey_code(l, uid, &user))
            .await?;
        Ok(Response::new(reply))
    }

    async fn list_passkeys(
        &self,
        r: Request<v1::ListPasskeysRequest>,
    ) -> Result<Response<v1::ListPasskeysReply>, Status> {
        let uid = self.peer_uid(&r)?;
        Ok(Response::new(
            self.run(move |l| page::rpc::list(l, uid)).await?,
        ))
    }

    async fn confirm_passkey(
        &self,
        r: Request<v1::ConfirmPasskeyRequest>,
    ) -> Result<Response<v1::ConfirmPasskeyReply>, Status> {
        let uid = self.peer_uid(&r)?;
        let r = r.into_inner();
        Ok(Response::new(
            self.run(move |l| page::rpc::confirm(l, uid, r)).await?,
        ))
    }

    async fn remove_passkey(
        &self,
        r: Request<v1::RemovePasskeyRequest>,
    ) -> Result<Response<v1::RemovePasskeyReply>, Status> {
        let uid = self.peer_uid(&r)?;
        let c = r.into_inner().credential;
        Ok(Response::new(
            self.run(move |l| page::rpc::remove(l, uid, &c)).await?,
        ))
    }

    async fn mint_token(
        &self,
        r: Request<v1::MintTokenRequest>,
    ) -> Result<Response<v1::MintTokenReply>, Status> {
        // Root only in guarded mode (WHO, and again here: defence in depth).
        if self.ledger.mode() == Mode::Guarded && auth::peer(&r).map(|p| p.uid) != Some(0) {
            return Err(DaemonError::refused(
                Reason::NotPermitted,
                "guarded mode: only root may mint a bearer token (`sudo tcctl token mint`)",
            )
            .into());
        }
        let r = r.into_inner();
        let (token, exp) = self
            .run(move |l| {
                crate::bearer::mint_recorded(l, &r.sub, r.ttl_seconds, &r.audience, &r.scopes)
            })
            .await?;
        Ok(Response::new(v1::MintTokenReply { token, exp }))
    }

    async fn verify_token(
        &self,
        r: Request<v1::VerifyTokenRequest>,
    ) -> Result<Response<v1::VerifyTokenReply>, Status> {
        let r = r.into_inner();
        // An HMAC and a parse: no store work, so not queued behind the store thread.
        let now_s = tc_core::now_ms() / 1000;
        let c = crate::bearer::check(&self.ledger.bearer_key(), &r.token, &r.audience, now_s)?;
        Ok(Response::new(v1::VerifyTokenReply {
            scopes: c.scopes(),
            sub: c.sub,
            exp: c.exp,
        }))
    }
}

/// A raise's real paths as the grant rules read them.
fn real_paths(m: std::collections::HashMap<String, v1::RealPaths>) -> tc_core::grant::RealPaths {
    m.into_iter()
        .map(|(arg, p)| (arg, (!p.outside).then_some(p.paths)))
        .collect()
}
