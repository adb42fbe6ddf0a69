//! Passkeys for approving on the page: the WebAuthn relying party (`localhost`, user
//! verification required) and the `passkeys` table (public credentials only), each
//! owned by one human and, in guarded mode, inactive until that human confirms it.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;
use tc_core::codes::events;
use tc_core::{now_ms, Reason};
use webauthn_rs::prelude::{AuthenticationResult, Passkey, Url, Uuid};
use webauthn_rs::{Webauthn, WebauthnBuilder};

use crate::error::DaemonError;
use crate::factor;
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
#[derive(Debug, Clone)]
pub struct Listed {
    pub credential: String,
    pub name: String,
    pub owner: Option<u32>,
    pub active: bool,
    pub created_at_ms: i64,
    pub last_used_at_ms: Option<i64>,
}

/// The rows that may approve for `?2` (`?1`: guarded mode; personal mode has one human).
macro_rules! usable_rows {
    () => {
        "FROM passkeys WHERE active = 1 AND (?1 = 0 OR owner_uid = ?2)"
    };
}

/// The passkeys that may approve for `uid`: active ones of that human (personal mode:
/// every active one, there being one human).
pub fn usable(l: &Ledger, uid: u32) -> Result<Vec<Passkey>, DaemonError> {
    let guarded = l.mode() == tc_core::config::Mode::Guarded;
    l.store.read(|c| {
        let mut st = c.prepare_cached(concat!(
            "SELECT passkey ",
            usable_rows!(),
            " ORDER BY created_at"
        ))?;
        let rows = st.query_map(params![guarded, uid], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(serde_json::from_str(&r?).map_err(internal)?);
        }
        Ok(out)
    })
}

/// Every passkey `viewer` may see: their own (root, or `None`: all).
pub fn list(l: &Ledger, viewer: Option<u32>) -> Result<Vec<Listed>, DaemonError> {
    l.store.read(|c| {
        let mut st = c.prepare_cached(
            "SELECT cred_id, name, owner_uid, active, created_at, last_used_at FROM passkeys
             WHERE ?1 IS NULL OR owner_uid = ?1 ORDER BY created_at",
        )?;
        let rows = st.query_map(params![viewer], |r| {
            Ok(Listed {
                credential: r.get(0)?,
                name: r.get(1)?,
                owner: r.get(2)?,
                active: r.get(3)?,
                created_at_ms: r.get(4)?,
                last_used_at_ms: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    })
}

/// How many passkeys may approve for `uid` (those [`usable`] returns, counted by SQLite:
/// the page's state asks on every commit and tick).
pub fn count(l: &Ledger, uid: u32) -> Result<u32, DaemonError> {
    let guarded = l.mode() == tc_core::config::Mode::Guarded;
    l.store.read(|c| {
        Ok(
            c.prepare_cached(concat!("SELECT count(*) ", usable_rows!()))?
                .query_row(params![guarded, uid], |r| r.get::<_, u32>(0))?,
        )
    })
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
        tx.execute(
            "DELETE FROM passkeys WHERE active = 0 AND created_at <= ?1",
            params![now - UNCONFIRMED_TTL_MS],
        )?;
        let n = tx.execute(
            "INSERT INTO passkeys (cred_id, name, passkey, created_at, owner_uid, active)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (cred_id) DO NOTHING",
            params![id, name, text, now, owner, active],
        )?;
        if n == 0 {
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
fn find(
    tx: &Connection,
    prefix: &str,
    who: u32,
) -> Result<Result<Found, DaemonError>, DaemonError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if prefix.len() < MIN_PREFIX || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Err(DaemonError::refused(
            Reason::BadArgument,
            format!("name the passkey by its credential id or its first {MIN_PREFIX}+ hex digits (`tcctl passkey list`)"),
        )));
    }
    let mut st = tx.prepare_cached(
        "SELECT cred_id, owner_uid, active FROM passkeys
         WHERE substr(cred_id, 1, length(?1)) = ?1 AND (?2 = 0 OR owner_uid = ?2) LIMIT 2",
    )?;
    let rows: Vec<Found> = st
        .query_map(params![prefix, who], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
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
        let n = tx.execute(
            "UPDATE passkeys SET active = 1 WHERE cred_id = ?1 AND created_at > ?2",
            params![id, now - UNCONFIRMED_TTL_MS],
        )?;
        if n != 1 {
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
        tx.execute("DELETE FROM passkeys WHERE cred_id = ?1", params![id])?;
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
    l.store.read(|c| {
        Ok(c.query_row(
            "SELECT owner_uid FROM passkeys WHERE cred_id = ?1 AND active = 1",
            params![cred],
            |r| r.get::<_, Option<u32>>(0),
        )
        .optional()?)
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
