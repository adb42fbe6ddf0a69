//! The one-time links that open a page session: minted over the Unix socket (`OpenPage`,
//! the peer's uid from `SO_PEERCRED`), spent once at `/open`, a minute to live. Stored
//! as SHA-256 only, so the database never holds a live link; a spend that opens a
//! session commits a `tc.page.opened` event with it.

use rand::RngCore;
use sha2::{Digest, Sha256};
use tc_core::now_ms;

use crate::error::DaemonError;
use crate::ledger::Ledger;
use crate::store::NewEvent;

/// How long a link opens a session: long enough to click, short enough that one left in a
/// scrollback is dead.
pub const TTL_MS: i64 = 60 * 1000;
/// Links outstanding per uid (the oldest go first): a human cannot fill the table for
/// another.
const MAX_PER_UID: i64 = 8;

fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
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
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    let token = hex::encode(b);
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
    fn one_uid_cannot_push_out_another_uids_links() {
        let (_dir, l) = crate::ledger::scratch();
        let (mine, _) = mint(&l, 1000, None).unwrap();
        for _ in 0..3 * MAX_PER_UID {
            mint(&l, 1001, None).unwrap();
        }
        assert_eq!(spend(&l, &mine, 1000).unwrap().map(|o| o.uid), Some(1000));
    }
}
