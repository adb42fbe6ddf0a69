//! One-time passkey registration codes: `tcctl passkey add` gets one (PasskeyCode RPC),
//! the human types it into the page. Stored as SHA-256 only; single use; ten minutes.

use rand::Rng;
use rusqlite::params;
use sha2::{Digest, Sha256};
use tc_core::now_ms;

use crate::error::DaemonError;
use crate::ledger::Ledger;

const ALPHABET: &[u8] = b"23456789abcdefghjkmnpqrstuvwxyz";
/// 12 characters of 31: ~59 bits, against guessing through the page (which also voids
/// every code after [`MAX_FAILURES`] wrong ones).
const LEN: usize = 12;
pub const TTL_MS: i64 = 10 * 60 * 1000;
/// Codes outstanding at once (the oldest go first).
const MAX_LIVE: i64 = 4;
/// Wrong codes typed into the page before every outstanding code is voided.
pub const MAX_FAILURES: u32 = 20;

/// The code as typed: case, spaces and dashes do not matter.
fn normalise(code: &str) -> String {
    code.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn hash(code: &str) -> Vec<u8> {
    Sha256::digest(normalise(code).as_bytes()).to_vec()
}

/// A new code and its expiry (runs on the store thread).
pub fn issue(l: &Ledger) -> Result<(String, i64), DaemonError> {
    let mut rng = rand::rngs::OsRng;
    let raw: String = (0..LEN)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    let shown = format!("{}-{}-{}", &raw[..4], &raw[4..8], &raw[8..]);
    let now = now_ms();
    let exp = now + TTL_MS;
    l.store.write(|tx, _| {
        tx.execute(
            "DELETE FROM passkey_codes WHERE expires_at <= ?1",
            params![now],
        )?;
        tx.execute(
            "DELETE FROM passkey_codes WHERE code_hash IN (SELECT code_hash FROM passkey_codes
             ORDER BY expires_at DESC LIMIT -1 OFFSET ?1)",
            params![MAX_LIVE - 1],
        )?;
        tx.execute(
            "INSERT INTO passkey_codes (code_hash, expires_at) VALUES (?1, ?2)",
            params![hash(&raw), exp],
        )?;
        Ok(Ok(()))
    })?;
    Ok((shown, exp))
}

/// Spends `code`: true when it was live (it is gone either way).
pub fn redeem(l: &Ledger, code: &str) -> Result<bool, DaemonError> {
    let now = now_ms();
    l.store.write(|tx, _| {
        let n = tx.execute(
            "DELETE FROM passkey_codes WHERE code_hash = ?1 AND expires_at > ?2",
            params![hash(code), now],
        )?;
        Ok(Ok(n == 1))
    })
}

/// Voids every outstanding code (too many wrong ones were typed).
pub fn void_all(l: &Ledger) -> Result<(), DaemonError> {
    l.store.write(|tx, _| {
        tx.execute("DELETE FROM passkey_codes", [])?;
        Ok(Ok(()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_whatever_the_case_and_dashes() {
        assert_eq!(hash("ABCD-efgh-2345"), hash("abcdefgh2345"));
        assert_eq!(hash(" abcd efgh 2345 "), hash("abcdefgh2345"));
        assert_ne!(hash("abcdefgh2345"), hash("abcdefgh2346"));
    }
}
