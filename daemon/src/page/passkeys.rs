//! Passkeys for approving on the page: the WebAuthn relying party (`localhost`, user
//! verification required) and the `passkeys` table (public credentials only), each
//! owned by one human and, in guarded mode, inactive until that human confirms it.

use serde_json::json;
use tc_core::codes::events;
use tc_core::{now_ms, Reason};
use webauthn_rs::prelude::{AuthenticationResult, Passkey, Url, Uuid};
use webauthn_rs::{Webauthn, WebauthnBuilder};

use crate::error::DaemonError;
use crate::factor;
use crate::ledger::Ledger;
use crate::record::NewEvent;
use crate::store::queries::{NewPasskey, PasskeyRow, Tx};

/// The relying party: `localhost` (WebAuthn takes no IP address), origin
/// `http://localhost:PORT` (a secure context although plain HTTP: loopback).
pub fn webauthn(port: u16) -> anyhow::Result<Webauthn> {
    let origin = Url::parse(&format!("http://localhost:{port}"))?;
    Ok(WebauthnBuilder::new("localhost", &origin)?
        .rp_name("tc approvals")
        .build()?)
}

/// The WebAuthn user handle of `uid`'s passkeys (one per human, so an authenticator keeps
/// two humans' credentials apart).
pub fn user(uid: u32) -> Uuid {
    Uuid::from_u128(0x7c00_0000_0000_4000_8000_0000_0000_0000 | u128::from(uid))
}

/// How long a registration waits for its human's confirmation before it is dropped.
const UNCONFIRMED_TTL_MS: i64 = 10 * 60 * 1000;
/// The shortest credential prefix `tcctl passkey confirm/remove` takes.
const MIN_PREFIX: usize = 8;

fn internal(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::Internal(format!("passkey store: {e}"))
}

/// A registered passkey as `tcctl passkey list` shows it.
pub type Listed = PasskeyRow;

/// The passkeys that may approve for `uid`: active ones of that human (personal mode:
/// every active one, there being one human).
pub fn usable(l: &Ledger, uid: u32) -> Result<Vec<Passkey>, DaemonError> {
    let guarded = l.mode() == tc_core::config::Mode::Guarded;
    let texts = l.store.read(|c| Ok(c.usable_passkeys(guarded, uid)?))?;
    texts
        .iter()
        .map(|t| serde_json::from_str(t).map_err(internal))
        .collect()
}

/// Every passkey `viewer` may see: their own (root, or `None`: all).
pub fn list(l: &Ledger, viewer: Option<u32>) -> Result<Vec<Listed>, DaemonError> {
    l.store.read(|c| Ok(c.list_passkeys(viewer)?))
}

/// How many passkeys may approve for `uid` (those [`usable`] returns, counted by SQLite:
/// the page's state asks on every commit and tick).
pub fn count(l: &Ledger, uid: u32) -> Result<u32, DaemonError> {
    let guarded = l.mode() == tc_core::config::Mode::Guarded;
    l.store.read(|c| Ok(c.count_usable_passkeys(guarded, uid)?))
}

/// Stores a newly registered passkey of `owner` (active at once in personal mode; in
/// guarded mode it waits for [`confirm`]); refused if its credential id is already known.
/// Returns the credential id, hex.
pub fn add(l: &Ledger, pk: &Passkey, name: &str, owner: u32) -> Result<String, DaemonError> {
    let id = hex::encode::<&[u8]>(pk.cred_id().as_ref());
    let text = serde_json::to_string(pk).map_err(internal)?;
    let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    let active = l.mode() != tc_core::config::Mode::Guarded;
    let now = now_ms();
    l.store.write(|tx, evs| {
        tx.drop_unconfirmed_passkeys(now - UNCONFIRMED_TTL_MS)?;
        let added = tx.insert_passkey(&NewPasskey {
            credential: &id,
            name: &name,
            passkey: &text,
            created_at: now,
            owner,
            active,
        })?;
        if !added {
            return Ok(Err(DaemonError::refused(
                Reason::BadArgument,
                "this passkey is already registered",
            )));
        }
        evs.push(event(
            events::PASSKEY_ADDED,
            owner,
            json!({ "name": name, "credential": id, "uid": owner, "active": active }),
        ));
        Ok(Ok(id.clone()))
    })
}

fn event(kind: &'static str, owner: u32, detail: serde_json::Value) -> NewEvent {
    NewEvent {
        kind,
        detail,
        owner: Some(owner),
        ..Default::default()
    }
}

/// A passkey found by prefix: credential id, owner, active.
type Found = (String, Option<u32>, bool);

/// The one passkey `prefix` names among those `who` may manage (root: all).
fn find(tx: &dyn Tx, prefix: &str, who: u32) -> Result<Result<Found, DaemonError>, DaemonError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if prefix.len() < MIN_PREFIX || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Err(DaemonError::refused(
            Reason::BadArgument,
            format!("name the passkey by its credential id or its first {MIN_PREFIX}+ hex digits (`tcctl passkey list`)"),
        )));
    }
    let rows: Vec<Found> = tx.passkeys_by_prefix(&prefix, who)?;
    Ok(match rows.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(DaemonError::refused(
            Reason::Unknown,
            format!("no passkey of yours starts with {prefix:?} (`tcctl passkey list`)"),
        )),
        _ => Err(DaemonError::refused(
            Reason::BadArgument,
            format!("more than one passkey starts with {prefix:?}: give more digits"),
        )),
    })
}

/// Guarded mode: activates the passkey `prefix` names, with its owner's TOTP code checked
/// in the same transaction (root confirms without one). Returns the credential id.
pub fn confirm(
    l: &Ledger,
    prefix: &str,
    who: u32,
    code: Option<String>,
) -> Result<String, DaemonError> {
    if l.mode() != tc_core::config::Mode::Guarded {
        return Err(DaemonError::refused(
            Reason::NotPermitted,
            "personal mode: a passkey is active once registered; nothing to confirm",
        ));
    }
    let now = now_ms();
    l.store.write(|tx, evs| {
        let (id, owner, active) = match find(tx, prefix, who)? {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        if active {
            return Ok(Err(DaemonError::refused(
                Reason::Spent,
                "this passkey is confirmed already",
            )));
        }
        let Some(owner) = owner else {
            return Ok(Err(DaemonError::refused(
                Reason::NotPermitted,
                "this passkey has no owner: remove it and register again",
            )));
        };
        if who != 0 {
            if let Err(e) = factor::check(tx, evs, who, code.as_deref(), now)? {
                return Ok(Err(e));
            }
        }
        if !tx.activate_passkey(&id, now - UNCONFIRMED_TTL_MS)? {
            return Ok(Err(DaemonError::refused(
                Reason::Expired,
                "this registration waited too long: remove it and register again",
            )));
        }
        evs.push(event(
            events::PASSKEY_CONFIRMED,
            owner,
            json!({ "credential": id, "uid": owner, "by": who }),
        ));
        Ok(Ok(id))
    })
}

/// Removes the passkey `prefix` names (its owner's, or any for root).
pub fn remove(l: &Ledger, prefix: &str, who: u32) -> Result<String, DaemonError> {
    l.store.write(|tx, evs| {
        let (id, owner, _) = match find(tx, prefix, who)? {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        tx.delete_passkey(&id)?;
        evs.push(event(
            events::PASSKEY_REMOVED,
            owner.unwrap_or(who),
            json!({ "credential": id, "uid": owner, "by": who }),
        ));
        Ok(Ok(id))
    })
}

/// The owner of an active credential (after a verified assertion), `None` when unknown.
pub fn owner(l: &Ledger, cred: &str) -> Result<Option<Option<u32>>, DaemonError> {
    l.store.read(|c| Ok(c.passkey_owner(cred)?))
}

/// After a verified assertion: the credential's new counter (a clone's lower one was
/// refused by the verification).
pub fn used(l: &Ledger, res: &AuthenticationResult) -> Result<(), DaemonError> {
    let id = hex::encode::<&[u8]>(res.cred_id().as_ref());
    l.store.write(|tx, _| {
        let text = tx.passkey_text(&id)?;
        let Some(text) = text else { return Ok(Ok(())) };
        let mut pk: Passkey = serde_json::from_str(&text).map_err(internal)?;
        pk.update_credential(res);
        let text = serde_json::to_string(&pk).map_err(internal)?;
        tx.update_passkey(&id, &text, now_ms())?;
        Ok(Ok(()))
    })
}
