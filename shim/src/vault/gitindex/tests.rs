//! Tests of the git reader: index versions and their caps, refs, files that are not
//! regular, real repositories; and [`git`], which runs git for other modules' tests.

use super::*;

fn entry_v2(name: &str, mode: u32, oid: u8, ctime: u32) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend_from_slice(&ctime.to_be_bytes());
    e.extend_from_slice(&[0; 20]);
    e.extend_from_slice(&mode.to_be_bytes());
    e.extend_from_slice(&[0; 12]);
    e.extend_from_slice(&[oid; 20]);
    e.extend_from_slice(&(name.len() as u16).to_be_bytes());
    e.extend_from_slice(name.as_bytes());
    let len = 62 + name.len();
    e.resize((len + 8) / 8 * 8, 0);
    e
}

fn index(version: u32, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut b = b"DIRC".to_vec();
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        b.extend_from_slice(e);
    }
    b.extend_from_slice(&[0; 20]);
    b
}

#[test]
fn v2_entries_ignore_stat_data() {
    let a = index(
        2,
        &[
            entry_v2("a.txt", 0o100644, 1, 5),
            entry_v2("dir/b", 0o100755, 2, 5),
        ],
    );
    let b = index(
        2,
        &[
            entry_v2("a.txt", 0o100644, 1, 9),
            entry_v2("dir/b", 0o100755, 2, 7),
        ],
    );
    let pa = parse_index(&a).unwrap();
    assert_eq!(pa, parse_index(&b).unwrap());
    assert_eq!(pa[1].path, "dir/b");
    assert_eq!(pa[1].mode, 0o100755);
    assert_eq!(pa[0].oid, "01".repeat(20));
}

#[test]
fn v4_prefix_compression() {
    let mut b = b"DIRC".to_vec();
    b.extend_from_slice(&4u32.to_be_bytes());
    b.extend_from_slice(&2u32.to_be_bytes());
    for (strip, suffix, oid) in [(0u8, "dir/aa", 1u8), (2, "bb", 2)] {
        b.extend_from_slice(&[0; 24]);
        b.extend_from_slice(&0o100644u32.to_be_bytes());
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&[oid; 20]);
        b.extend_from_slice(&6u16.to_be_bytes());
        b.push(strip);
        b.extend_from_slice(suffix.as_bytes());
        b.push(0);
    }
    b.extend_from_slice(&[0; 20]);
    let e = parse_index(&b).unwrap();
    assert_eq!(e[0].path, "dir/aa");
    assert_eq!(e[1].path, "dir/bb");
}

#[test]
fn refs_outside_the_git_dir_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let gd = d.path().join(".git");
    std::fs::create_dir_all(gd.join("refs/heads")).unwrap();
    std::fs::write(d.path().join("outside"), "not a ref").unwrap();
    for head in [
        "ref: ../outside",
        "ref: /etc/hostname",
        "ref: refs/../../outside",
    ] {
        std::fs::write(gd.join("HEAD"), head).unwrap();
        assert!(
            matches!(super::head(&gd), Err(GitError::BadRef { .. })),
            "{head}"
        );
    }
    // A loop of symbolic refs ends; an ordinary ref still resolves.
    std::fs::write(gd.join("HEAD"), "ref: refs/heads/a").unwrap();
    std::fs::write(gd.join("refs/heads/a"), "ref: refs/heads/a").unwrap();
    assert_eq!(super::head(&gd).unwrap(), "ref:refs/heads/a");
    std::fs::write(gd.join("refs/heads/a"), "0123abcd\n").unwrap();
    assert_eq!(super::head(&gd).unwrap(), "0123abcd");
}

/// Runs git in `dir` (a test's repository); its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Runs `f` on another thread; `None` if it did not finish within 20 s.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(20)).ok()
}

fn bare_layout(d: &Path) -> PathBuf {
    let gd = d.join(".git");
    std::fs::create_dir_all(gd.join("refs/heads")).unwrap();
    std::fs::write(gd.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    gd
}

#[test]
fn fifos_in_the_git_dir_are_refused_not_waited_on() {
    for name in [
        "index",
        "HEAD",
        "refs/heads/main",
        "packed-refs",
        "commondir",
    ] {
        let d = tempfile::tempdir().unwrap();
        let gd = bare_layout(d.path());
        let fifo = gd.join(name);
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let repo = d.path().to_path_buf();
        let got = within(move || snapshot(&repo).map(|s| s.head));
        if got.is_none() {
            // Release the blocked reader before failing.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
        }
        let got = got.unwrap_or_else(|| panic!("{name} as a FIFO blocked the snapshot"));
        assert!(got.is_err(), "{name} as a FIFO: {got:?}");
    }
}

#[test]
fn an_index_linked_to_a_device_is_refused_not_read_without_end() {
    let d = tempfile::tempdir().unwrap();
    let gd = bare_layout(d.path());
    std::os::unix::fs::symlink("/dev/zero", gd.join("index")).unwrap();
    let repo = d.path().to_path_buf();
    let got = within(move || snapshot(&repo).map(|s| s.entries.len()));
    assert!(got.expect("reading /dev/zero did not end").is_err());
}

#[test]
fn an_index_larger_than_the_cap_is_refused_before_it_is_read() {
    let d = tempfile::tempdir().unwrap();
    let gd = bare_layout(d.path());
    let f = std::fs::File::create(gd.join("index")).unwrap();
    f.set_len((512 << 20) + 1).unwrap();
    let e = snapshot(d.path()).unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}

/// Only "not found" means absent: a commondir, packed-refs or loose ref that exists
/// but cannot be read must not make the branch look unborn (a constant fingerprint).
#[test]
fn unreadable_refs_are_errors_not_absent() {
    for name in ["commondir", "packed-refs"] {
        let d = tempfile::tempdir().unwrap();
        let gd = bare_layout(d.path());
        std::fs::create_dir(gd.join(name)).unwrap();
        let got = head(&gd);
        assert!(got.is_err(), "{name} as a folder: {got:?}");
    }
    let d = tempfile::tempdir().unwrap();
    let gd = bare_layout(d.path());
    let sock = std::os::unix::net::UnixListener::bind(gd.join("refs/heads/main")).unwrap();
    let got = head(&gd);
    assert!(got.is_err(), "a loose ref that is a socket: {got:?}");
    drop(sock);
    // A folder where a loose ref would be is git's own layout for `main/x`: absent.
    std::fs::remove_file(gd.join("refs/heads/main")).unwrap();
    std::fs::create_dir(gd.join("refs/heads/main")).unwrap();
    assert_eq!(head(&gd).unwrap(), "ref:refs/heads/main");
}

/// The layouts real git writes: a linked worktree (`.git` file), packed refs, a
/// detached HEAD, a branch that does not exist; stat refreshes are not drift, a
/// staged content change is.
#[test]
fn real_repositories() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("r");
    std::fs::create_dir(&r).unwrap();
    git(&r, &["init", "-q"]);
    std::fs::write(r.join("a.txt"), "one").unwrap();
    git(&r, &["add", "a.txt"]);
    git(&r, &["commit", "-qm", "one"]);
    let c1 = git(&r, &["rev-parse", "HEAD"]);
    let s1 = snapshot(&r).unwrap();
    assert_eq!(s1.head, c1);
    assert_eq!(s1.entries.len(), 1);

    // Stat-only refresh: same snapshot. Same size, new content, staged: drift.
    let mtime = std::fs::metadata(r.join("a.txt"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(r.join("a.txt"), "two").unwrap();
    std::fs::write(r.join("a.txt"), "one").unwrap();
    git(&r, &["update-index", "--refresh"]);
    assert_eq!(snapshot(&r).unwrap(), s1);
    std::fs::write(r.join("a.txt"), "two").unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(r.join("a.txt"))
        .unwrap();
    f.set_modified(mtime).unwrap();
    git(&r, &["add", "a.txt"]);
    let s2 = snapshot(&r).unwrap();
    assert_eq!(s2.head, c1);
    assert_ne!(s2.entries, s1.entries);

    // Packed refs only.
    git(&r, &["pack-refs", "--all"]);
    assert!(!r.join(".git/refs/heads/main").exists());
    assert_eq!(snapshot(&r).unwrap(), s2);

    // Detached HEAD, and a HEAD naming a missing branch (unborn).
    git(&r, &["checkout", "-q", "--detach"]);
    assert_eq!(snapshot(&r).unwrap().head, c1);
    git(&r, &["symbolic-ref", "HEAD", "refs/heads/nope"]);
    assert_eq!(snapshot(&r).unwrap().head, "ref:refs/heads/nope");
    git(&r, &["symbolic-ref", "HEAD", "refs/heads/main"]);

    // A linked worktree: `.git` is a `gitdir:` file; HEAD and the branch resolve
    // through commondir; its index is its own.
    git(&r, &["worktree", "add", "-q", "-b", "side", "../w"]);
    let w = d.path().join("w");
    assert!(w.join(".git").is_file());
    let sw = snapshot(&w).unwrap();
    assert_eq!(sw.head, c1);
    std::fs::write(w.join("b.txt"), "b").unwrap();
    git(&w, &["add", "b.txt"]);
    assert_eq!(snapshot(&w).unwrap().entries.len(), 2);
    git(&w, &["commit", "-qm", "b"]);
    assert_ne!(snapshot(&w).unwrap().head, c1);
    assert_eq!(snapshot(&r).unwrap().head, c1);
}

/// A v4 entry: strip `strip` bytes of the previous name, append `suffix`.
fn entry_v4(strip: u8, suffix: &[u8]) -> Vec<u8> {
    let mut e = vec![0; 24];
    e.extend_from_slice(&0o100644u32.to_be_bytes());
    e.extend_from_slice(&[0; 12]);
    e.extend_from_slice(&[7; 20]);
    e.extend_from_slice(&0xfffu16.to_be_bytes());
    e.push(strip);
    e.extend_from_slice(suffix);
    e.push(0);
    e
}

/// v4 names are decoded from the previous one: 64 bytes on disk can each add a
/// byte to a name that is copied whole every time (quadratic memory). A name
/// longer than PATH_MAX, or names adding up to far more than the file, are refused.
#[test]
fn v4_names_cannot_grow_past_the_caps() {
    let mut es = vec![entry_v4(0, &[b'a'; 4000])];
    es.extend((0..2).map(|_| entry_v4(0, &[b'a'; 50])));
    let r = parse_index(&index(4, &es));
    assert_eq!(r, Err(IndexError::NameTooLong), "a 4100-byte name");

    let mut es = vec![entry_v4(0, &[b'd'; 4000])];
    es.extend((0..2000).map(|_| entry_v4(1, b"x")));
    let b = index(4, &es);
    let r = parse_index(&b);
    assert_eq!(
        r,
        Err(IndexError::NamesTooLarge),
        "{} bytes to 8 MB",
        b.len()
    );

    // Ordinary prefix sharing is fine.
    let es: Vec<_> = (0..2000u32)
        .map(|i| entry_v4(if i == 0 { 0 } else { 4 }, format!("{i:04}").as_bytes()))
        .collect();
    let mut es = es;
    es[0] = entry_v4(0, b"some/deep/folder/0000");
    assert_eq!(parse_index(&index(4, &es)).unwrap().len(), 2000);
}

/// An index with the given extensions (signature, data) between its entries and
/// its checksum.
fn with_extensions(exts: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
    let mut b = index(2, &[entry_v2("a", 0o100644, 1, 0)]);
    b.truncate(b.len() - 20);
    for (sig, data) in exts {
        b.extend_from_slice(*sig);
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
    }
    b.extend_from_slice(&[0; 20]);
    b
}

/// Git must understand an extension whose signature does not start with A-Z
/// ("link": split index, whose entries and deletions live outside this file).
#[test]
fn mandatory_extensions_that_are_not_understood_are_refused() {
    for sig in [b"link", b"abcd"] {
        let r = parse_index(&with_extensions(&[(b"TREE", b"xx"), (sig, b"data")]));
        assert_eq!(r, Err(IndexError::Extension(*sig)));
    }
    // Optional ones (A-Z) are skipped; `sdir` only marks sparse folder entries,
    // which are read (and bound) like any entry.
    for sig in [b"TREE", b"ZZZZ", b"sdir"] {
        assert_eq!(
            parse_index(&with_extensions(&[(sig, b"some data")]))
                .unwrap()
                .len(),
            1
        );
    }
    // An extension running past the checksum.
    let mut b = with_extensions(&[(b"TREE", b"xx")]);
    let at = b.len() - 20 - 2 - 4;
    b[at..at + 4].copy_from_slice(&1000u32.to_be_bytes());
    assert_eq!(parse_index(&b), Err(IndexError::Truncated));
    // No room for the checksum.
    let b = with_extensions(&[]);
    assert_eq!(parse_index(&b[..b.len() - 1]), Err(IndexError::Truncated));
}

/// With a split index, `git rm --cached` is recorded in the `link` extension's
/// deletion bitmap and the shared entries are in `sharedindex.*`: reading only the
/// entries of `.git/index` bound none of that.
#[test]
fn a_split_index_is_refused() {
    let d = tempfile::tempdir().unwrap();
    git(d.path(), &["init", "-q"]);
    for f in ["a.txt", "b.txt"] {
        std::fs::write(d.path().join(f), f).unwrap();
    }
    git(d.path(), &["add", "."]);
    git(d.path(), &["update-index", "--split-index"]);
    let before = snapshot(d.path()).map(|s| s.entries);
    git(d.path(), &["rm", "-q", "--cached", "a.txt"]);
    let after = snapshot(d.path()).map(|s| s.entries);
    assert!(
        matches!(&after, Err(GitError::BadIndex { why: IndexError::Extension(e), .. }) if e == b"link"),
        "{after:?}"
    );
    assert!(
        before.is_err() && after.is_err(),
        "split index read as {before:?} then {after:?}"
    );
}

/// A SHA-256 repository's index has 32-byte object ids: read with SHA-1 offsets,
/// 12 bytes of each id are skipped and the flags, names and padding come from the
/// wrong bytes. Such a repository is refused, whatever its entries happen to parse as.
#[test]
fn a_sha256_repository_is_refused() {
    let d = tempfile::tempdir().unwrap();
    git(d.path(), &["init", "-q", "--object-format=sha256"]);
    let mut seen = Vec::new();
    for i in 0..8 {
        std::fs::write(d.path().join(format!("f{i}")), format!("{i}")).unwrap();
        git(d.path(), &["add", "."]);
        for v in ["2", "3", "4"] {
            git(d.path(), &["update-index", "--index-version", v]);
            let r = snapshot(d.path());
            assert!(r.is_err(), "{i} files, version {v}, read as {r:?}");
            seen.push(r.unwrap_err().to_string());
        }
    }
    assert!(seen.iter().all(|e| e.contains("sha256")), "{seen:?}");
}

#[test]
fn names_that_are_not_utf8_are_told_apart() {
    let mut a = entry_v2("x", 0o100644, 1, 0);
    let mut b = a.clone();
    a[62] = 0xff;
    b[62] = 0xfe;
    assert_ne!(parse_index(&index(2, &[a])), parse_index(&index(2, &[b])));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert_eq!(
        parse_index(b"DIRC\0\0\0\x02\0\0\0\x05"),
        Err(IndexError::Truncated)
    );
    assert_eq!(parse_index(b"nope"), Err(IndexError::Signature));
    assert_eq!(
        parse_index(b"DIRC\0\0\0\x09\0\0\0\x00"),
        Err(IndexError::Version(9))
    );
    let mut t = index(2, &[entry_v2("a", 0o100644, 1, 0)]);
    t.truncate(40);
    assert_eq!(parse_index(&t), Err(IndexError::Truncated));
}
