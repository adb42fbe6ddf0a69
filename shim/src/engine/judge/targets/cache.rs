//! The per-vault stat cache of content hashes (git's index trick): a file's SHA-256 is
//! reused while its `(dev, ino, size, mtime, ctime, mode)` are unchanged, never if racy.
//!
//! Why it cannot be fooled: every write sets `ctime` to the current time and no
//! unprivileged process can set it back (`touch -d` sets `mtime` and `atime` only, and
//! bumps `ctime` doing it). An entry is only stored for a file whose `mtime` and `ctime`
//! were both more than [`RACY`] before its bytes were read, so a write during or after
//! that read leaves a `ctime` the entry does not have. Memory is bounded: two
//! generations of at most `cap` entries each; the older one is dropped whole.

use std::collections::HashMap;
use std::fs::Metadata;
use std::hash::Hash;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::time::SystemTime;

/// How close to the time a file was read its timestamps may be for its hash to be
/// cached: filesystem clocks are coarse (a jiffy on Linux, 2 s on FAT), so a write in
/// the same tick as the read could leave timestamps equal to those seen before it.
pub const RACY: std::time::Duration = std::time::Duration::from_secs(2);

/// A timestamp as `(seconds, nanoseconds)`: compared, never added (no overflow).
type Time = (i64, i64);

/// What must be unchanged for a cached hash to be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime: Time,
    ctime: Time,
    mode: u32,
}

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        Stamp {
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            mode: m.mode(),
        }
    }
}

/// A map bounded to `2 * cap` entries: inserts go to `cur`; when it is full it becomes
/// `old` (the previous `old` is dropped); a hit in `old` moves back to `cur`.
#[derive(Debug)]
struct Gens<K, V> {
    cur: HashMap<K, V>,
    old: HashMap<K, V>,
    cap: usize,
}

impl<K: Hash + Eq, V: Copy> Gens<K, V> {
    fn new(cap: usize) -> Self {
        Gens {
            cur: HashMap::new(),
            old: HashMap::new(),
            cap: cap.max(1),
        }
    }

    fn get(&mut self, k: K) -> Option<V> {
        if let Some(v) = self.cur.get(&k) {
            return Some(*v);
        }
        let v = self.old.remove(&k)?;
        self.insert(k, v);
        Some(v)
    }

    fn insert(&mut self, k: K, v: V) {
        if self.cur.len() >= self.cap && !self.cur.contains_key(&k) {
            self.old = std::mem::take(&mut self.cur);
        }
        self.cur.insert(k, v);
    }

    fn len(&self) -> usize {
        self.cur.len() + self.old.len()
    }
}

/// A SHA-256.
type Sha = [u8; 32];

/// `(dev, ino)` → the stamp the hash was read under, and the hash.
type Hashes = Gens<(u64, u64), (Stamp, Sha)>;

/// `(content hash, SHA-256 of a needle)` → whether that content contains it.
type Answers = Gens<(Sha, Sha), bool>;

/// The content hashes of one vault's files, and what `matching` looked for in them.
#[derive(Debug)]
pub struct Cache {
    hashes: Mutex<Hashes>,
    contains: Mutex<Answers>,
}

impl Cache {
    /// A cache holding at most `2 * cap` hashes and `2 * cap` answers.
    pub fn new(cap: usize) -> Cache {
        Cache {
            hashes: Mutex::new(Gens::new(cap)),
            contains: Mutex::new(Gens::new(cap)),
        }
    }

    /// The hash of the regular file `m` describes, if one was read under the same stamp.
    pub fn hash(&self, m: &Metadata) -> Option<[u8; 32]> {
        if !m.is_file() {
            return None;
        }
        let (stamp, sha) = lock(&self.hashes).get((m.dev(), m.ino()))?;
        (stamp == Stamp::of(m)).then_some(sha)
    }

    /// Records the hash of bytes read from the file `m` (its `fstat` before the read)
    /// describes, the read having started at `read_at`; a racy file is not recorded
    /// (and forgets any hash it had).
    pub fn put_hash(&self, m: &Metadata, read_at: SystemTime, sha: [u8; 32]) {
        let key = (m.dev(), m.ino());
        let stamp = Stamp::of(m);
        let mut g = lock(&self.hashes);
        if !m.is_file() || racy(&stamp, read_at) {
            g.cur.remove(&key);
            g.old.remove(&key);
            return;
        }
        g.insert(key, (stamp, sha));
    }

    /// Whether content with this hash contains the needle with this hash, if known.
    pub fn contains(&self, sha: [u8; 32], needle: [u8; 32]) -> Option<bool> {
        lock(&self.contains).get((sha, needle))
    }

    /// Records whether content with this hash contains the needle (content-addressed:
    /// always true of those bytes, so no stamp).
    pub fn put_contains(&self, sha: [u8; 32], needle: [u8; 32], yes: bool) {
        lock(&self.contains).insert((sha, needle), yes);
    }

    /// How many hashes are held (for tests and the log).
    pub fn len(&self) -> usize {
        lock(&self.hashes).len()
    }

    /// Whether no hash is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A poisoned lock only means a hashing thread panicked mid-insert; the maps are
/// consistent after any single insert, so keep using them.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the file's `mtime` or `ctime` is within [`RACY`] of (or after) `read_at`.
fn racy(s: &Stamp, read_at: SystemTime) -> bool {
    let limit = read_at.checked_sub(RACY).unwrap_or(SystemTime::UNIX_EPOCH);
    let limit = match limit.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
        // A clock before 1970: trust nothing.
        Err(_) => return true,
    };
    s.mtime >= limit || s.ctime >= limit
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn aged(d: &std::path::Path, name: &str) -> Metadata {
        let p = d.join(name);
        std::fs::write(&p, name).unwrap();
        std::fs::metadata(&p).unwrap()
    }

    #[test]
    fn a_hash_is_reused_only_under_the_same_stamp_and_never_if_racy() {
        let d = tempfile::tempdir().unwrap();
        let m = aged(d.path(), "a");
        let c = Cache::new(10);
        // Read right now: racy, not kept.
        c.put_hash(&m, SystemTime::now(), [1; 32]);
        assert_eq!(c.hash(&m), None);
        // Read well after its last change: kept, and found under the same stamp.
        let later = SystemTime::now() + Duration::from_secs(3);
        c.put_hash(&m, later, [1; 32]);
        assert_eq!(c.hash(&m), Some([1; 32]));
        // Any write changes ctime: not found.
        std::fs::write(d.path().join("a"), "b").unwrap();
        let m2 = std::fs::metadata(d.path().join("a")).unwrap();
        assert_eq!(c.hash(&m2), None);
        // Setting mtime back still changes ctime.
        let f = std::fs::File::options()
            .write(true)
            .open(d.path().join("a"))
            .unwrap();
        f.set_modified(m.modified().unwrap()).unwrap();
        let m3 = std::fs::metadata(d.path().join("a")).unwrap();
        assert_eq!(m3.modified().unwrap(), m.modified().unwrap());
        assert_eq!(c.hash(&m3), None);
        // A racy re-read forgets what was held.
        c.put_hash(&m, later, [1; 32]);
        c.put_hash(&m, SystemTime::now(), [2; 32]);
        assert_eq!(c.hash(&m), None);
    }

    #[test]
    fn generations_bound_the_entries() {
        let mut g = Gens::new(3);
        for i in 0..10u32 {
            g.insert(i, i);
            assert!(g.len() <= 6);
        }
        assert_eq!(g.get(9), Some(9));
        assert_eq!(g.get(0), None, "the oldest were dropped");
        // A hit in the old generation survives the next rotation.
        let old = *g.old.keys().next().unwrap();
        assert_eq!(g.get(old), Some(old));
        assert!(g.cur.contains_key(&old));
    }

    #[test]
    fn racy_rule() {
        let s = |t: i64| Stamp {
            size: 0,
            mtime: (t, 0),
            ctime: (t, 0),
            mode: 0,
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        assert!(racy(&s(98), at), "exactly RACY before");
        assert!(racy(&s(150), at), "after the read");
        assert!(!racy(&s(97), at));
        let mut mixed = s(10);
        mixed.ctime = (99, 0);
        assert!(racy(&mixed, at), "a recent ctime alone is racy");
    }
}
