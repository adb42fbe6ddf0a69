//! Passkeys for approving on the page: the WebAuthn relying party (`localhost`, user
//! verification required) and the `passkeys` table (public credentials only).

use rusqlite::params;
use serde_json::json;
use tc_core::codes::events;
use tc_core::now_ms;
use webauthn_rs::prelude::{AuthenticationResult, Passkey, Url, Uuid};
use webauthn_rs::{Webauthn, WebauthnBuilder};

use crate::error::DaemonError;
use crate::ledger::Ledger;
use crate::store::NewEvent;

/// The relying party: `localhost` (WebAuthn takes no IP address), origin
/// `http://localhost:PORT` (a secure context although plain HTTP: loopback).
pub fn webauthn(port: u16) -> anyhow::Result<Webauthn> {
    let origin = Url::parse(&format!("http://localhost:{port}"))?;
    Ok(WebauthnBuilder::new("localhost", &origin)?
        .rp_name("tc approvals")
        .build()?)
}

/// The one user every passkey belongs to: the page approves for whoever raised a request.
pub const USER: Uuid = Uuid::from_u128(0x7c00_0000_0000_4000_8000_0000_0000_0001);

fn internal(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::Internal(format!("passkey store: {e}"))
}

/// Every registered passkey.
pub fn all(l: &Ledger) -> Result<Vec<Passkey>, DaemonError> {
    l.store.read(|c| {
        let mut st = c.prepare_cached("SELECT passkey FROM passkeys ORDER BY created_at")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(serde_json::from_str(&r?).map_err(internal)?);
        }
        Ok(out)
    })
}

/// Stores a newly registered passkey; refused if its credential id is already known.
pub fn add(l: &Ledger, pk: &Passkey, name: &str) -> Result<(), DaemonError> {
    let id = hex::encode::<&[u8]>(pk.cred_id().as_ref());
    let text = serde_json::to_string(pk).map_err(internal)?;
    let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    l.store.write(|tx, evs| {
        let n = tx.execute(
            "INSERT INTO passkeys (cred_id, name, passkey, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (cred_id) DO NOTHING",
            params![id, name, text, now_ms()],
        )?;
        if n == 0 {
            return Ok(Err(DaemonError::refused(
                tc_core::Reason::BadArgument,
                "this passkey is already registered",
            )));
        }
        evs.push(NewEvent {
            kind: events::PASSKEY_ADDED,
            detail: json!({ "name": name, "credential": &id[..id.len().min(16)] }),
            ..Default::default()
        });
        Ok(Ok(()))
    })
}

/// After a verified assertion: the credential's new counter (a clone's lower one was
/// refused by the verification).
pub fn used(l: &Ledger, res: &AuthenticationResult) -> Result<(), DaemonError> {
    let id = hex::encode::<&[u8]>(res.cred_id().as_ref());
    l.store.write(|tx, _| {
        let text: Option<String> = tx
            .query_row(
                "SELECT passkey FROM passkeys WHERE cred_id = ?1",
                params![id],
                |r| r.get(0),
            )
            .ok();
        let Some(text) = text else { return Ok(Ok(())) };
        let mut pk: Passkey = serde_json::from_str(&text).map_err(internal)?;
        pk.update_credential(res);
        let text = serde_json::to_string(&pk).map_err(internal)?;
        tx.execute(
            "UPDATE passkeys SET passkey = ?2, last_used_at = ?3 WHERE cred_id = ?1",
            params![id, text, now_ms()],
        )?;
        Ok(Ok(()))
    })
}

/// How many passkeys are registered.
pub fn count(l: &Ledger) -> Result<u32, DaemonError> {
    l.store
        .read(|c| Ok(c.query_row("SELECT count(*) FROM passkeys", [], |r| r.get::<_, u32>(0))?))
}
