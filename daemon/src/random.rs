//! Random strings for tokens, nonces and ids: URL-safe base64 (unpadded) of the
//! operating system's random bytes (a leaf: imports no daemon module).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use rand::RngCore;

/// `n` random bytes, as URL-safe base64 without padding.
pub(crate) fn b64(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::rngs::OsRng.fill_bytes(&mut b);
    B64.encode(b)
}
