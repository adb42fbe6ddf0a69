//! The streaming walk of `tree` and `matching` targets: folders in sorted order, files
//! hashed in parallel batches through the stat cache, entries handed on in order.
//!
//! Memory holds the listings of the folders on the current path and one batch of
//! files, never the whole tree. Entries come out sorted by path bytes: a folder's
//! entries are visited in byte order of their names, a folder's name taken with a
//! trailing `/` (git's order), which is the byte order of the full paths.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::cache::Cache;
use super::fs::{content, io};
use super::{lossless, TargetError};

/// Files hashed per batch: enough to keep every core busy, small enough to bound memory.
const BATCH: usize = 4096;
/// Below this many files a batch is hashed on the calling thread.
const PAR_MIN: usize = 64;
/// Most hashing threads (beyond a few, the disk is the limit).
const MAX_THREADS: usize = 8;

/// What a walk binds and how far it may go.
pub struct Walk<'a> {
    pub cache: &'a Cache,
    /// Most entries (files, links, folders) walked before refusing.
    pub limit: usize,
    /// Which files are part of the state (a file refused is never read).
    pub keep: &'a dyn Fn(&Path) -> bool,
    /// If set, only files containing it are part of the state.
    pub needle: Option<&'a [u8]>,
    /// Which links are part of the state (never followed).
    pub keep_link: &'a dyn Fn(&Path) -> bool,
}

/// What a walk did: entries handed on, and files whose bytes were read (cache misses).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub entries: usize,
    pub read: usize,
}

/// A folder entry, keyed for sorting: the name's bytes, plus `/` for a folder.
struct Ent {
    key: Vec<u8>,
    is_dir: bool,
    is_link: bool,
}

impl Ent {
    fn name(&self) -> &OsStr {
        let n = if self.is_dir {
            &self.key[..self.key.len() - 1]
        } else {
            &self.key[..]
        };
        OsStr::from_bytes(n)
    }
}

/// A file or link to put in the state, in walk order.
struct Job {
    rel: String,
    path: PathBuf,
    link: bool,
}

impl Walk<'_> {
    /// Walks `dir` and hands each entry of the state to `emit` as `(path relative to
    /// dir, content hash or "symlink:<text>")`, sorted by path. A missing `dir` is an
    /// empty state.
    pub fn run(&self, dir: &Path, emit: &mut dyn FnMut(&str, &str)) -> Result<Counts, TargetError> {
        let mut seen = 0usize;
        let mut counts = Counts::default();
        let root = match self.list(dir, &mut seen) {
            Err(TargetError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(counts)
            }
            r => r?,
        };
        let mut stack = vec![(dir.to_path_buf(), PathBuf::new(), root.into_iter())];
        let mut jobs = Vec::new();
        while let Some((abs, rel, it)) = stack.last_mut() {
            let Some(ent) = it.next() else {
                stack.pop();
                continue;
            };
            let (path, rel_path) = (abs.join(ent.name()), rel.join(ent.name()));
            if ent.is_dir {
                let list = self.list(&path, &mut seen)?;
                stack.push((path, rel_path, list.into_iter()));
                continue;
            }
            // Globs see the name's bytes; the state records them losslessly.
            let keep = if ent.is_link {
                (self.keep_link)(&rel_path)
            } else {
                (self.keep)(&rel_path)
            };
            if keep {
                let rel = lossless(rel_path.as_os_str().as_bytes());
                let link = ent.is_link;
                jobs.push(Job { rel, path, link });
            }
            if jobs.len() >= BATCH {
                self.flush(&mut jobs, emit, &mut counts)?;
            }
        }
        self.flush(&mut jobs, emit, &mut counts)?;
        Ok(counts)
    }

    /// `d`'s files, links and folders, sorted (FIFOs, sockets and devices are skipped,
    /// never opened), counted against the limit.
    fn list(&self, d: &Path, seen: &mut usize) -> Result<Vec<Ent>, TargetError> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(d).map_err(|e| io(d, e))? {
            let e = e.map_err(|e| io(d, e))?;
            let ft = e.file_type().map_err(|err| io(&e.path(), err))?;
            if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
                continue;
            }
            // Folders count too: a tree of empty folders is as costly to walk as files.
            *seen += 1;
            if *seen > self.limit {
                return Err(TargetError::TooMany(self.limit));
            }
            let mut key = e.file_name().as_bytes().to_vec();
            if ft.is_dir() {
                key.push(b'/');
            }
            out.push(Ent {
                key,
                is_dir: ft.is_dir(),
                is_link: ft.is_symlink(),
            });
        }
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Hashes a batch (in parallel when it is large) and hands it on in order.
    fn flush(
        &self,
        jobs: &mut Vec<Job>,
        emit: &mut dyn FnMut(&str, &str),
        counts: &mut Counts,
    ) -> Result<(), TargetError> {
        let (cache, needle) = (self.cache, self.needle);
        let one = |j: &Job| state_of(cache, needle, j);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS);
        let results: Vec<_> = if threads <= 1 || jobs.len() < PAR_MIN {
            jobs.iter().map(one).collect()
        } else {
            in_parallel(jobs, threads, &one)
        };
        for (job, r) in jobs.iter().zip(results) {
            let (value, read) = r?;
            counts.read += usize::from(read);
            if let Some(v) = value {
                counts.entries += 1;
                emit(&job.rel, &v);
            }
        }
        jobs.clear();
        Ok(())
    }
}

/// What one file or link contributes: `None` for a file without the needle; and
/// whether its bytes were read.
type Outcome = Result<(Option<String>, bool), TargetError>;

fn state_of(cache: &Cache, needle: Option<&[u8]>, j: &Job) -> Outcome {
    if j.link {
        let to = std::fs::read_link(&j.path).map_err(|e| io(&j.path, e))?;
        let to = lossless(to.as_os_str().as_bytes());
        return Ok((Some(format!("symlink:{to}")), false));
    }
    // `lstat`: the walk never follows a link, and the open below refuses one.
    let meta = std::fs::symlink_metadata(&j.path).map_err(|e| io(&j.path, e))?;
    let h = content(cache, &j.path, &meta, true, needle)?;
    Ok((h.contains.then(|| hex::encode(h.sha256)), h.read))
}

/// Runs `f` over `jobs` on `threads` scoped threads; results in the jobs' order.
fn in_parallel(jobs: &[Job], threads: usize, f: &(dyn Fn(&Job) -> Outcome + Sync)) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let mut slots: Vec<Option<Outcome>> = (0..jobs.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(j) = jobs.get(i) else { break };
                        done.push((i, f(j)));
                    }
                    done
                })
            })
            .collect();
        for w in workers {
            let done = w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (i, r) in done {
                slots[i] = Some(r);
            }
        }
    });
    slots
        .into_iter()
        // Every index below the length is taken by exactly one worker.
        .map(|r| r.unwrap_or_else(|| Err(TargetError::MissingArg("a lost job".into()))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// Files whose timestamps are older than the racy window, so the cache keeps them.
    fn aged_tree(root: &Path, n: usize) {
        for i in 0..n {
            let p = root.join(format!("d{}/n{i:03}.md", i % 7));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("note {i}")).unwrap();
        }
        std::fs::write(root.join("a.md"), "top").unwrap();
        std::fs::write(root.join("d1.md"), "between d1/ and d2/").unwrap();
        std::thread::sleep(super::super::cache::RACY + std::time::Duration::from_millis(200));
    }

    fn run(w: &Walk<'_>, dir: &Path) -> (Vec<Value>, Counts) {
        let mut out = Vec::new();
        let c = w.run(dir, &mut |r, v| out.push(json!([r, v]))).unwrap();
        (out, c)
    }

    /// Parallel batches come out in path order, and a warm second walk reads nothing
    /// but what changed.
    #[test]
    fn sorted_parallel_and_warm() {
        let d = tempfile::tempdir().unwrap();
        aged_tree(d.path(), 300);
        let cache = Cache::new(1000);
        let all = |_: &Path| true;
        let w = Walk {
            cache: &cache,
            limit: 1000,
            keep: &all,
            needle: None,
            keep_link: &all,
        };
        let (cold, c1) = run(&w, d.path());
        assert_eq!((c1.entries, c1.read), (302, 302));
        let names: Vec<&str> = cold.iter().map(|e| e[0].as_str().unwrap()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "byte order of the full paths");
        assert_eq!(names[0], "a.md");
        assert_eq!(names[1], "d0/n000.md");
        let (warm, c2) = run(&w, d.path());
        assert_eq!((warm, c2.read), (cold.clone(), 0));
        std::fs::write(d.path().join("d3/n003.md"), "note 3!").unwrap();
        let (changed, c3) = run(&w, d.path());
        assert_eq!(c3.read, 1);
        assert_ne!(changed, cold);
    }

    /// `matching` answers come from the cache for unchanged content; new content is
    /// searched again.
    #[test]
    fn needle_answers_are_cached_per_content() {
        let d = tempfile::tempdir().unwrap();
        aged_tree(d.path(), 10);
        let cache = Cache::new(100);
        let all = |_: &Path| true;
        let walk = |needle: &'static str| Walk {
            cache: &cache,
            limit: 100,
            keep: &all,
            needle: Some(needle.as_bytes()),
            keep_link: &all,
        };
        let (m1, c1) = run(&walk("note 4"), d.path());
        assert_eq!((m1.len(), c1.read), (1, 12));
        let (m2, c2) = run(&walk("note 4"), d.path());
        assert_eq!((m2, c2.read), (m1, 0));
        // Another needle: the content hash is known, the answer is not.
        let (m3, c3) = run(&walk("top"), d.path());
        assert_eq!((m3.len(), c3.read), (1, 12));
        std::fs::write(d.path().join("a.md"), "note 4 too").unwrap();
        let (m4, c4) = run(&walk("note 4"), d.path());
        assert_eq!((m4.len(), c4.read), (2, 1));
    }
}
