//! Request states (2026-07-28 `requestState`) and paging cursors: sealed blobs bound to
//! a call, opened with expiry, caller and request checks; a state's use is single.

use serde_json::json;
use tc_core::codes::events;
use tc_core::{now_ms, Reason};

use crate::error::DaemonError;
use crate::ledger::{Ledger, CURSOR_TTL_MS};
use crate::record::{check_hash, Binding};
use crate::seal::{self, Sealed};
use crate::secret::Secret;

impl Ledger {
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
            nonce: crate::random::b64(16),
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
                if tx.consume_state(&s.nonce, now, s.expires_at_ms)? {
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
}
