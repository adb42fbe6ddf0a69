//! One-time passkey registration codes: `tcctl passkey add` gets one (PasskeyCode RPC),
//! the human types it into a page session of their own. Stored as SHA-256 only; bound to
//! the human it was issued for; single use; ten minutes.

use rand::Rng;
use sha2::{Digest, Sha256};
use tc_core::now_ms;

use crate::error::DaemonError;
use crate::ledger::Ledger;

const ALPHABET: &[u8] = b"23456789abcdefghjkmnpqrstuvwxyz";
/// 12 characters of 31: ~59 bits, against guessing through the page (which also voids
/// the human's codes after [`MAX_FAILURES`] wrong ones from their sessions).
const LEN: usize = 12;
pub const TTL_MS: i64 = 10 * 60 * 1000;
/// Codes outstanding at once per human (the oldest go first).
const MAX_LIVE: i64 = 4;
/// Wrong codes typed into one human's page sessions before their outstanding codes are
/// voided (only their own sessions can type them).
pub const MAX_FAILURES: u32 = 20;
/// Wrong codes one page session may type before it may type no more.
pub const MAX_SESSION_FAILURES: u32 = 5;

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

/// A new code for `owner` and its expiry (runs on the store thread).
pub fn issue(l: &Ledger, owner: u32) -> Result<(String, i64), DaemonError> {
    let mut rng = rand::rngs::OsRng;
    let raw: String = (0..LEN)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect();
    let shown = format!("{}-{}-{}", &raw[..4], &raw[4..8], &raw[8..]);
    let now = now_ms();
    let exp = now + TTL_MS;
    l.store.write(|tx, _| {
        tx.insert_code(&hash(&raw), exp, owner, MAX_LIVE, now)?;
        Ok(Ok(()))
    })?;
    Ok((shown, exp))
}

/// Spends `owner`'s `code`: true when it was live. Another human's code is left alone
/// (it is not theirs to spend).
pub fn redeem(l: &Ledger, code: &str, owner: u32) -> Result<bool, DaemonError> {
    let now = now_ms();
    l.store
        .write(|tx, _| Ok(Ok(tx.spend_code(&hash(code), now, owner)?)))
}

/// Voids `owner`'s outstanding codes (too many wrong ones were typed in their sessions).
pub fn void(l: &Ledger, owner: u32) -> Result<(), DaemonError> {
    l.store.write(|tx, _| Ok(Ok(tx.void_codes(owner)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_spent_once_and_only_by_its_owner() {
        let (_dir, l) = crate::ledger::scratch();
        let (code, _) = issue(&l, 1000).unwrap();
        assert!(!redeem(&l, &code, 1001).unwrap(), "another human's code");
        assert!(redeem(&l, &code, 1000).unwrap());
        assert!(!redeem(&l, &code, 1000).unwrap(), "single use");
        let (code, _) = issue(&l, 1000).unwrap();
        void(&l, 1001).unwrap();
        void(&l, 1000).unwrap();
        assert!(!redeem(&l, &code, 1000).unwrap(), "voided");
    }

    #[test]
    fn codes_match_whatever_the_case_and_dashes() {
        assert_eq!(hash("ABCD-efgh-2345"), hash("abcdefgh2345"));
        assert_eq!(hash(" abcd efgh 2345 "), hash("abcdefgh2345"));
        assert_ne!(hash("abcdefgh2345"), hash("abcdefgh2346"));
    }
}
