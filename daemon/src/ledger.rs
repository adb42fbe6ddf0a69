//! The confirmation ledger: raised requests, single-use tokens, redemptions and their
//! release, consumed request states, cursors. Every change commits with its event.
//!
//! - [`Ledger`]: the operations, synchronous (the service runs them on blocking threads).
//! - [`Binding`]: vault, tool, caller, args_hash — what every confirmation is bound to.

use std::sync::RwLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use rusqlite::{params, OptionalExtension};
use serde_json::json;
use sha2::Sha256;
use tc_core::codes::events;
use tc_core::{now_ms, Reason};

use crate::error::DaemonError;
use crate::seal::{self, Sealed};
use crate::secret::Secret;
use crate::store::{NewEvent, Store};

/// Cursors expire after ten minutes, independent of the confirmation TTL.
pub const CURSOR_TTL_MS: i64 = 10 * 60 * 1000;
const TOKEN_PREFIX: &str = "tct_";

/// What every confirmation is bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub args_hash: String,
}

impl Binding {
    /// Refuses empty fields and malformed hashes before they reach the database.
    pub fn check(&self) -> Result<(), DaemonError> {
        // A guarded-mode caller carries its owner's " (uid N)" (at most 17 bytes more).
        for (name, v, max) in [
            ("vault", &self.vault, 256),
            ("tool", &self.tool, 256),
            ("caller", &self.caller, 256 + 17),
        ] {
            if v.is_empty() || v.len() > max {
                return Err(DaemonError::refused(
                    Reason::BadArgument,
                    format!("{name} must be 1..=256 bytes"),
                ));
            }
        }
        check_hash("args_hash", &self.args_hash)
    }

    pub(crate) fn event(
        &self,
        kind: &'static str,
        state_fp: &str,
        detail: serde_json::Value,
    ) -> NewEvent {
        NewEvent {
            kind,
            vault: self.vault.clone(),
            tool: self.tool.clone(),
            caller: self.caller.clone(),
            args_hash: self.args_hash.clone(),
            state_fp: state_fp.to_string(),
            detail,
            // The store reads the owner from the qualified caller.
            owner: None,
        }
    }
}

fn check_hash(name: &str, v: &str) -> Result<(), DaemonError> {
    if tc_core::hash::is_sha256_hex(v) {
        Ok(())
    } else {
        Err(DaemonError::refused(
            Reason::BadArgument,
            format!("{name} must be 64 lowercase hex digits"),
        ))
    }
}

/// A token row as `spend` reads it: id, vault, tool, caller, args_hash, state_fp,
/// expires_at, consumed_at, redeemed.
pub(crate) type TokenRow = (
    i64,
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<i64>,
    i64,
);

/// Reads a [`TokenRow`] from the columns in that order.
pub(crate) fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

/// What a redemption id names.
enum Redemption {
    /// The token's latest redemption, on the token with this rowid.
    Latest(i64),
    /// An earlier redemption of a token that has been redeemed again since.
    Superseded,
}

/// Resolves a redemption id. New ids are `<tokens.id>.<seq>.<random>` and need no index;
/// ids issued before schema 3 have no '.' and are looked up in `legacy_redemptions`.
fn find_redemption(
    tx: &rusqlite::Connection,
    redemption_id: &str,
) -> Result<Option<Redemption>, DaemonError> {
    let mut parts = redemption_id.splitn(3, '.');
    let (id, seq) = match (parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(seq), Some(_)) => match (id.parse::<i64>(), seq.parse::<i64>()) {
            (Ok(id), Ok(seq)) => (id, Some(seq)),
            _ => return Ok(None),
        },
        (Some(_), None, None) => {
            let legacy: Option<i64> = tx
                .prepare_cached("SELECT token_id FROM legacy_redemptions WHERE id = ?1")?
                .query_row(params![redemption_id], |r| r.get(0))
                .optional()?;
            match legacy {
                Some(id) => (id, None),
                None => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let row: Option<(Option<String>, i64)> = tx
        .prepare_cached("SELECT redemption_id, redeemed FROM tokens WHERE id = ?1")?
        .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((latest, redeemed)) = row else {
        return Ok(None); // deleted by a secret rotation
    };
    if latest.as_deref() == Some(redemption_id) {
        return Ok(Some(Redemption::Latest(id)));
    }
    Ok(match seq {
        // A legacy id the token no longer names was superseded.
        None => Some(Redemption::Superseded),
        Some(s) if (1..redeemed).contains(&s) => Some(Redemption::Superseded),
        Some(_) => None,
    })
}

/// How long a token row outlives both its expiry and its last redemption (7 days), so a
/// late replay is still told `spent` and `tcctl events` can be read against it.
pub const TOKEN_RETENTION_MS: i64 = 7 * 86_400_000;

/// The longest argument summary a raised request keeps, in characters.
pub const SUMMARY_MAX: usize = 8000;

/// A request waiting for a human, as `tcctl pending` shows it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub binding: Binding,
    pub state_fp: String,
    pub summary: String,
    pub raised_at_ms: i64,
    pub expires_at_ms: i64,
    pub minted: bool,
    /// Short id for `tcctl approve ID` / `tcctl decline ID`.
    pub request_id: String,
    /// `pending`, `approved`, `declined` or `expired`.
    pub status: &'static str,
    /// The full arguments as JSON (capped), as the shim sent them.
    pub args_json: String,
    /// What the approval covers, in words.
    pub covers: String,
    /// uid of the peer that raised it (none for a request raised before schema 6).
    pub raised_by_uid: Option<u32>,
    /// Why it was declined (declined only).
    pub reason: String,
    /// The gate's preview, as the raiser sent it (capped).
    pub preview: String,
}

/// A ledger on a fresh store in a temporary directory, for unit tests.
#[cfg(test)]
pub(crate) fn scratch() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("db")).expect("store");
    (dir, Ledger::new(store, Secret::ephemeral(), 300))
}

/// The ledger: the store plus the keys that hash tokens and seal blobs.
pub struct Ledger {
    pub store: Store,
    secret: RwLock<Secret>,
    pub(crate) ttl_ms: i64,
    /// What each (vault, caller) may make us write (`limits.rs`).
    pub(crate) limits: crate::limits::Limits,
    /// Guarded mode: every approval (Mint, Approve) needs the human's factor.
    pub(crate) mode: tc_core::config::Mode,
    /// `[guarded] humans` (names or uids): whose factors root may enroll and unlock.
    pub(crate) humans: Vec<String>,
}

pub(crate) fn random_b64(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::rngs::OsRng.fill_bytes(&mut b);
    B64.encode(b)
}

impl Ledger {
    pub fn new(store: Store, secret: Secret, ttl_seconds: u32) -> Ledger {
        Ledger {
            store,
            secret: RwLock::new(secret),
            ttl_ms: i64::from(ttl_seconds) * 1000,
            limits: crate::limits::Limits::new(
                tc_core::config::DEFAULT_RATE_LIMIT_PER_MINUTE,
                tc_core::config::DEFAULT_RATE_LIMIT_BURST,
            ),
            mode: tc_core::config::Mode::Personal,
            humans: Vec::new(),
        }
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
    pub fn with_limits(self, limits: crate::limits::Limits) -> Ledger {
        Ledger { limits, ..self }
    }

    fn keys<T>(&self, f: impl FnOnce(&Secret) -> T) -> T {
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

    /// Records (replacing) the latest raised request for (vault, caller, args_hash), with
    /// no arguments, coverage or peer (see [`Ledger::raise_request`]).
    pub fn raise(
        &self,
        b: &Binding,
        state_fp: &str,
        summary: &str,
    ) -> Result<(i64, i64), DaemonError> {
        let r = self.raise_request(
            b,
            state_fp,
            &crate::approvals::RaiseText {
                summary,
                ..Default::default()
            },
            None,
        )?;
        Ok((r.raised_at_ms, r.expires_at_ms))
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
        let token = format!("{TOKEN_PREFIX}{}", random_b64(32));
        let hash = self.token_hash(&token);
        let now = now_ms();
        let exp = now + self.ttl_ms;
        self.store.write(|tx, evs| {
            let raised: Option<(String, String, i64, String)> = tx.prepare_cached(
                "SELECT tool, state_fp, expires_at, status FROM raised WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3",
            )?
            .query_row(params![b.vault, b.caller, b.args_hash], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()?;
            let Some((tool, fp, raised_exp, status)) = raised else {
                return Err(DaemonError::refused(
                    Reason::NoRaisedRequest,
                    format!(
                        "no blocked call with this hash is waiting for caller {:?} in vault {:?}; \
                         run the blocked call again first (and check --caller and --vault)",
                        b.caller, b.vault
                    ),
                ));
            };
            if raised_exp <= now {
                return Err(DaemonError::refused(
                    Reason::NoRaisedRequest,
                    "the blocked call was raised too long ago and has expired; run it again first",
                ));
            }
            // A "no" stands: neither route turns it into a yes (`approvals.rs`).
            if status == crate::approvals::DECLINED {
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
            tx.prepare_cached(
                "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![hash, b.vault, b.tool, b.caller, b.args_hash, fp, now, exp])?;
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
        let nonce = random_b64(16);
        self.store.write(|tx, evs| {
            let row: Option<TokenRow> = tx.prepare_cached(
                "SELECT id, vault, tool, caller, args_hash, state_fp, expires_at, consumed_at, redeemed
                     FROM tokens WHERE token_hash = ?1",
            )?
            .query_row(params![hash], token_row)
                .optional()?;
            let Some(row) = row else {
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
        tx: &rusqlite::Connection,
        evs: &mut Vec<NewEvent>,
        row: TokenRow,
        b: &Binding,
        current_fp: &str,
        now: i64,
        nonce: &str,
    ) -> crate::store::Written<String> {
        let (id, vault, tool, caller, args_hash, fp, exp, consumed, redeemed) = row;
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
        let issued = Binding {
            vault,
            tool,
            caller,
            args_hash,
        };
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
            let spent = tx
                .prepare_cached(
                    "UPDATE tokens SET consumed_at = ?2 WHERE id = ?1 AND consumed_at IS NULL",
                )?
                .execute(params![id, now])?;
            if spent != 1 {
                return Err(DaemonError::refused(
                    Reason::Spent,
                    "this confirmation token was already used",
                ));
            }
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
        let spent = tx
            .prepare_cached(
                "UPDATE tokens SET consumed_at = ?2, redemption_id = ?3, redeemed = ?4,
               released_at = NULL, final_at = NULL
             WHERE id = ?1 AND consumed_at IS NULL",
            )?
            .execute(params![id, now, redemption, seq])?;
        if spent != 1 {
            return Err(DaemonError::refused(
                Reason::Spent,
                "this confirmation token was already used",
            ));
        }
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
                    return Err(DaemonError::refused(Reason::Spent, "this redemption was already released"))
                }
                Some(Redemption::Latest(id)) => id,
            };
            type Row = (Option<i64>, Option<i64>, Binding);
            let (released, fin, b): Row = tx.prepare_cached(
                "SELECT released_at, final_at, vault, tool, caller, args_hash FROM tokens WHERE id = ?1",
            )?
            .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?, Binding { vault: r.get(2)?, tool: r.get(3)?, caller: r.get(4)?, args_hash: r.get(5)? })))?;
            if released.is_some() {
                return Err(DaemonError::refused(Reason::Spent, "this redemption was already released"));
            }
            if fin.is_some() {
                return Err(DaemonError::refused(
                    Reason::Spent,
                    "the call already ran with this redemption; it cannot be released",
                ));
            }
            // Expiry and binding are untouched: the token is exactly as minted.
            tx.prepare_cached(
                "UPDATE tokens SET consumed_at = NULL, released_at = ?3
                 WHERE id = ?1 AND redemption_id = ?2 AND released_at IS NULL AND final_at IS NULL",
            )?
            .execute(params![id, redemption_id, now])?;
            evs.push(b.event(events::RELEASED, "", json!({ "reason": why, "redemption_id": redemption_id })));
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
            if !redemption_id.is_empty() {
                // Only a live redemption of a token minted for this very call.
                let n = match find_redemption(tx, redemption_id)? {
                    Some(Redemption::Latest(id)) => tx.prepare_cached("UPDATE tokens SET final_at = ?3
                         WHERE id = ?1 AND redemption_id = ?2 AND final_at IS NULL AND released_at IS NULL
                           AND vault = ?4 AND tool = ?5 AND caller = ?6 AND args_hash = ?7")?.execute(params![id, redemption_id, now, b.vault, b.tool, b.caller, b.args_hash])?,
                    _ => 0,
                };
                if n != 1 {
                    return Err(DaemonError::refused(
                        Reason::Spent,
                        "this redemption is unknown, released, already recorded as run, or for another call",
                    ));
                }
            }
            tx.prepare_cached(
                "DELETE FROM raised WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3",
            )?
            .execute(params![b.vault, b.caller, b.args_hash])?;
            // One approval, one run: other tokens minted for the same call (the operator ran
            // `tcctl elicit` twice) are spent with it, so the next run needs a fresh approval.
            let voided = tx.prepare_cached(
                "UPDATE tokens SET consumed_at = ?5
                 WHERE vault = ?1 AND tool = ?2 AND caller = ?3 AND args_hash = ?4 AND consumed_at IS NULL",
            )?
            .execute(params![b.vault, b.tool, b.caller, b.args_hash, now])?;
            evs.push(b.event(
                events::CONSUMED,
                state_fp,
                json!({ "route": route, "voided_sibling_tokens": voided }),
            ));
            Ok(Ok(()))
        })
    }

    fn seal_blob(
        &self,
        key: fn(&Secret) -> [u8; 32],
        b: &Binding,
        state_fp: &str,
        inner: &[u8],
        ttl_ms: i64,
    ) -> (String, i64) {
        let exp = now_ms() + ttl_ms;
        let s = Sealed {
            nonce: random_b64(16),
            expires_at_ms: exp,
            vault: b.vault.clone(),
            tool: b.tool.clone(),
            caller: b.caller.clone(),
            args_hash: b.args_hash.clone(),
            state_fp: state_fp.to_string(),
            inner: seal::encode_inner(inner),
        };
        (seal::seal(&self.keys(key), &s), exp)
    }

    /// Authenticates a blob, then checks expiry, caller and request, in that order.
    fn open_blob(
        &self,
        key: fn(&Secret) -> [u8; 32],
        blob: &str,
        b: &Binding,
    ) -> Result<Sealed, DaemonError> {
        let s = seal::open(&self.keys(key), blob)?;
        if s.expires_at_ms <= now_ms() {
            return Err(DaemonError::refused(Reason::Expired, "expired"));
        }
        if s.caller != b.caller {
            return Err(DaemonError::refused(
                Reason::Foreign,
                "issued to another caller",
            ));
        }
        if s.vault != b.vault || s.tool != b.tool || s.args_hash != b.args_hash {
            return Err(DaemonError::refused(
                Reason::RequestMismatch,
                "issued for a different request",
            ));
        }
        Ok(s)
    }

    /// Seals a 2026-07-28 requestState for `b` at `state_fp`.
    pub fn seal_state(
        &self,
        b: &Binding,
        state_fp: &str,
        inner: &[u8],
    ) -> Result<(String, i64), DaemonError> {
        b.check()?;
        check_hash("state_fp", state_fp)?;
        let (blob, exp) = self.seal_blob(|s| s.keys.state, b, state_fp, inner, self.ttl_ms);
        // Refused here, not at the round trip: `open` would refuse it as invalid.
        if blob.len() > seal::MAX_SEALED_LEN {
            return Err(DaemonError::refused(
                Reason::BadArgument,
                format!(
                    "the state to seal is too large ({} bytes of inner state; a sealed state is at most {} bytes)",
                    inner.len(),
                    seal::MAX_SEALED_LEN
                ),
            ));
        }
        Ok((blob, exp))
    }

    /// Opens a requestState; with `consume`, marks it used (a second open is `spent`),
    /// and with a non-empty `current_fp` refuses it as `replay_drift` when the target
    /// changed since it was sealed (the state is spent either way).
    pub fn open_state(
        &self,
        blob: &str,
        b: &Binding,
        consume: bool,
        current_fp: &str,
    ) -> Result<Sealed, DaemonError> {
        b.check()?;
        if !current_fp.is_empty() {
            check_hash("current_state_fp", current_fp)?;
        }
        let s = match self.open_blob(|s| s.keys.state, blob, b) {
            Ok(s) => s,
            Err(e) => {
                if let DaemonError::Refused { reason, .. } = &e {
                    if self.may_record(&b.vault, &b.caller, events::REFUSED) {
                        self.store.append(b.event(
                            events::REFUSED,
                            "",
                            json!({ "reason": reason.as_str(), "what": "request_state" }),
                        ))?;
                    }
                }
                return Err(e);
            }
        };
        if consume {
            let now = now_ms();
            self.store.write(|tx, evs| {
                let n = tx.prepare_cached(
                    "INSERT INTO consumed_states (nonce, consumed_at, expires_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (nonce) DO NOTHING",
                )?
                .execute(params![s.nonce, now, s.expires_at_ms])?;
                if n == 1 {
                    if !current_fp.is_empty() && current_fp != s.state_fp {
                        evs.push(b.event(events::REPLAY_DRIFT, current_fp, json!({ "approved_state_fp": s.state_fp, "what": "request_state" })));
                        return Ok(Err(DaemonError::refused(
                            Reason::ReplayDrift,
                            "the target changed since the confirmation was requested; nothing was applied and the confirmation is spent",
                        )));
                    }
                    return Ok(Ok(()));
                }
                // A spent state can be replayed at will.
                if self.may_record(&b.vault, &b.caller, events::REFUSED) {
                    evs.push(b.event(events::REFUSED, &s.state_fp, json!({ "reason": "spent", "what": "request_state" })));
                }
                Ok(Err(DaemonError::refused(Reason::Spent, "this requestState was already used to authorize a call")))
            })?;
        }
        Ok(s)
    }

    /// Seals a paging cursor (10-minute expiry).
    pub fn seal_cursor(&self, b: &Binding, position: &[u8]) -> Result<(String, i64), DaemonError> {
        b.check()?;
        Ok(self.seal_blob(|s| s.keys.cursor, b, "", position, CURSOR_TTL_MS))
    }

    /// Opens a cursor; each refusal is logged as `tc.cursor.rejected`.
    pub fn open_cursor(&self, blob: &str, b: &Binding) -> Result<Vec<u8>, DaemonError> {
        b.check()?;
        match self
            .open_blob(|s| s.keys.cursor, blob, b)
            .and_then(|s| Ok(seal::decode_inner(&s.inner)?))
        {
            Ok(p) => Ok(p),
            Err(e) => {
                if let DaemonError::Refused { reason, .. } = &e {
                    if self.may_record(&b.vault, &b.caller, events::CURSOR_REJECTED) {
                        self.store.append(b.event(
                            events::CURSOR_REJECTED,
                            "",
                            json!({ "reason": reason.as_str() }),
                        ))?;
                    }
                }
                Err(e)
            }
        }
    }

    /// (pending requests, live tokens, events) for `Status`.
    pub fn counts(&self) -> Result<(u64, u64, u64), DaemonError> {
        let now = now_ms();
        self.store
            .read(|c| {
                let q = |sql: &str| {
                    c.prepare_cached(sql)?
                        .query_row(params![now], |r| r.get::<_, i64>(0))
                        .map(|v| v as u64)
                };
                Ok((
                    q("SELECT count(*) FROM raised WHERE expires_at > ?1")?,
                    q("SELECT count(*) FROM tokens WHERE consumed_at IS NULL AND expires_at > ?1")?,
                ))
            })
            .and_then(|(raised, live)| Ok((raised, live, self.store.event_count()?)))
    }

    /// Replaces the secret; every outstanding token, state and cursor stops verifying.
    pub fn rotate_secret(&self) -> Result<u64, DaemonError> {
        let mut secret = self.secret.write().unwrap_or_else(|p| p.into_inner());
        secret
            .rotate()
            .map_err(|e| DaemonError::Internal(e.to_string()))?;
        drop(secret);
        self.store.write(|tx, evs| {
            match tx
                .prepare_cached("DELETE FROM tokens WHERE consumed_at IS NULL")?
                .execute([])
            {
                Ok(n) => {
                    evs.push(NewEvent {
                        kind: events::SECRET_ROTATED,
                        detail: json!({ "voided_tokens": n }),
                        ..Default::default()
                    });
                    Ok(Ok(n as u64))
                }
                Err(e) => Err(e.into()),
            }
        })
    }

    /// Deletes rows nothing can use any more: request-state nonces a day past their
    /// expiry (the seal's own expiry already refuses those states), raised requests an
    /// hour past expiry (`mint` refuses them at expiry; kept that hour so a retry is told
    /// "expired" rather than asked afresh; kept longer, a flood of raises at the rate
    /// limit would pile up a day of them), and tokens [`TOKEN_RETENTION_MS`] past both their
    /// expiry and their last redemption. Events are pruned by `retention.rs`.
    pub fn gc(&self) -> Result<(), DaemonError> {
        self.gc_at(now_ms())
    }

    fn gc_at(&self, now: i64) -> Result<(), DaemonError> {
        self.store.write(|tx, evs| {
            // Raised requests: an hour past expiry, logging the unanswered ones as expired.
            crate::approvals::sweep(tx, evs, now)?;
            let r = (|| {
                // A day past expiry, not at it: if the wall clock steps back after a
                // collection, an already used state would otherwise open again.
                tx.prepare_cached("DELETE FROM consumed_states WHERE expires_at <= ?1")?
                    .execute(params![now - 86_400_000])?;
                // A deleted token is refused as `unknown` instead of `spent`: refused all
                // the same. Its redemption can no longer be released or recorded, which
                // only a call running for longer than the retention would notice.
                let old = now - TOKEN_RETENTION_MS;
                let tokens = tx
                    .prepare_cached(
                        // The newest row stays: ids are max(id)+1, and a reused id would
                        // make an old redemption id name a new token.
                        "DELETE FROM tokens WHERE expires_at < ?1
                           AND (consumed_at IS NULL OR consumed_at < ?1)
                           AND (released_at IS NULL OR released_at < ?1)
                           AND id < (SELECT max(id) FROM tokens)",
                    )?
                    .execute(params![old])?;
                if tokens > 0 {
                    tx.prepare_cached(
                        "DELETE FROM legacy_redemptions
                         WHERE token_id NOT IN (SELECT id FROM tokens)",
                    )?
                    .execute([])?;
                }
                Ok::<_, rusqlite::Error>(())
            })();
            r.map(Ok).map_err(DaemonError::from)
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

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn reason<T: std::fmt::Debug>(r: Result<T, DaemonError>) -> Reason {
        match r {
            Err(DaemonError::Refused { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// A schema-2 database (tokens + a separate `redemptions` table) with tokens in every
    /// state migrates to schema 3 (and on to the current one) with each token's state intact: what was spent stays
    /// spent, what was released redeems again, a final redemption cannot be released, and
    /// the old redemption ids still release (once) or are refused as before.
    #[test]
    fn schema_2_tokens_and_redemptions_survive_migrations_3_and_4() {
        let dir = tempfile::tempdir().unwrap();
        let secret = Secret::load_or_create(dir.path()).unwrap();
        let hash = |t: &str| {
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.keys.token).unwrap();
            m.update(t.as_bytes());
            m.finalize().into_bytes().to_vec()
        };
        let b = Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "c".into(),
            args_hash: tc_core::hash::sha256_hex(b"args"),
        };
        let fp = tc_core::hash::sha256_hex(b"fp");
        let now = now_ms();
        let exp = now + 3_600_000;
        let db = dir.path().join("cache.db");
        {
            let c = Connection::open(&db).unwrap();
            c.execute_batch(crate::store::MIGRATIONS[0]).unwrap();
            c.execute_batch(crate::store::MIGRATIONS[1]).unwrap();
            c.pragma_update(None, "user_version", 2).unwrap();
            for id in [1, 2, 7] {
                c.execute(
                    "INSERT INTO events (id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail)
                     VALUES (?1, 0, 'old', '', '', '', '', '', '{}')",
                    params![id],
                )
                .unwrap();
            }
            // (token, consumed, tokens.redemption_id, [(redemption, released, final)])
            type Fixture<'a> = (&'a str, bool, Option<&'a str>, Vec<(&'a str, bool, bool)>);
            let fixtures: Vec<Fixture> = vec![
                ("tct_spent", true, Some("rA"), vec![("rA", false, false)]),
                ("tct_released", false, None, vec![("rB", true, false)]),
                ("tct_final", true, Some("rC"), vec![("rC", false, true)]),
                ("tct_fresh", false, None, vec![]),
                (
                    "tct_twice",
                    true,
                    Some("rD2"),
                    vec![("rD1", true, false), ("rD2", false, false)],
                ),
            ];
            for (tok, consumed, rid, reds) in fixtures {
                c.execute(
                    "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp,
                       created_at, expires_at, consumed_at, redemption_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        hash(tok),
                        b.vault,
                        b.tool,
                        b.caller,
                        b.args_hash,
                        fp,
                        now,
                        exp,
                        consumed.then_some(now),
                        rid
                    ],
                )
                .unwrap();
                for (id, released, fin) in reds {
                    c.execute(
                        "INSERT INTO redemptions (id, token_hash, redeemed_at, released_at, final_at)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![
                            id,
                            hash(tok),
                            now,
                            released.then_some(now),
                            fin.then_some(now)
                        ],
                    )
                    .unwrap();
                }
            }
        }
        let store = Store::open(&db).unwrap();
        let l = Ledger::new(store, Secret::load_or_create(dir.path()).unwrap(), 300);
        // The audit log keeps its ids, and new events continue after them.
        let old: Vec<i64> = l
            .store
            .events_after(0, 10)
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(old, vec![1, 2, 7]);
        let v: i64 = l
            .store
            .read(|c| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?))
            .unwrap();
        assert_eq!(v as usize, crate::store::SCHEMA_VERSION);

        // Spent stays spent; its redemption releases once, then the token redeems again.
        assert_eq!(reason(l.redeem("tct_spent", &b, &fp)), Reason::Spent);
        l.release("rA", "test").unwrap();
        assert_eq!(reason(l.release("rA", "test")), Reason::Spent);
        let again = l.redeem("tct_spent", &b, &fp).unwrap();
        assert_eq!(reason(l.release("rA", "test")), Reason::Spent);
        assert_eq!(reason(l.redeem("tct_spent", &b, &fp)), Reason::Spent);

        // Released stays released (once), and redeems again.
        assert_eq!(reason(l.release("rB", "test")), Reason::Spent);
        let rb2 = l.redeem("tct_released", &b, &fp).unwrap();
        assert_eq!(reason(l.release("rB", "test")), Reason::Spent);
        l.release(&rb2, "test").unwrap();

        // Final cannot be released; the token stays spent.
        assert_eq!(reason(l.release("rC", "test")), Reason::Spent);
        assert_eq!(reason(l.redeem("tct_final", &b, &fp)), Reason::Spent);

        // Redeemed twice: the first redemption was released, the second is live.
        assert_eq!(reason(l.release("rD1", "test")), Reason::Spent);
        l.release("rD2", "test").unwrap();

        // Once the handler ran, the redemption is final (no release).
        l.consumed(&b, &fp, "test", &again).unwrap();
        assert_eq!(reason(l.release(&again, "test")), Reason::Spent);

        let next = l.store.events_after(7, 1).unwrap();
        assert_eq!(next[0].id, 8, "{next:?}");

        // Unknown ids stay unknown, new-format or not.
        assert_eq!(reason(l.release("nope", "test")), Reason::Unknown);
        assert_eq!(reason(l.release("999.1.x", "test")), Reason::Unknown);
        assert_eq!(reason(l.release("", "test")), Reason::Unknown);

        // The original expiry came through the migration untouched.
        let exps: Vec<i64> = l
            .store
            .read(|c| {
                let mut st = c.prepare("SELECT expires_at FROM tokens")?;
                let rows = st.query_map([], |r| r.get(0))?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
            .unwrap();
        assert_eq!(exps, vec![exp; 5]);
    }

    /// A ledger on a fresh database with a per-process key and a 300 s TTL.
    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        (dir, Ledger::new(store, Secret::ephemeral(), 300))
    }

    fn call(n: u8) -> Binding {
        Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "c".into(),
            args_hash: tc_core::hash::sha256_hex(&[n]),
        }
    }

    /// Garbage collection deletes tokens only once they are past their expiry and their
    /// last redemption by the retention, keeps the newest row (ids must not be reused),
    /// and a deleted token is still refused.
    #[test]
    fn gc_deletes_only_tokens_past_the_retention() {
        let (_dir, l) = ledger();
        let fp = tc_core::hash::sha256_hex(b"fp");
        let mut tokens = Vec::new();
        for n in 0..3 {
            l.raise(&call(n), &fp, "s").unwrap();
            tokens.push(l.mint(&call(n), None, &Default::default()).unwrap().0);
        }
        l.redeem(&tokens[0], &call(0), &fp).unwrap();
        let rows = || -> i64 {
            l.store
                .read(|c| Ok(c.query_row("SELECT count(*) FROM tokens", [], |r| r.get(0))?))
                .unwrap()
        };
        let now = now_ms();
        l.gc_at(now).unwrap();
        l.gc_at(now + 300_000 + TOKEN_RETENTION_MS - 60_000)
            .unwrap();
        assert_eq!(rows(), 3, "nothing is old enough yet");
        assert_eq!(reason(l.redeem(&tokens[0], &call(0), &fp)), Reason::Spent);

        l.gc_at(now + 300_000 + TOKEN_RETENTION_MS + 60_000)
            .unwrap();
        assert_eq!(
            rows(),
            1,
            "the spent and the expired token go, the newest row stays"
        );
        assert_eq!(reason(l.redeem(&tokens[0], &call(0), &fp)), Reason::Unknown);
        assert_eq!(reason(l.redeem(&tokens[1], &call(1), &fp)), Reason::Unknown);
        // The kept row is the newest, so the next token gets a fresh id.
        let newest: i64 = l
            .store
            .read(|c| Ok(c.query_row("SELECT max(id) FROM tokens", [], |r| r.get(0))?))
            .unwrap();
        l.raise(&call(9), &fp, "s").unwrap();
        let t = l.mint(&call(9), None, &Default::default()).unwrap().0;
        let r = l.redeem(&t, &call(9), &fp).unwrap();
        assert!(r.starts_with(&format!("{}.", newest + 1)), "{r}");
    }

    /// A used request state stays recorded for a day past its expiry, so a wall clock
    /// stepped back after a collection cannot make it open again.
    #[test]
    fn gc_keeps_used_states_a_day_past_their_expiry() {
        let (_dir, l) = ledger();
        let fp = tc_core::hash::sha256_hex(b"fp");
        let (blob, exp) = l.seal_state(&call(1), &fp, b"inner").unwrap();
        l.open_state(&blob, &call(1), true, &fp).unwrap();
        let rows = || -> i64 {
            l.store
                .read(
                    |c| Ok(c.query_row("SELECT count(*) FROM consumed_states", [], |r| r.get(0))?),
                )
                .unwrap()
        };
        l.gc_at(exp + 3_600_000).unwrap();
        assert_eq!(rows(), 1);
        assert_eq!(
            reason(l.open_state(&blob, &call(1), true, &fp)),
            Reason::Spent
        );
        l.gc_at(exp + 86_400_000 + 1).unwrap();
        assert_eq!(rows(), 0);
    }

    /// An inner state too large to come back through `open` is refused when sealing, with
    /// its size, instead of being handed out and refused as `invalid` on the way back; the
    /// largest that fits opens with its bytes intact.
    #[test]
    fn a_state_too_large_to_open_is_refused_when_sealed() {
        let (_dir, l) = ledger();
        let fp = tc_core::hash::sha256_hex(b"fp");
        let big = vec![b'x'; seal::MAX_SEALED_LEN];
        match l.seal_state(&call(1), &fp, &big) {
            Err(DaemonError::Refused { reason, message }) => {
                assert_eq!(reason, Reason::BadArgument);
                assert!(message.contains(&big.len().to_string()), "{message}");
            }
            other => panic!("sealed {:?}", other.map(|(b, _)| b.len())),
        }
        let fits = vec![b'y'; 30 * 1024];
        let (blob, _) = l.seal_state(&call(1), &fp, &fits).unwrap();
        let s = l.open_state(&blob, &call(1), false, "").unwrap();
        assert_eq!(seal::decode_inner(&s.inner).unwrap(), fits);
    }

    /// A redeem changes no indexed column of `tokens` (each index would be one more page
    /// in its fsync), and the per-call lookups use `tokens_args` instead of a table scan.
    #[test]
    fn redeem_rewrites_no_index_and_call_lookups_are_indexed() {
        let (_dir, l) = ledger();
        let (indexed, partial, plans) = l
            .store
            .read(|c| {
                let mut cols = Vec::new();
                let mut partial = Vec::new();
                let mut list =
                    c.prepare("SELECT name, partial FROM pragma_index_list('tokens')")?;
                let idx: Vec<(String, bool)> = list
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                for (name, p) in idx {
                    if p {
                        partial.push(name.clone());
                    }
                    let mut info = c.prepare("SELECT name FROM pragma_index_info(?1)")?;
                    let names: Vec<String> = info
                        .query_map([&name], |r| r.get(0))?
                        .collect::<Result<_, _>>()?;
                    cols.extend(names);
                }
                let mut plans = Vec::new();
                for sql in [
                    "UPDATE tokens SET consumed_at = 1 WHERE vault = 'v' AND tool = 't'
                       AND caller = 'c' AND args_hash = 'a' AND consumed_at IS NULL",
                    "SELECT 1 FROM tokens t WHERE t.vault = 'v' AND t.caller = 'c'
                       AND t.args_hash = 'a' AND t.state_fp = 'f' AND t.created_at >= 0",
                ] {
                    let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                    let detail: Vec<String> =
                        st.query_map([], |r| r.get(3))?.collect::<Result<_, _>>()?;
                    plans.push(detail.join("; "));
                }
                Ok((cols, partial, plans))
            })
            .unwrap();
        for col in [
            "consumed_at",
            "redemption_id",
            "redeemed",
            "released_at",
            "final_at",
        ] {
            assert!(
                !indexed.iter().any(|c| c == col),
                "{col} is indexed: {indexed:?}"
            );
        }
        assert!(partial.is_empty(), "partial indexes on tokens: {partial:?}");
        for plan in plans {
            assert!(plan.contains("USING INDEX tokens_args"), "{plan}");
        }
    }

    /// A release hands back the token with its original expiry, once per redemption; a
    /// forged id naming the token's row with the current sequence number is unknown.
    #[test]
    fn release_once_per_redemption_and_forged_ids_are_unknown() {
        let (_dir, l) = ledger();
        let b = Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "c".into(),
            args_hash: tc_core::hash::sha256_hex(b"args"),
        };
        let fp = tc_core::hash::sha256_hex(b"fp");
        l.raise(&b, &fp, "s").unwrap();
        let (token, exp, _) = l.mint(&b, None, &Default::default()).unwrap();
        let r1 = l.redeem(&token, &b, &fp).unwrap();
        let forged = format!("{}forged", &r1[..r1.rfind('.').unwrap() + 1]);
        assert_eq!(reason(l.release(&forged, "x")), Reason::Unknown);
        l.release(&r1, "x").unwrap();
        assert_eq!(reason(l.release(&r1, "x")), Reason::Spent);
        let r2 = l.redeem(&token, &b, &fp).unwrap();
        assert_ne!(r1, r2);
        assert_eq!(reason(l.release(&r1, "x")), Reason::Spent);
        assert_eq!(reason(l.redeem(&token, &b, &fp)), Reason::Spent);
        l.release(&r2, "x").unwrap();
        let after: i64 = l
            .store
            .read(|c| Ok(c.query_row("SELECT expires_at FROM tokens", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(after, exp);
        // A drift spends the token and leaves the released redemption released.
        let other = tc_core::hash::sha256_hex(b"other");
        assert_eq!(reason(l.redeem(&token, &b, &other)), Reason::ReplayDrift);
        assert_eq!(reason(l.release(&r2, "x")), Reason::Spent);
        assert_eq!(reason(l.redeem(&token, &b, &fp)), Reason::Spent);
    }
}
