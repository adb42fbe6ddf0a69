//! The page's side of the socket: `OpenPage` (a one-time link for the peer's uid) and the
//! passkey RPCs (`PasskeyCode`, `ListPasskeys`, `ConfirmPasskey`, `RemovePasskey`), each
//! acting for the peer the kernel names and, in guarded mode, on that human's own only.

use std::net::SocketAddr;

use tc_core::config::{ApprovalsConfig, Mode};
use tc_core::Reason;
use tc_proto::v1;

use super::{codes, links, passkeys};
use crate::approvals::is_request_id;
use crate::error::DaemonError;
use crate::factor;
use crate::ledger::Ledger;

fn page_off() -> DaemonError {
    DaemonError::refused(
        Reason::NotPermitted,
        "the approval page is off: set `[approvals] listen = \"127.0.0.1:7777\"` in tcd's config and restart it",
    )
}

/// `OpenPage`: a link that opens one page session of `uid`.
pub fn open_page(
    l: &Ledger,
    addr: Option<SocketAddr>,
    uid: u32,
    request_id: String,
) -> Result<v1::OpenPageReply, DaemonError> {
    let addr = addr.ok_or_else(page_off)?;
    let request_id = match request_id.trim() {
        "" => None,
        id if is_request_id(id) => Some(id.to_string()),
        _ => {
            return Err(DaemonError::refused(
                Reason::BadArgument,
                "not a request id (see `tcctl pending`)",
            ))
        }
    };
    let (token, expires_at_ms) = links::mint(l, uid, request_id)?;
    Ok(v1::OpenPageReply {
        url: format!("{}open?t={token}", ApprovalsConfig::page_url(addr)),
        expires_at_ms,
    })
}

/// `OpenPage` with `remote`: a link that opens a registration-only session of `uid` on
/// the remote page (`origin`, its `public_url`).
pub fn open_remote(
    l: &Ledger,
    origin: Option<String>,
    uid: u32,
) -> Result<v1::OpenPageReply, DaemonError> {
    let origin = origin.ok_or_else(|| {
        DaemonError::refused(
            Reason::NotPermitted,
            "the remote approval page is off: set `[approvals] remote = { listen = …, public_url = …, tls = \"self-signed\" }` in tcd's config and restart it",
        )
    })?;
    let (token, expires_at_ms) = links::mint_remote(l, uid)?;
    Ok(v1::OpenPageReply {
        url: format!("{origin}/open?t={token}"),
        expires_at_ms,
    })
}

/// `PasskeyCode`: a registration code for the peer (a human), or, from root in guarded
/// mode, for the human `user` names.
pub fn passkey_code(l: &Ledger, uid: u32, user: &str) -> Result<v1::PasskeyCodeReply, DaemonError> {
    let owner =
        match (l.mode(), user.trim()) {
            (Mode::Personal, "") => uid,
            (Mode::Personal, _) => {
                return Err(DaemonError::refused(
                    Reason::BadArgument,
                    "personal mode has one user: leave out --user",
                ))
            }
            (Mode::Guarded, "") if uid == 0 => return Err(DaemonError::refused(
                Reason::BadArgument,
                "root: name the human the passkey is for (`sudo tcctl passkey add --user NAME`)",
            )),
            (Mode::Guarded, "") => uid,
            (Mode::Guarded, u) if uid == 0 => factor::human_uid(l.humans(), u)?.0,
            (Mode::Guarded, _) => {
                return Err(DaemonError::refused(
                    Reason::NotPermitted,
                    "only root may add a passkey for another user",
                ))
            }
        };
    let (code, expires_at_ms) = codes::issue(l, owner)?;
    Ok(v1::PasskeyCodeReply {
        code,
        expires_at_ms,
    })
}

/// Whose passkeys `uid` sees and manages: their own; root (and personal mode's one
/// human) all.
fn scope(l: &Ledger, uid: u32) -> Option<u32> {
    (l.mode() == Mode::Guarded && uid != 0).then_some(uid)
}

/// `ListPasskeys`.
pub fn list(l: &Ledger, uid: u32) -> Result<v1::ListPasskeysReply, DaemonError> {
    let passkeys = passkeys::list(l, scope(l, uid))?
        .into_iter()
        .map(|p| v1::Passkey {
            credential: p.credential,
            name: p.name,
            owner_uid: p.owner.unwrap_or(u32::MAX),
            active: p.active,
            created_at_ms: p.created_at_ms,
            last_used_at_ms: p.last_used_at_ms.unwrap_or(0),
        })
        .collect();
    Ok(v1::ListPasskeysReply { passkeys })
}

/// `ConfirmPasskey`: the owner's code (checked as an approval's is), or root.
pub fn confirm(
    l: &Ledger,
    uid: u32,
    r: v1::ConfirmPasskeyRequest,
) -> Result<v1::ConfirmPasskeyReply, DaemonError> {
    let code = r.factor.map(|f| f.totp);
    let credential = passkeys::confirm(l, &r.credential, scope(l, uid).unwrap_or(0), code)?;
    Ok(v1::ConfirmPasskeyReply { credential })
}

/// `RemovePasskey`: the owner's own, or any for root.
pub fn remove(
    l: &Ledger,
    uid: u32,
    credential: &str,
) -> Result<v1::RemovePasskeyReply, DaemonError> {
    let credential = passkeys::remove(l, credential, scope(l, uid).unwrap_or(0))?;
    Ok(v1::RemovePasskeyReply { credential })
}
