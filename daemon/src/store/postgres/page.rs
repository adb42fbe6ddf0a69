//! PostgreSQL: [`PageQueries`]: passkeys, registration codes and page links, shared by
//! every replica (a code printed by one is spent on another, once).

use super::tx::{uid, uid_of, PgTx};
use crate::store::queries::{LinkRow, NewPasskey, PageQueries, PasskeyRow, Q};
use crate::store::rows::{self, PASSKEY_COLS};

impl PageQueries for PgTx<'_> {
    fn usable_passkeys(&self, guarded: bool, who: u32) -> Q<Vec<String>> {
        let rows = self.all(
            "SELECT passkey FROM passkeys WHERE active AND (NOT $1 OR owner_uid = $2)
             ORDER BY created_at",
            &[&guarded, &uid(who)],
        )?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    fn count_usable_passkeys(&self, guarded: bool, who: u32) -> Q<u32> {
        let r = self.one(
            "SELECT count(*) FROM passkeys WHERE active AND (NOT $1 OR owner_uid = $2)",
            &[&guarded, &uid(who)],
        )?;
        Ok(r.try_get::<_, i64>(0)? as u32)
    }

    fn list_passkeys(&self, viewer: Option<u32>) -> Q<Vec<PasskeyRow>> {
        let sql = format!("SELECT {PASSKEY_COLS} FROM passkeys WHERE $1::BIGINT IS NULL OR owner_uid = $1 ORDER BY created_at");
        self.all_as(&sql, &[&viewer.map(uid)], rows::passkey_row)
    }

    fn drop_unconfirmed_passkeys(&self, before: i64) -> Q<()> {
        self.exec(
            "DELETE FROM passkeys WHERE NOT active AND created_at <= $1",
            &[&before],
        )
        .map(|_| ())
    }

    fn insert_passkey(&self, p: &NewPasskey<'_>) -> Q<bool> {
        Ok(self.exec(
            "INSERT INTO passkeys (cred_id, name, passkey, created_at, owner_uid, active)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (cred_id) DO NOTHING",
            &[
                &p.credential,
                &p.name,
                &p.passkey,
                &p.created_at,
                &uid(p.owner),
                &p.active,
            ],
        )? == 1)
    }

    fn passkeys_by_prefix(&self, prefix: &str, who: u32) -> Q<Vec<(String, Option<u32>, bool)>> {
        let rows = self.all(
            "SELECT cred_id, owner_uid, active FROM passkeys
             WHERE left(cred_id, length($1)) = $1 AND ($2 = 0 OR owner_uid = $2) LIMIT 2",
            &[&prefix, &uid(who)],
        )?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, uid_of(r.try_get(1)?), r.try_get(2)?)))
            .collect()
    }

    fn activate_passkey(&self, credential: &str, after: i64) -> Q<bool> {
        Ok(self.exec(
            "UPDATE passkeys SET active = true WHERE cred_id = $1 AND created_at > $2",
            &[&credential, &after],
        )? == 1)
    }

    fn delete_passkey(&self, credential: &str) -> Q<()> {
        self.exec("DELETE FROM passkeys WHERE cred_id = $1", &[&credential])
            .map(|_| ())
    }

    fn passkey_owner(&self, credential: &str) -> Q<Option<Option<u32>>> {
        let row = self.opt(
            "SELECT owner_uid FROM passkeys WHERE cred_id = $1 AND active",
            &[&credential],
        )?;
        row.map(|r| Ok(uid_of(r.try_get(0)?))).transpose()
    }

    fn passkey_text(&self, credential: &str) -> Q<Option<String>> {
        let row = self.opt(
            "SELECT passkey FROM passkeys WHERE cred_id = $1 FOR UPDATE",
            &[&credential],
        )?;
        row.map(|r| Ok(r.try_get(0)?)).transpose()
    }

    fn update_passkey(&self, credential: &str, passkey: &str, now: i64) -> Q<()> {
        self.exec(
            "UPDATE passkeys SET passkey = $2, last_used_at = $3 WHERE cred_id = $1",
            &[&credential, &passkey, &now],
        )
        .map(|_| ())
    }

    fn insert_code(&self, hash: &[u8], exp: i64, owner: u32, keep: i64, now: i64) -> Q<()> {
        self.exec("DELETE FROM passkey_codes WHERE expires_at <= $1", &[&now])?;
        self.exec(
            "DELETE FROM passkey_codes WHERE code_hash IN (SELECT code_hash FROM passkey_codes
             WHERE owner_uid = $2 ORDER BY expires_at DESC OFFSET $1)",
            &[&(keep - 1), &uid(owner)],
        )?;
        self.exec(
            "INSERT INTO passkey_codes (code_hash, expires_at, owner_uid) VALUES ($1, $2, $3)",
            &[&hash, &exp, &uid(owner)],
        )
        .map(|_| ())
    }

    fn spend_code(&self, hash: &[u8], now: i64, owner: u32) -> Q<bool> {
        Ok(self.exec(
            "DELETE FROM passkey_codes WHERE code_hash = $1 AND expires_at > $2 AND owner_uid = $3",
            &[&hash, &now, &uid(owner)],
        )? == 1)
    }

    fn void_codes(&self, owner: u32) -> Q<()> {
        self.exec(
            "DELETE FROM passkey_codes WHERE owner_uid = $1",
            &[&uid(owner)],
        )
        .map(|_| ())
    }

    fn insert_link(&self, hash: &[u8], link: &LinkRow, keep: i64, now: i64) -> Q<()> {
        let (who, request_id, exp) = link;
        self.exec("DELETE FROM page_links WHERE expires_at <= $1", &[&now])?;
        self.exec(
            "DELETE FROM page_links WHERE uid = $1 AND link_hash IN (SELECT link_hash FROM page_links
             WHERE uid = $1 ORDER BY expires_at DESC OFFSET $2)",
            &[&uid(*who), &(keep - 1)],
        )?;
        self.exec(
            "INSERT INTO page_links (link_hash, uid, request_id, expires_at) VALUES ($1, $2, $3, $4)",
            &[&hash, &uid(*who), request_id, exp],
        )
        .map(|_| ())
    }

    fn take_link(&self, hash: &[u8], who: u32) -> Q<Option<LinkRow>> {
        let row = self.opt(
            "DELETE FROM page_links WHERE link_hash = $1 AND uid = $2
             RETURNING uid, request_id, expires_at",
            &[&hash, &uid(who)],
        )?;
        let Some(r) = row else { return Ok(None) };
        let owner = uid_of(r.try_get(0)?).unwrap_or(who);
        Ok(Some((owner, r.try_get(1)?, r.try_get(2)?)))
    }
}
