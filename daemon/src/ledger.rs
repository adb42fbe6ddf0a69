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
        for (name, v) in [
            ("vault", &self.vault),
            ("tool", &self.tool),
            ("caller", &self.caller),
        ] {
            if v.is_empty() || v.len() > 256 {
                return Err(DaemonError::refused(
                    Reason::BadArgument,
                    format!("{name} must be 1..=256 bytes"),
                ));
            }
        }
        check_hash("args_hash", &self.args_hash)
    }

    fn event(&self, kind: &'static str, state_fp: &str, detail: serde_json::Value) -> NewEvent {
        NewEvent {
            kind,
            vault: self.vault.clone(),
            tool: self.tool.clone(),
            caller: self.caller.clone(),
            args_hash: self.args_hash.clone(),
            state_fp: state_fp.to_string(),
            detail,
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

/// A request waiting for a human, as `tcctl pending` shows it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub binding: Binding,
    pub state_fp: String,
    pub summary: String,
    pub raised_at_ms: i64,
    pub expires_at_ms: i64,
    pub minted: bool,
}

/// The ledger: the store plus the keys that hash tokens and seal blobs.
pub struct Ledger {
    pub store: Store,
    secret: RwLock<Secret>,
    ttl_ms: i64,
}

fn random_b64(n: usize) -> String {
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
        }
    }

    fn keys<T>(&self, f: impl FnOnce(&Secret) -> T) -> T {
        f(&self.secret.read().unwrap_or_else(|p| p.into_inner()))
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

    /// Records (replacing) the latest raised request for (vault, caller, args_hash).
    pub fn raise(
        &self,
        b: &Binding,
        state_fp: &str,
        summary: &str,
    ) -> Result<(i64, i64), DaemonError> {
        b.check()?;
        check_hash("state_fp", state_fp)?;
        let summary: String = summary.chars().take(2000).collect();
        let now = now_ms();
        let exp = now + self.ttl_ms;
        self.store.write(|tx, evs| {
            tx.execute(
                "INSERT INTO raised (vault, caller, args_hash, tool, state_fp, summary, raised_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (vault, caller, args_hash) DO UPDATE SET
                   tool = excluded.tool, state_fp = excluded.state_fp, summary = excluded.summary,
                   raised_at = excluded.raised_at, expires_at = excluded.expires_at",
                params![b.vault, b.caller, b.args_hash, b.tool, state_fp, summary, now, exp],
            )?;
            evs.push(b.event(events::REQUESTED, state_fp, json!({ "summary": summary })));
            Ok(Ok((now, exp)))
        })
    }

    /// Mints a token for the retained raised request; with `pin`, only if the request's
    /// fingerprint is exactly `pin`.
    pub fn mint(
        &self,
        b: &Binding,
        pin: Option<&str>,
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
            let raised: Option<(String, String, i64)> = tx
                .query_row(
                    "SELECT tool, state_fp, expires_at FROM raised WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3",
                    params![b.vault, b.caller, b.args_hash],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let Some((tool, fp, raised_exp)) = raised else {
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
            tx.execute(
                "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![hash, b.vault, b.tool, b.caller, b.args_hash, fp, now, exp],
            )?;
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
        let redemption = random_b64(18);
        self.store.write(|tx, evs| {
            type Row = (String, String, String, String, String, i64, Option<i64>);
            let row: Option<Row> = tx
                .query_row(
                    "SELECT vault, tool, caller, args_hash, state_fp, expires_at, consumed_at
                     FROM tokens WHERE token_hash = ?1",
                    params![hash],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)),
                )
                .optional()?;
            let Some((vault, tool, caller, args_hash, fp, exp, consumed)) = row else {
                return Err(DaemonError::refused(
                    Reason::Unknown,
                    "unknown confirmation token (never issued here, or voided by a secret rotation)",
                ));
            };
            if consumed.is_some() {
                return Err(DaemonError::refused(Reason::Spent, "this confirmation token was already used"));
            }
            if exp <= now {
                return Err(DaemonError::refused(Reason::Expired, "this confirmation token has expired"));
            }
            let issued = Binding { vault, tool, caller, args_hash };
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
                evs.push(b.event(events::REFUSED, current_fp, json!({ "reason": "binding_mismatch", "fields": fields })));
                return Ok(Err(DaemonError::refused(
                    Reason::BindingMismatch,
                    format!("this token was minted for a different call ({} differ)", fields.join(", ")),
                )));
            }
            let spent = tx.execute(
                "UPDATE tokens SET consumed_at = ?2, redemption_id = ?3 WHERE token_hash = ?1 AND consumed_at IS NULL",
                params![hash, now, if fp == current_fp { Some(&redemption) } else { None }],
            )?;
            if spent != 1 {
                return Err(DaemonError::refused(Reason::Spent, "this confirmation token was already used"));
            }
            if fp != current_fp {
                evs.push(b.event(events::REPLAY_DRIFT, current_fp, json!({ "approved_state_fp": fp })));
                return Ok(Err(DaemonError::refused(
                    Reason::ReplayDrift,
                    "the target changed since the confirmation was requested; nothing was applied and the token is spent",
                )));
            }
            tx.execute(
                "INSERT INTO redemptions (id, token_hash, redeemed_at) VALUES (?1, ?2, ?3)",
                params![redemption, hash, now],
            )?;
            evs.push(b.event(events::REDEEMED, current_fp, json!({ "redemption_id": redemption })));
            Ok(Ok(redemption.clone()))
        })
    }

    /// Gives a redemption's token back unspent (same expiry and binding), once, and only
    /// if the handler has not been recorded as run.
    pub fn release(&self, redemption_id: &str, why: &str) -> Result<(), DaemonError> {
        let now = now_ms();
        self.store.write(|tx, evs| {
            type Row = (Vec<u8>, Option<i64>, Option<i64>);
            let row: Option<Row> = tx
                .query_row(
                    "SELECT token_hash, released_at, final_at FROM redemptions WHERE id = ?1",
                    params![redemption_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let Some((hash, released, fin)) = row else {
                return Err(DaemonError::refused(Reason::Unknown, "no such redemption"));
            };
            if released.is_some() {
                return Err(DaemonError::refused(Reason::Spent, "this redemption was already released"));
            }
            if fin.is_some() {
                return Err(DaemonError::refused(
                    Reason::Spent,
                    "the call already ran with this redemption; it cannot be released",
                ));
            }
            tx.execute("UPDATE redemptions SET released_at = ?2 WHERE id = ?1", params![redemption_id, now])?;
            tx.execute(
                "UPDATE tokens SET consumed_at = NULL, redemption_id = NULL WHERE token_hash = ?1 AND redemption_id = ?2",
                params![hash, redemption_id],
            )?;
            let b = tx.query_row(
                "SELECT vault, tool, caller, args_hash FROM tokens WHERE token_hash = ?1",
                params![hash],
                |r| Ok(Binding { vault: r.get(0)?, tool: r.get(1)?, caller: r.get(2)?, args_hash: r.get(3)? }),
            )?;
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
                let n = tx.execute(
                    "UPDATE redemptions SET final_at = ?2
                     WHERE id = ?1 AND final_at IS NULL AND released_at IS NULL
                       AND EXISTS (SELECT 1 FROM tokens t WHERE t.token_hash = redemptions.token_hash
                                   AND t.vault = ?3 AND t.tool = ?4 AND t.caller = ?5 AND t.args_hash = ?6)",
                    params![redemption_id, now, b.vault, b.tool, b.caller, b.args_hash],
                )?;
                if n != 1 {
                    return Err(DaemonError::refused(
                        Reason::Spent,
                        "this redemption is unknown, released, already recorded as run, or for another call",
                    ));
                }
            }
            tx.execute(
                "DELETE FROM raised WHERE vault = ?1 AND caller = ?2 AND args_hash = ?3",
                params![b.vault, b.caller, b.args_hash],
            )?;
            // One approval, one run: other tokens minted for the same call (the operator ran
            // `tcctl elicit` twice) are spent with it, so the next run needs a fresh approval.
            let voided = tx.execute(
                "UPDATE tokens SET consumed_at = ?5
                 WHERE vault = ?1 AND tool = ?2 AND caller = ?3 AND args_hash = ?4 AND consumed_at IS NULL",
                params![b.vault, b.tool, b.caller, b.args_hash, now],
            )?;
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
        Ok(self.seal_blob(|s| s.keys.state, b, state_fp, inner, self.ttl_ms))
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
                    self.store.append(b.event(
                        events::REFUSED,
                        "",
                        json!({ "reason": reason.as_str(), "what": "request_state" }),
                    ))?;
                }
                return Err(e);
            }
        };
        if consume {
            let now = now_ms();
            self.store.write(|tx, evs| {
                let n = tx.execute(
                    "INSERT INTO consumed_states (nonce, consumed_at, expires_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (nonce) DO NOTHING",
                    params![s.nonce, now, s.expires_at_ms],
                )?;
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
                evs.push(b.event(events::REFUSED, &s.state_fp, json!({ "reason": "spent", "what": "request_state" })));
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
            .and_then(|s| seal::decode_inner(&s.inner))
        {
            Ok(p) => Ok(p),
            Err(e) => {
                if let DaemonError::Refused { reason, .. } = &e {
                    self.store.append(b.event(
                        events::CURSOR_REJECTED,
                        "",
                        json!({ "reason": reason.as_str() }),
                    ))?;
                }
                Err(e)
            }
        }
    }

    /// Requests still waiting (unexpired), newest first.
    pub fn pending(&self, vault: &str) -> Result<Vec<Pending>, DaemonError> {
        let now = now_ms();
        self.store.read(|c| {
            let mut st = c.prepare(
                "SELECT r.vault, r.tool, r.caller, r.args_hash, r.state_fp, r.summary, r.raised_at, r.expires_at,
                   EXISTS (SELECT 1 FROM tokens t WHERE t.vault = r.vault AND t.caller = r.caller
                           AND t.args_hash = r.args_hash AND t.state_fp = r.state_fp AND t.created_at >= r.raised_at)
                 FROM raised r WHERE r.expires_at > ?1 AND (?2 = '' OR r.vault = ?2)
                 ORDER BY r.raised_at DESC",
            )?;
            let rows = st.query_map(params![now, vault], |r| {
                Ok(Pending {
                    binding: Binding { vault: r.get(0)?, tool: r.get(1)?, caller: r.get(2)?, args_hash: r.get(3)? },
                    state_fp: r.get(4)?,
                    summary: r.get(5)?,
                    raised_at_ms: r.get(6)?,
                    expires_at_ms: r.get(7)?,
                    minted: r.get(8)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// (pending requests, live tokens, events) for `Status`.
    pub fn counts(&self) -> Result<(u64, u64, u64), DaemonError> {
        let now = now_ms();
        self.store
            .read(|c| {
                let q = |sql: &str| {
                    c.query_row(sql, params![now], |r| r.get::<_, i64>(0))
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
            match tx.execute("DELETE FROM tokens WHERE consumed_at IS NULL", []) {
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

    /// Deletes rows nothing can use any more (expired states, old raised requests).
    pub fn gc(&self) -> Result<(), DaemonError> {
        let now = now_ms();
        self.store.write(|tx, _| {
            let r = (|| {
                tx.execute(
                    "DELETE FROM consumed_states WHERE expires_at <= ?1",
                    params![now],
                )?;
                tx.execute(
                    "DELETE FROM raised WHERE expires_at <= ?1",
                    params![now - 86_400_000],
                )?;
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
        self.store.append(NewEvent { kind, ..ev })
    }

    /// Records a refused peer.
    pub fn auth_denied(&self, uid: Option<u32>, pid: Option<i32>) {
        let ev = NewEvent {
            kind: events::AUTH_DENIED,
            detail: json!({ "uid": uid, "pid": pid }),
            ..Default::default()
        };
        if let Err(e) = self.store.append(ev) {
            tracing::warn!(error = %e, "could not record tc.auth.denied");
        }
    }
}
