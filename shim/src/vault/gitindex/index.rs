//! The index file format (`DIRC`, versions 2 to 4, SHA-1 ids): header, entries with
//! their names (padded, or prefix-compressed in v4), then extensions and checksum.

use super::{Entry, IndexError, MAX_NAME, NAMES_PER_BYTE};

/// Bytes of the trailing checksum (SHA-1).
const CHECKSUM: usize = 20;

fn u32_at(b: &[u8], at: usize) -> Result<u32, IndexError> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(IndexError::Truncated)
}

/// Parses index versions 2, 3 and 4 (SHA-1 object ids), returning entries sorted by path.
pub fn parse_index(b: &[u8]) -> Result<Vec<Entry>, IndexError> {
    let (version, count) = header(b)?;
    let mut entries = Entries {
        b,
        at: 12,
        version,
        prev: Vec::new(),
        names: 0,
    };
    let mut out = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        out.push(entries.read_entry()?);
    }
    extensions(b, entries.at)?;
    out.sort_by(|a, b| (&a.path, a.stage).cmp(&(&b.path, b.stage)));
    Ok(out)
}

/// The signature, a supported version, and the entry count.
fn header(b: &[u8]) -> Result<(u32, usize), IndexError> {
    if b.get(0..4) != Some(b"DIRC") {
        return Err(IndexError::Signature);
    }
    let version = u32_at(b, 4)?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    Ok((version, u32_at(b, 8)? as usize))
}

/// A cursor over the entries: where the next one starts, the previous name (a v4 name
/// is built from it) and the name bytes decoded so far (capped per byte of index).
struct Entries<'a> {
    b: &'a [u8],
    at: usize,
    version: u32,
    prev: Vec<u8>,
    names: usize,
}

impl Entries<'_> {
    /// Reads the entry at the cursor and moves past it.
    fn read_entry(&mut self) -> Result<Entry, IndexError> {
        let (b, start) = (self.b, self.at);
        let mode = u32_at(b, start + 24)?;
        let oid = b.get(start + 40..start + 60).ok_or(IndexError::Truncated)?;
        let flags = b
            .get(start + 60..start + 62)
            .map(|s| u16::from_be_bytes([s[0], s[1]]))
            .ok_or(IndexError::Truncated)?;
        self.at = start + 62;
        if flags & 0x4000 != 0 {
            if self.version < 3 {
                return Err(IndexError::ExtendedInV2);
            }
            self.at += 2;
        }
        let stage = ((flags >> 12) & 3) as u8;
        let name = if self.version == 4 {
            self.compressed_name()?
        } else {
            self.padded_name(start)?
        };
        if self.at > b.len() {
            return Err(IndexError::Truncated);
        }
        self.names += name.len();
        if self.names > b.len().saturating_mul(NAMES_PER_BYTE) {
            return Err(IndexError::NamesTooLarge);
        }
        let entry = Entry {
            path: crate::vault::names::lossless(&name),
            mode,
            oid: hex::encode(oid),
            stage,
        };
        self.prev = name;
        Ok(entry)
    }

    /// A v4 name: strip N bytes from the previous name, append the NUL-terminated suffix.
    fn compressed_name(&mut self) -> Result<Vec<u8>, IndexError> {
        let strip = self.varint()?;
        if strip > self.prev.len() {
            return Err(IndexError::Prefix);
        }
        let suffix = self.until_nul()?;
        let kept = self.prev.len() - strip;
        if kept + suffix.len() > MAX_NAME {
            return Err(IndexError::NameTooLong);
        }
        let mut name = self.prev[..kept].to_vec();
        name.extend_from_slice(suffix);
        self.at += suffix.len() + 1;
        Ok(name)
    }

    /// The v4 strip count: git's offset varint (each continuation adds one before
    /// shifting), refused when it overflows.
    fn varint(&mut self) -> Result<usize, IndexError> {
        let mut c = *self.b.get(self.at).ok_or(IndexError::Truncated)?;
        self.at += 1;
        let mut n: usize = (c & 0x7f) as usize;
        while c & 0x80 != 0 {
            c = *self.b.get(self.at).ok_or(IndexError::Truncated)?;
            self.at += 1;
            n = n
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .and_then(|v| v.checked_add((c & 0x7f) as usize))
                .ok_or(IndexError::Varint)?;
        }
        Ok(n)
    }

    /// A v2/v3 name: NUL-terminated, the entry (from `start`) padded with 1..=8 NULs to
    /// a multiple of 8 bytes.
    fn padded_name(&mut self, start: usize) -> Result<Vec<u8>, IndexError> {
        let name = self.until_nul()?.to_vec();
        let len = self.at + name.len() - start;
        self.at = start + (len + 8) / 8 * 8;
        Ok(name)
    }

    /// The bytes from the cursor to the next NUL (not moving the cursor).
    fn until_nul(&self) -> Result<&[u8], IndexError> {
        let rest = self.b.get(self.at..).ok_or(IndexError::Truncated)?;
        let nul = rest
            .iter()
            .position(|&x| x == 0)
            .ok_or(IndexError::UnterminatedName)?;
        Ok(&rest[..nul])
    }
}

/// Extensions, then the checksum (not verified: the entries read before are what is
/// bound). With `link` (split index) the entries only patch those of a
/// `sharedindex.*` file, and deletions are a bitmap in the extension, so it and any
/// other mandatory extension not understood are refused; `sdir` only says that
/// sparse folder entries (read before, with their tree ids) may occur.
fn extensions(b: &[u8], mut at: usize) -> Result<(), IndexError> {
    while b.len() - at > CHECKSUM {
        let sig = b.get(at..at + 4).ok_or(IndexError::Truncated)?;
        let size = u32_at(b, at + 4)? as usize;
        let end = (at + 8)
            .checked_add(size)
            .filter(|&e| e <= b.len() - CHECKSUM)
            .ok_or(IndexError::Truncated)?;
        if !sig[0].is_ascii_uppercase() && sig != b"sdir" {
            return Err(IndexError::Extension([sig[0], sig[1], sig[2], sig[3]]));
        }
        at = end;
    }
    if b.len() - at != CHECKSUM {
        return Err(IndexError::Truncated);
    }
    Ok(())
}
