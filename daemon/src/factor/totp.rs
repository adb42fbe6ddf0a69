//! RFC 6238 TOTP as tcd uses it (SHA-1, 6 digits, 30 s steps) and the RFC 4648 base32
//! that authenticator apps read secrets in; pure functions, no clock of their own.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use subtle::ConstantTimeEq;

/// Seconds per time step.
pub const PERIOD_MS: i64 = 30_000;
/// Digits in a code.
pub const DIGITS: usize = 6;
/// Secret length in bytes (160 bits, as RFC 4226 recommends for SHA-1).
pub const SECRET_LEN: usize = 20;

/// The time step `now_ms` falls in (T = floor(unix time / 30 s)).
pub fn step_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(PERIOD_MS)
}

/// The RFC 4226 HOTP value of `secret` at counter `step`, truncated to `digits` digits.
fn hotp(secret: &[u8], step: i64, digits: u32) -> u32 {
    let mut mac = <Hmac<Sha1> as Mac>::new_from_slice(secret).expect("any key length");
    mac.update(&step.to_be_bytes());
    let h = mac.finalize().into_bytes();
    let off = usize::from(h[19] & 0x0f);
    let bin = u32::from_be_bytes([h[off] & 0x7f, h[off + 1], h[off + 2], h[off + 3]]);
    bin % 10u32.pow(digits)
}

/// The six-digit code of `secret` at `step`, zero-padded.
pub fn code_at(secret: &[u8], step: i64) -> String {
    format!("{:06}", hotp(secret, step, DIGITS as u32))
}

/// How a presented code compares with the accepted window (T−1, T).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// It is the code of this step, the newest one of the window it matches that is
    /// later than `last`.
    Fresh(i64),
    /// It is the code of a step in the window that was already used (≤ `last`).
    Used,
    /// It is no code of the window.
    No,
}

/// Compares `code` with the codes of steps T−1 and T (T = `step_of(now_ms)`) in constant
/// time; `last` is the last step accepted for this secret. Both steps are always
/// computed and compared, so timing does not say which (if any) matched.
pub fn check(secret: &[u8], code: &str, now_ms: i64, last: i64) -> Match {
    let now = step_of(now_ms);
    let mut fresh = None;
    let mut used = false;
    for step in [now - 1, now] {
        let hit: bool = code_at(secret, step)
            .as_bytes()
            .ct_eq(code.as_bytes())
            .into();
        if hit && step > last {
            fresh = Some(step);
        } else if hit {
            used = true;
        }
    }
    match fresh {
        Some(s) => Match::Fresh(s),
        None if used => Match::Used,
        None => Match::No,
    }
}

/// Whether `code` looks like a code at all: exactly six ASCII digits.
pub fn well_formed(code: &str) -> bool {
    code.len() == DIGITS && code.bytes().all(|b| b.is_ascii_digit())
}

const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// RFC 4648 base32 without padding, as `otpauth://` URIs carry secrets.
pub fn base32(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    for chunk in bytes.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let n = u64::from_be_bytes([0, 0, 0, buf[0], buf[1], buf[2], buf[3], buf[4]]);
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..chars {
            out.push(char::from(B32[((n >> (35 - 5 * i)) & 31) as usize]));
        }
    }
    out
}

/// The URI authenticator apps enroll from (Key Uri Format), for the user named `label`.
pub fn otpauth_uri(label: &str, secret: &[u8]) -> String {
    let label: String = label
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!(
        "otpauth://totp/tc:{label}?secret={}&issuer=tc&algorithm=SHA1&digits={DIGITS}&period={}",
        base32(secret),
        PERIOD_MS / 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6238 appendix B's SHA-1 seed.
    const RFC_SECRET: &[u8] = b"12345678901234567890";

    #[test]
    fn rfc6238_sha1_vectors_truncated_to_six_digits() {
        // (unix time, the RFC's 8-digit TOTP); six digits are its last six.
        for (t, eight) in [
            (59i64, "94287082"),
            (1111111109, "07081804"),
            (1111111111, "14050471"),
            (1234567890, "89005924"),
            (2000000000, "69279037"),
            (20000000000, "65353130"),
        ] {
            let step = step_of(t * 1000);
            assert_eq!(format!("{:08}", hotp(RFC_SECRET, step, 8)), eight, "t={t}");
            assert_eq!(code_at(RFC_SECRET, step), &eight[2..], "t={t}");
        }
    }

    #[test]
    fn window_is_t_minus_one_and_t_only() {
        let now = 1_234_567_890_000;
        let t = step_of(now);
        let code = |s| code_at(RFC_SECRET, s);
        assert_eq!(check(RFC_SECRET, &code(t), now, -1), Match::Fresh(t));
        assert_eq!(
            check(RFC_SECRET, &code(t - 1), now, -1),
            Match::Fresh(t - 1)
        );
        assert_eq!(check(RFC_SECRET, &code(t - 2), now, -1), Match::No);
        assert_eq!(check(RFC_SECRET, &code(t + 1), now, -1), Match::No);
        // A used step matches but is not fresh; the newer step still is.
        assert_eq!(check(RFC_SECRET, &code(t - 1), now, t - 1), Match::Used);
        assert_eq!(check(RFC_SECRET, &code(t), now, t - 1), Match::Fresh(t));
        assert_eq!(check(RFC_SECRET, &code(t), now, t), Match::Used);
    }

    #[test]
    fn base32_matches_rfc4648_vectors() {
        for (raw, enc) in [
            ("", ""),
            ("f", "MY"),
            ("fo", "MZXQ"),
            ("foo", "MZXW6"),
            ("foob", "MZXW6YQ"),
            ("fooba", "MZXW6YTB"),
            ("foobar", "MZXW6YTBOI"),
        ] {
            assert_eq!(base32(raw.as_bytes()), enc);
        }
        assert_eq!(base32(RFC_SECRET), "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
    }

    #[test]
    fn otpauth_uri_escapes_the_label() {
        assert_eq!(
            otpauth_uri("al ice", b"foobar"),
            "otpauth://totp/tc:al%20ice?secret=MZXW6YTBOI&issuer=tc&algorithm=SHA1&digits=6&period=30"
        );
    }

    #[test]
    fn only_six_digits_are_well_formed() {
        assert!(well_formed("012345"));
        for bad in ["", "12345", "1234567", "12345a", "１２３４５６", " 12345"] {
            assert!(!well_formed(bad), "{bad:?}");
        }
    }
}
