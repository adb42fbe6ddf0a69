//! Names and paths as text without losing bytes, for everything a fingerprint binds
//! (folder listings, tree and git paths). Its own module so the fuzz crate compiles it.

/// A name or path as text without losing bytes: UTF-8 as it is, anything else as a NUL
/// followed by its hex. `to_string_lossy` maps every invalid byte to U+FFFD, so renaming
/// `\xff.md` to `\xfe.md` was not drift; no real name or path contains a NUL, so the
/// two forms cannot meet.
pub fn lossless(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => format!("\0{}", hex::encode(b)),
    }
}
