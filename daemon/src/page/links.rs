//! The one-time links that open a page session: minted over the Unix socket (`OpenPage`,
//! the peer's uid from `SO_PEERCRED`), spent once at `/open`, a minute to live. Stored
//! as SHA-256 only, so the database never holds a live link; a spend that opens a
//! session commits a `tc.page.opened` event with it. A remote page's link (registration
//! only, [`mint_remote`]) is hashed apart, so neither kind opens the other page.

use rand::RngCore;
use sha2::{Digest, Sha256};
use tc_core::now_ms;

use crate::error::DaemonError;
use crate::ledger::Ledger;
use crate::record::NewEvent;

/// How long a link opens a session: long enough to click, short enough that one left in a
/// scrollback is dead.
pub const TTL_MS: i64 = 60 * 1000;
/// Links outstanding per uid (the oldest go first): a human cannot fill the table for
/// another.
const MAX_PER_UID: i64 = 8;

/// How long a remote page's registration link lives: time to get it onto a phone.
pub const REMOTE_TTL_MS: i64 = 5 * 60 * 1000;

fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// A remote link's hash: its own domain, so a loopback link (leaked on a command line)
/// opens nothing off the machine, and a remote one nothing on loopback.
fn remote_hash(secret: &str) -> Vec<u8> {
    Sha256::digest(format!("tc remote page link:{secret}").as_bytes()).to_vec()
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// A remote page's registration link token for `uid`, `UID-SECRET` (no socket names
/// the phone's uid, so the link carries it; the secret is what authenticates), and its
/// expiry.
pub fn mint_remote(l: &Ledger, uid: u32) -> Result<(String, i64), DaemonError> {
    let secret = random_hex();
    let now = now_ms();
    let exp = now + REMOTE_TTL_MS;
    l.store.write(|tx, _| {
        tx.insert_link(&remote_hash(&secret), &(uid, None, exp), MAX_PER_UID, now)?;
        Ok(Ok(()))
    })?;
    Ok((format!("{uid}-{secret}"), exp))
}

/// Spends a remote link: the uid it opens a registration session for, when it was live.
pub fn spend_remote(l: &Ledger, token: &str) -> Result<Option<u32>, DaemonError> {
    let Some((uid, secret)) = token.split_once('-') else {
        return Ok(None);
    };
    let Ok(uid) = uid.parse::<u32>() else {
        return Ok(None);
    };
    if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let now = now_ms();
    l.store.write(|tx, evs| {
        let row = tx.take_link(&remote_hash(secret), uid)?;
        let opened = row.filter(|(_, _, exp)| *exp > now).map(|(uid, _, _)| uid);
        if let Some(uid) = opened {
            evs.push(NewEvent {
                kind: tc_core::codes::events::PAGE_OPENED,
                detail: serde_json::json!({ "uid": uid, "remote": true, "access": "register" }),
                owner: Some(uid),
                ..Default::default()
            });
        }
        Ok(Ok(opened))
    })
}

/// What a spent link opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub uid: u32,
    /// The request the page should show first, if the link named one.
    pub request_id: Option<String>,
}

/// A new link token for `uid` and its expiry (runs on the store thread).
pub fn mint(
    l: &Ledger,
    uid: u32,
    request_id: Option<String>,
) -> Result<(String, i64), DaemonError> {
    let token = random_hex();
    let now = now_ms();
    let exp = now + TTL_MS;
    l.store.write(|tx, _| {
        let link = (uid, request_id, exp);
        tx.insert_link(&hash(&token), &link, MAX_PER_UID, now)?;
        Ok(Ok(()))
    })?;
    Ok((token, exp))
}

/// Spends `token` for a client whose socket `peer` owns: what it opens when it was live
/// and minted by `peer` (then it is gone; another uid's attempt leaves it, unusable to
/// them, for its owner).
pub fn spend(l: &Ledger, token: &str, peer: u32) -> Result<Option<Opened>, DaemonError> {
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let now = now_ms();
    l.store.write(|tx, evs| {
        let row = tx.take_link(&hash(token), peer)?;
        let opened = row
            .filter(|(_, _, exp)| *exp > now)
            .map(|(uid, request_id, _)| Opened { uid, request_id });
        if let Some(o) = &opened {
            // The session it opens is recorded with the spend, in one commit.
            evs.push(NewEvent {
                kind: tc_core::codes::events::PAGE_OPENED,
                detail: serde_json::json!({ "uid": o.uid }),
                owner: Some(o.uid),
                ..Default::default()
            });
        }
        Ok(Ok(opened))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_once_for_its_uid() {
        let (_dir, l) = crate::ledger::scratch();
        let (t, exp) = mint(&l, 1000, Some("abcdefgh".into())).unwrap();
        assert!(exp > now_ms());
        assert_eq!(spend(&l, "0".repeat(64).as_str(), 1000).unwrap(), None);
        assert_eq!(spend(&l, &t, 1001).unwrap(), None, "another uid's socket");
        assert_eq!(
            spend(&l, &t, 1000).unwrap(),
            Some(Opened {
                uid: 1000,
                request_id: Some("abcdefgh".into())
            })
        );
        assert_eq!(spend(&l, &t, 1000).unwrap(), None, "single use");
        let opened: Vec<_> = l
            .store
            .events_after(0, 100)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == tc_core::codes::events::PAGE_OPENED)
            .collect();
        assert_eq!(opened.len(), 1, "one event, for the one session opened");
        assert_eq!(spend(&l, "not hex", 1000).unwrap(), None);
    }

    #[test]
    fn a_remote_link_opens_once_on_the_remote_page_only() {
        let (_dir, l) = crate::ledger::scratch();
        let (t, _) = mint_remote(&l, 1000).unwrap();
        let (uid, secret) = t.split_once('-').unwrap();
        assert_eq!(uid, "1000");
        assert_eq!(
            spend(&l, secret, 1000).unwrap(),
            None,
            "not a loopback link"
        );
        assert_eq!(spend_remote(&l, &format!("1001-{secret}")).unwrap(), None);
        assert_eq!(spend_remote(&l, &t).unwrap(), Some(1000));
        assert_eq!(spend_remote(&l, &t).unwrap(), None, "single use");
        let (local, _) = mint(&l, 1000, None).unwrap();
        assert_eq!(spend_remote(&l, &format!("1000-{local}")).unwrap(), None);
        assert_eq!(spend_remote(&l, "garbage").unwrap(), None);
    }

    #[test]
    fn one_uid_cannot_push_out_another_uids_links() {
        let (_dir, l) = crate::ledger::scratch();
        let (mine, _) = mint(&l, 1000, None).unwrap();
        for _ in 0..3 * MAX_PER_UID {
            mint(&l, 1001, None).unwrap();
        }
        assert_eq!(spend(&l, &mine, 1000).unwrap().map(|o| o.uid), Some(1000));
    }
}
