//! SQLite: the approval page's rows of [`PageQueries`]: passkeys (public credentials),
//! one-time registration codes and page links (their SHA-256 only).

use rusqlite::{params, Connection, OptionalExtension};

use super::{change, select};
use crate::store::queries::{LinkRow, NewPasskey, PageQueries, PasskeyRow, Q};
use crate::store::rows::{self, PASSKEY_COLS};

impl PageQueries for Connection {
    fn usable_passkeys(&self, guarded: bool, uid: u32) -> Q<Vec<String>> {
        let mut st = self.prepare_cached(
            "SELECT passkey FROM passkeys WHERE active = 1 AND (?1 = 0 OR owner_uid = ?2)
             ORDER BY created_at",
        )?;
        let rows = st.query_map(params![guarded, uid], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn count_usable_passkeys(&self, guarded: bool, uid: u32) -> Q<u32> {
        Ok(self
            .prepare_cached(
                "SELECT count(*) FROM passkeys WHERE active = 1 AND (?1 = 0 OR owner_uid = ?2)",
            )?
            .query_row(params![guarded, uid], |r| r.get::<_, u32>(0))?)
    }

    fn list_passkeys(&self, viewer: Option<u32>) -> Q<Vec<PasskeyRow>> {
        let sql = format!("SELECT {PASSKEY_COLS} FROM passkeys WHERE ?1 IS NULL OR owner_uid = ?1 ORDER BY created_at");
        select(self, &sql, params![viewer], |r| rows::passkey_row(r))
    }

    fn drop_unconfirmed_passkeys(&self, before: i64) -> Q<()> {
        change(
            self,
            "DELETE FROM passkeys WHERE active = 0 AND created_at <= ?1",
            params![before],
        )?;
        Ok(())
    }

    fn insert_passkey(&self, p: &NewPasskey<'_>) -> Q<bool> {
        Ok(change(
            self,
            "INSERT INTO passkeys (cred_id, name, passkey, created_at, owner_uid, active)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (cred_id) DO NOTHING",
            params![
                p.credential,
                p.name,
                p.passkey,
                p.created_at,
                p.owner,
                p.active
            ],
        )? == 1)
    }

    fn passkeys_by_prefix(&self, prefix: &str, who: u32) -> Q<Vec<(String, Option<u32>, bool)>> {
        let mut st = self.prepare_cached(
            "SELECT cred_id, owner_uid, active FROM passkeys
             WHERE substr(cred_id, 1, length(?1)) = ?1 AND (?2 = 0 OR owner_uid = ?2) LIMIT 2",
        )?;
        let rows = st.query_map(params![prefix, who], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn activate_passkey(&self, credential: &str, after: i64) -> Q<bool> {
        Ok(change(
            self,
            "UPDATE passkeys SET active = 1 WHERE cred_id = ?1 AND created_at > ?2",
            params![credential, after],
        )? == 1)
    }

    fn delete_passkey(&self, credential: &str) -> Q<()> {
        change(
            self,
            "DELETE FROM passkeys WHERE cred_id = ?1",
            params![credential],
        )?;
        Ok(())
    }

    fn passkey_owner(&self, credential: &str) -> Q<Option<Option<u32>>> {
        Ok(self
            .prepare_cached("SELECT owner_uid FROM passkeys WHERE cred_id = ?1 AND active = 1")?
            .query_row(params![credential], |r| r.get::<_, Option<u32>>(0))
            .optional()?)
    }

    fn passkey_text(&self, credential: &str) -> Q<Option<String>> {
        Ok(self
            .prepare_cached("SELECT passkey FROM passkeys WHERE cred_id = ?1")?
            .query_row(params![credential], |r| r.get(0))
            .optional()?)
    }

    fn update_passkey(&self, credential: &str, passkey: &str, now: i64) -> Q<()> {
        change(
            self,
            "UPDATE passkeys SET passkey = ?2, last_used_at = ?3 WHERE cred_id = ?1",
            params![credential, passkey, now],
        )?;
        Ok(())
    }

    fn insert_code(&self, hash: &[u8], exp: i64, owner: u32, keep: i64, now: i64) -> Q<()> {
        change(
            self,
            "DELETE FROM passkey_codes WHERE expires_at <= ?1",
            params![now],
        )?;
        change(
            self,
            "DELETE FROM passkey_codes WHERE code_hash IN (SELECT code_hash FROM passkey_codes
             WHERE owner_uid = ?2 ORDER BY expires_at DESC LIMIT -1 OFFSET ?1)",
            params![keep - 1, owner],
        )?;
        change(
            self,
            "INSERT INTO passkey_codes (code_hash, expires_at, owner_uid) VALUES (?1, ?2, ?3)",
            params![hash, exp, owner],
        )?;
        Ok(())
    }

    fn spend_code(&self, hash: &[u8], now: i64, owner: u32) -> Q<bool> {
        Ok(change(
            self,
            "DELETE FROM passkey_codes WHERE code_hash = ?1 AND expires_at > ?2 AND owner_uid = ?3",
            params![hash, now, owner],
        )? == 1)
    }

    fn void_codes(&self, owner: u32) -> Q<()> {
        change(
            self,
            "DELETE FROM passkey_codes WHERE owner_uid = ?1",
            params![owner],
        )?;
        Ok(())
    }

    fn insert_link(&self, hash: &[u8], link: &LinkRow, keep: i64, now: i64) -> Q<()> {
        let (uid, request_id, exp) = link;
        change(
            self,
            "DELETE FROM page_links WHERE expires_at <= ?1",
            params![now],
        )?;
        change(self, "DELETE FROM page_links WHERE uid = ?1 AND link_hash IN (SELECT link_hash FROM page_links
             WHERE uid = ?1 ORDER BY expires_at DESC LIMIT -1 OFFSET ?2)", params![uid, keep - 1])?;
        change(self, "INSERT INTO page_links (link_hash, uid, request_id, expires_at) VALUES (?1, ?2, ?3, ?4)", params![hash, uid, request_id, exp])?;
        Ok(())
    }

    fn take_link(&self, hash: &[u8], uid: u32) -> Q<Option<LinkRow>> {
        Ok(self
            .prepare_cached(
                "DELETE FROM page_links WHERE link_hash = ?1 AND uid = ?2
                 RETURNING uid, request_id, expires_at",
            )?
            .query_row(params![hash, uid], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?)
    }
}
