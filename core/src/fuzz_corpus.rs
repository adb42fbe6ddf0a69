//! The committed fuzz corpus (`fuzz/corpus/<target>/`, made by `fuzz/gen_corpus.py`), read
//! by the corpus-replay tests of every crate, and the settings of every property test.
//! Compiled only for tests (feature `fuzz-corpus`).

use std::path::PathBuf;

use proptest::test_runner::Config as ProptestConfig;

/// Cases per property: `PROPTEST_CASES` when set (a longer local run), else `n`.
pub fn proptest_config(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n),
        // No regression files written into the tree; a failure prints its minimal input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The corpus directory of one fuzz target.
pub fn dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// Every file of `target`'s corpus as `(file name, bytes)`, sorted by name. Panics (these
/// are tests) when the directory is missing or holds fewer than 50 files, so a lost or
/// emptied corpus fails the replay instead of passing it vacuously.
pub fn read(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    let out: Vec<_> = files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, bytes)
        })
        .collect();
    assert!(
        out.len() >= 50,
        "corpus {target} has {} files; regenerate with fuzz/gen_corpus.py",
        out.len()
    );
    out
}
