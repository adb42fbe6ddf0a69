//! The confirmation ledger: single-use tokens, their redemptions and release, what ran
//! (states and cursors: `states.rs`; raised requests: `approvals.rs`). Each change commits with its event.
//!
//! - [`Ledger`]: the operations, synchronous (the service runs them on blocking threads),
//!   over the store, the keys and what tcd's config sets: rate limits (`limits.rs`), grant
//!   rules (`grant_rules.rs`), the push of a fresh raise (`raised.rs`'s `Push`). What it
//!   binds every confirmation to is `record.rs`'s `Binding`. The modules that add
//!   operations to it (`approvals.rs`, `grants/`, `states.rs`, ...) sit above it.

use std::sync::{Arc, RwLock};

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use tc_core::codes::events;
use tc_core::{now_ms, Reason};

use crate::error::DaemonError;
use crate::grant_rules::GrantRules;
use crate::limits::Limits;
use crate::raised::Push;
use crate::record::{check_hash, Binding, NewEvent, DECLINED};
use crate::secret::Secret;
use crate::store::queries::{NewToken, TokenRow, Tx, Written};
use crate::store::Store;

/// Cursors expire after ten minutes, independent of the confirmation TTL.
pub const CURSOR_TTL_MS: i64 = 10 * 60 * 1000;
const TOKEN_PREFIX: &str = "tct_";

/// What a redemption id names.
enum Redemption {
    /// The token's latest redemption, on the token with this id.
    Latest(i64),
    /// An earlier redemption of a token that has been redeemed again since.
    Superseded,
}

/// Resolves a redemption id. New ids are `<tokens.id>.<seq>.<random>` and need no index;
/// ids issued before schema 3 have no '.' and are looked up in `legacy_redemptions`.
fn find_redemption(tx: &dyn Tx, redemption_id: &str) -> Result<Option<Redemption>, DaemonError> {
    let mut parts = redemption_id.splitn(3, '.');
    let (id, seq) = match (parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(seq), Some(_)) => match (id.parse::<i64>(), seq.parse::<i64>()) {
            (Ok(id), Ok(seq)) => (id, Some(seq)),
            _ => return Ok(None),
        },
        (Some(_), None, None) => match tx.legacy_redemption(redemption_id)? {
            Some(id) => (id, None),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Some(row) = tx.redemption_of(id)? else {
        return Ok(None); // deleted by a secret rotation
    };
    if row.redemption_id.as_deref() == Some(redemption_id) {
        return Ok(Some(Redemption::Latest(id)));
    }
    Ok(match seq {
        // A legacy id the token no longer names was superseded.
        None => Some(Redemption::Superseded),
        Some(s) if (1..row.redeemed).contains(&s) => Some(Redemption::Superseded),
        Some(_) => None,
    })
}

/// How long a token row outlives both its expiry and its last redemption (7 days), so a
/// late replay is still told `spent` and `tcctl events` can be read against it.
pub const TOKEN_RETENTION_MS: i64 = 7 * 86_400_000;

/// A ledger on a fresh store in a temporary directory, for unit tests.
#[cfg(test)]
pub(crate) fn scratch() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::for_test(dir.path());
    (dir, Ledger::new(store, Secret::ephemeral(), 300))
}

/// The ledger: the store plus the keys that hash tokens and seal blobs.
pub struct Ledger {
    pub store: Store,
    secret: RwLock<Secret>,
    pub(crate) ttl_ms: i64,
    /// What each (vault, caller) may make us write (`limits.rs`).
    pub(crate) limits: Limits,
    /// Guarded mode: every approval (Mint, Approve) needs the human's factor.
    pub(crate) mode: tc_core::config::Mode,
    /// `[guarded] humans` (names or uids): whose factors root may enroll and unlock.
    pub(crate) humans: Vec<String>,
    /// What each gate allows of grants, from tcd's own config (`grant_rules.rs`).
    pub(crate) grant_rules: GrantRules,
    /// `[notify]` targets told of each request a raise creates (`push/`).
    pub(crate) push: Option<Arc<dyn Push>>,
}

impl Ledger {
    pub fn new(store: Store, secret: Secret, ttl_seconds: u32) -> Ledger {
        Ledger {
            store,
            secret: RwLock::new(secret),
            ttl_ms: i64::from(ttl_seconds) * 1000,
            limits: Limits::new(
                tc_core::config::DEFAULT_RATE_LIMIT_PER_MINUTE,
                tc_core::config::DEFAULT_RATE_LIMIT_BURST,
            ),
            mode: tc_core::config::Mode::Personal,
            humans: Vec::new(),
            grant_rules: Default::default(),
            push: None,
        }
    }

    /// The gates' grant rules (see [`crate::grant_rules::rules_of`]).
    pub fn with_grant_rules(self, grant_rules: GrantRules) -> Ledger {
        Ledger {
            grant_rules,
            ..self
        }
    }

    /// The same ledger pushing each newly raised request to `push`'s targets.
    pub fn with_push(self, push: Option<Arc<dyn Push>>) -> Ledger {
        Ledger { push, ..self }
    }

    /// The same ledger serving these `[guarded] humans`.
    pub fn with_humans(self, humans: Vec<String>) -> Ledger {
        Ledger { humans, ..self }
    }

    /// `[guarded] humans`, as configured.
    pub fn humans(&self) -> &[String] {
        &self.humans
    }

    /// The same ledger in `mode`.
    pub fn with_mode(self, mode: tc_core::config::Mode) -> Ledger {
        Ledger { mode, ..self }
    }

    /// Personal or guarded.
    pub fn mode(&self) -> tc_core::config::Mode {
        self.mode
    }

    /// The same ledger with these rate limits instead of the defaults.
    pub fn with_limits(self, limits: Limits) -> Ledger {
        Ledger { limits, ..self }
    }

    /// Charges one model-causable write to (vault, caller): past the rate it is refused
    /// `rate_limited` and nothing is written ([`Limits::charge`]).
    pub(crate) fn charge(&self, vault: &str, caller: &str) -> Result<(), DaemonError> {
        self.limits.charge(&self.store, vault, caller)
    }

    /// Whether a refusal event of `kind` for (vault, caller) may be written: past the rate
    /// it is dropped and counted instead ([`Limits::may_record`]).
    pub(crate) fn may_record(&self, vault: &str, caller: &str, kind: &str) -> bool {
        self.limits.may_record(&self.store, vault, caller, kind)
    }

    pub(crate) fn keys<T>(&self, f: impl FnOnce(&Secret) -> T) -> T {
        f(&self.secret.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The key bearer tokens are signed with (`bearer.rs`); rotated with the secret.
    pub(crate) fn bearer_key(&self) -> [u8; 32] {
        self.keys(|s| s.keys.bearer)
    }

    /// Where the keys came from.
    pub fn key_source(&self) -> crate::secret::KeySource {
        self.keys(|s| s.source.clone())
    }

    /// The confirmation TTL in seconds.
    pub fn ttl_seconds(&self) -> u32 {
        (self.ttl_ms / 1000) as u32
    }

    /// Tokens are stored as HMAC(token key, token): a database leak yields no token, and a
    /// rotated secret voids every outstanding one.
    fn token_hash(&self, token: &str) -> Vec<u8> {
        self.keys(|s| {
            let mut m =
                <Hmac<Sha256> as Mac>::new_from_slice(&s.keys.token).expect("any key length");
            m.update(token.as_bytes());
            m.finalize().into_bytes().to_vec()
        })
    }

    /// Mints a token for the retained raised request; with `pin`, only if the request's
    /// fingerprint is exactly `pin`. In guarded mode only with `approver`'s valid code,
    /// whose time step is spent in the same commit as the token is minted.
    pub fn mint(
        &self,
        b: &Binding,
        pin: Option<&str>,
        approver: &crate::factor::Approver,
    ) -> Result<(String, i64, String), DaemonError> {
        b.check()?;
        if let Some(p) = pin {
            check_hash("state_fp", p)?;
        }
        let token = format!("{TOKEN_PREFIX}{}", crate::random::b64(32));
        let hash = self.token_hash(&token);
        let now = now_ms();
        let exp = now + self.ttl_ms;
        self.store.write(|tx, evs| {
            let Some(raised) = tx.raised_by_call(b)? else {
                return Err(DaemonError::refused(
                    Reason::NoRaisedRequest,
                    format!(
                        "no blocked call with this hash is waiting for caller {:?} in vault {:?}; \
                         run the blocked call again first (and check --caller and --vault)",
                        b.caller, b.vault
                    ),
                ));
            };
            let (tool, fp, raised_exp, status) =
                (raised.binding.tool, raised.state_fp, raised.expires_at, raised.status);
            if raised_exp <= now {
                return Err(DaemonError::refused(
                    Reason::NoRaisedRequest,
                    "the blocked call was raised too long ago and has expired; run it again first",
                ));
            }
            // A "no" stands: neither route turns it into a yes (`approvals.rs`).
            if status == DECLINED {
                return Err(DaemonError::refused(
                    Reason::Declined,
                    "the human declined this call; it cannot be approved afterwards",
                ));
            }
            if tool != b.tool {
                return Err(DaemonError::refused(
                    Reason::BindingMismatch,
                    format!("the blocked call with this hash was for tool {tool:?}, not {:?}", b.tool),
                ));
            }
            if let Some(p) = pin {
                if p != fp {
                    return Err(DaemonError::refused(
                        Reason::StateFpMismatch,
                        "--state-fp does not name the state the waiting request was raised against \
                         (the target changed and the call was raised again); copy the command from the latest refusal",
                    ));
                }
            }
            // After the request checks (a refusal there rolls back and spends no step),
            // before the token: a refused factor commits its failure, mints nothing.
            if self.mode == tc_core::config::Mode::Guarded {
                if let Err(e) =
                    crate::factor::check(tx, evs, approver.uid, approver.code.as_deref(), now)?
                {
                    return Ok(Err(e));
                }
            }
            tx.insert_token(&NewToken {
                hash: &hash,
                binding: b,
                state_fp: &fp,
                created_at: now,
                expires_at: exp,
            })?;
            evs.push(b.event(events::MINTED, &fp, json!({ "expires_at_ms": exp })));
            Ok(Ok((token.clone(), exp, fp)))
        })
    }

    /// Spends `token` for the call `b` whose target state is `current_fp` right now.
    pub fn redeem(
        &self,
        token: &str,
        b: &Binding,
        current_fp: &str,
    ) -> Result<String, DaemonError> {
        b.check()?;
        check_hash("current_state_fp", current_fp)?;
        if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
            return Err(DaemonError::refused(
                Reason::Unknown,
                "not a tc confirmation token",
            ));
        }
        let hash = self.token_hash(token);
        let now = now_ms();
        let nonce = crate::random::b64(16);
        self.store.write(|tx, evs| {
            let Some(row) = tx.token_by_hash(&hash)? else {
                return Err(DaemonError::refused(
                    Reason::Unknown,
                    "unknown confirmation token (never issued here, voided by a secret rotation, or collected a week after it expired)",
                ));
            };
            self.spend(tx, evs, row, b, current_fp, now, &nonce)
        })
    }

    /// Spends the token `row` for the call `b` whose target state is `current_fp` now,
    /// inside the caller's write: the single-use, binding and drift checks every route
    /// shares (tokens, and the approvals `approvals.rs` holds as token rows).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn spend(
        &self,
        tx: &dyn Tx,
        evs: &mut Vec<NewEvent>,
        row: TokenRow,
        b: &Binding,
        current_fp: &str,
        now: i64,
        nonce: &str,
    ) -> Written<String> {
        let TokenRow {
            id,
            binding: issued,
            state_fp: fp,
            expires_at: exp,
            consumed_at: consumed,
            redeemed,
        } = row;
        if consumed.is_some() {
            return Err(DaemonError::refused(
                Reason::Spent,
                "this confirmation token was already used",
            ));
        }
        if exp <= now {
            return Err(DaemonError::refused(
                Reason::Expired,
                "this confirmation token has expired",
            ));
        }
        if &issued != b {
            let mut fields = Vec::new();
            for (name, a, c) in [
                ("vault", &issued.vault, &b.vault),
                ("tool", &issued.tool, &b.tool),
                ("caller", &issued.caller, &b.caller),
                ("args_hash", &issued.args_hash, &b.args_hash),
            ] {
                if a != c {
                    fields.push(name);
                }
            }
            // One unspent token can be presented for other calls at will.
            if self.may_record(&b.vault, &b.caller, events::REFUSED) {
                evs.push(b.event(
                    events::REFUSED,
                    current_fp,
                    json!({ "reason": "binding_mismatch", "fields": fields }),
                ));
            }
            return Ok(Err(DaemonError::refused(
                Reason::BindingMismatch,
                format!(
                    "this token was minted for a different call ({} differ)",
                    fields.join(", ")
                ),
            )));
        }
        if fp != current_fp {
            // Spent without a redemption: the latest one (if any) stays as it was.
            spend(tx, id, now, None)?;
            evs.push(b.event(
                events::REPLAY_DRIFT,
                current_fp,
                json!({ "approved_state_fp": fp }),
            ));
            return Ok(Err(DaemonError::refused(
                Reason::ReplayDrift,
                "the target changed since the confirmation was requested; nothing was applied and the token is spent",
            )));
        }
        let seq = redeemed + 1;
        let redemption = format!("{id}.{seq}.{nonce}");
        // Single use: exactly one row changes only while the token is unspent.
        spend(tx, id, now, Some((&redemption, seq)))?;
        evs.push(b.event(
            events::REDEEMED,
            current_fp,
            json!({ "redemption_id": redemption }),
        ));
        Ok(Ok(redemption))
    }

    /// Gives a redemption's token back unspent (same expiry and binding), once, and only
    /// if the handler has not been recorded as run.
    pub fn release(&self, redemption_id: &str, why: &str) -> Result<(), DaemonError> {
        let now = now_ms();
        self.store.write(|tx, evs| {
            let id = match find_redemption(tx, redemption_id)? {
                None => return Err(DaemonError::refused(Reason::Unknown, "no such redemption")),
                // A token is only redeemed again after its previous redemption was released.
                Some(Redemption::Superseded) => {
                    return Err(DaemonError::refused(
                        Reason::Spent,
                        "this redemption was already released",
                    ))
                }
                Some(Redemption::Latest(id)) => id,
            };
            let Some(row) = tx.redemption_of(id)? else {
                return Err(DaemonError::refused(Reason::Unknown, "no such redemption"));
            };
            let (released, fin, b) = (row.released_at, row.final_at, row.binding);
            if released.is_some() {
                return Err(DaemonError::refused(
                    Reason::Spent,
                    "this redemption was already released",
                ));
            }
            if fin.is_some() {
                return Err(DaemonError::refused(
                    Reason::Spent,
                    "the call already ran with this redemption; it cannot be released",
                ));
            }
            // Expiry and binding are untouched: the token is exactly as minted.
            if tx.release_token(id, redemption_id, now)? != 1 {
                // Released or run by a concurrent writer between the read and this update.
                return Err(DaemonError::refused(
                    Reason::Spent,
                    "this redemption was already released or ran",
                ));
            }
            evs.push(b.event(
                events::RELEASED,
                "",
                json!({ "reason": why, "redemption_id": redemption_id }),
            ));
            Ok(Ok(()))
        })
    }

    /// Records that a gated handler ran; the redemption (if any) becomes final.
    pub fn consumed(
        &self,
        b: &Binding,
        state_fp: &str,
        route: &str,
        redemption_id: &str,
    ) -> Result<(), DaemonError> {
        b.check()?;
        let now = now_ms();
        self.store.write(|tx, evs| {
            // The raised row first (locked on PostgreSQL), then tokens: the order every
            // write touching both takes, so two replicas never wait on each other in a
            // circle (the approved retry locks the row, then spends its token).
            let _ = tx.raised_by_call(b)?;
            if !redemption_id.is_empty() {
                // Only a live redemption of a token minted for this very call.
                let n = match find_redemption(tx, redemption_id)? {
                    Some(Redemption::Latest(id)) => tx.finalize_redemption(id, redemption_id, b, now)?,
                    _ => 0,
                };
                if n != 1 {
                    return Err(DaemonError::refused(
                        Reason::Spent,
                        "this redemption is unknown, released, already recorded as run, or for another call",
                    ));
                }
            }
            tx.delete_raised(b)?;
            // One approval, one run: other tokens minted for the same call (the operator ran
            // `tcctl elicit` twice) are spent with it, so the next run needs a fresh approval.
            let voided = tx.void_call_tokens(b, now)?;
            evs.push(b.event(
                events::CONSUMED,
                state_fp,
                json!({ "route": route, "voided_sibling_tokens": voided }),
            ));
            Ok(Ok(()))
        })
    }

    /// (pending requests, live tokens, events) for `Status`.
    pub fn counts(&self) -> Result<(u64, u64, u64), DaemonError> {
        let now = now_ms();
        self.store
            .read(|c| Ok((c.live_raised(now)?, c.live_tokens(now)?)))
            .and_then(|(raised, live)| Ok((raised, live, self.store.event_count()?)))
    }

    /// Replaces the secret; every outstanding token, state and cursor stops verifying.
    pub fn rotate_secret(&self) -> Result<u64, DaemonError> {
        if self.store.is_shared() {
            return Err(DaemonError::refused(
                Reason::NotPermitted,
                "this tcd is one replica of a ledger shared on PostgreSQL: rotating its key alone \
                 would leave the other replicas on the old one. To rotate: stop every replica; write \
                 one new key (head -c 32 /dev/urandom > FILE; chmod 600 FILE) to each replica's \
                 [daemon.postgres] secret_file; run `DELETE FROM tc_meta WHERE name = 'key_check'` \
                 on the database; start the replicas again (outstanding confirmations are void)",
            ));
        }
        let mut secret = self.secret.write().unwrap_or_else(|p| p.into_inner());
        secret
            .rotate()
            .map_err(|e| DaemonError::Internal(e.to_string()))?;
        drop(secret);
        self.store.write(|tx, evs| {
            let n = tx.delete_unspent_tokens()?;
            evs.push(NewEvent {
                kind: events::SECRET_ROTATED,
                detail: json!({ "voided_tokens": n }),
                ..Default::default()
            });
            Ok(Ok(n))
        })
    }

    /// Records an event a client reports (only kinds clients may append).
    pub fn append_client_event(&self, kind: &str, ev: NewEvent) -> Result<i64, DaemonError> {
        let Some(kind) = events::CLIENT_APPENDABLE.iter().find(|k| **k == kind) else {
            return Err(DaemonError::refused(
                Reason::BadArgument,
                format!("event kind {kind:?} cannot be appended by a client"),
            ));
        };
        if *kind == events::CALL_OUTCOME {
            // One per call that waited on a human, after the human (or a grant) acted: a
            // bucket of their own, so approved work never uses up the raises' rate. Past
            // it they are dropped and counted, like refusal events.
            let bucket = format!("{} (outcomes)", ev.caller);
            if !self.may_record(&ev.vault, &bucket, kind) {
                return Ok(0);
            }
            return self.store.append(NewEvent { kind, ..ev });
        }
        // Declines, unobtained approvals and overflows are the model's to cause at will.
        self.charge(&ev.vault, &ev.caller)?;
        self.store.append(NewEvent { kind, ..ev })
    }

    /// Records a refused peer.
    pub fn auth_denied(&self, uid: Option<u32>, pid: Option<i32>, method: &str) {
        // Another uid's connections are not ours to pace, but they must not fill the log.
        let who = format!("uid {}", uid.map_or("?".into(), |u| u.to_string()));
        if !self.may_record("", &who, events::AUTH_DENIED) {
            return;
        }
        let ev = NewEvent {
            kind: events::AUTH_DENIED,
            detail: json!({ "uid": uid, "pid": pid, "method": method }),
            ..Default::default()
        };
        if let Err(e) = self.store.append(ev) {
            tracing::warn!(error = %e, "could not record tc.auth.denied");
        }
    }
}

/// Spends token `id` (with `redemption` as its latest, if any); refused unless this
/// writer is the one that spent it.
fn spend(
    tx: &dyn Tx,
    id: i64,
    now: i64,
    redemption: Option<(&str, i64)>,
) -> Result<(), DaemonError> {
    if tx.spend_token(id, now, redemption)? {
        Ok(())
    } else {
        Err(DaemonError::refused(
            Reason::Spent,
            "this confirmation token was already used",
        ))
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
