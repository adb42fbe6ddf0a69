//! Property tests and the replay of `fuzz/corpus/config/` (made by `fuzz/gen_corpus.py`):
//! any file is a config or a [`ConfigError`] naming what is wrong, never a panic.

use super::*;
use proptest::prelude::*;

use crate::fuzz_corpus::proptest_config as config;

/// A refusal is a parse error with a message, or rules each naming its key.
fn named(e: &ConfigError) -> bool {
    match e {
        ConfigError::Parse { message, .. } => !message.is_empty(),
        ConfigError::Invalid { problems, .. } => {
            !problems.0.is_empty()
                && problems.0.iter().all(|p| {
                    !p.reason.is_empty()
                        && ["daemon.", "governor.", "vaults["]
                            .iter()
                            .any(|k| p.key.starts_with(k))
                })
        }
        _ => false,
    }
}

/// A parsed config keeps every rule `validate` enforces.
fn holds(c: &Config) -> bool {
    c.daemon.elicit_ttl_seconds >= 1
        && c.daemon.events_max_age_days >= 1
        && c.daemon.events_max_bytes >= MIN_EVENTS_MAX_BYTES
        && c.daemon.rate_limit_per_minute >= 1
        && c.daemon.rate_limit_burst >= 1
        && c.governor.max_response_bytes >= 1024
        && c.vaults.iter().all(|v| {
            !v.id.is_empty() && v.root.is_absolute() && v.gates.iter().all(|g| g.targets.is_some())
        })
}

fn pick(options: &[&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(options.to_vec())
}

fn gate() -> impl Strategy<Value = String> {
    (
        pick(&["\"t\"", "\"u\"", "\"\""]),
        pick(&[
            "",
            "targets = \"none\"",
            "targets = \"all\"",
            "targets = { paths = [\"path\"] }",
            "targets = { paths = [] }",
            "targets = { tree = { root = \"d\", glob = \"**/*.md\" } }",
            "targets = { tree = { root = \"d\", glob = \"[\" } }",
            "targets = { matching = { root = \"d\", contains = \"x\" } }",
            "targets = { git = \"repo_path\" }",
            "targets = { probe = { tool = \"p\", arguments = { a = \"$x\" } } }",
            "targets = { probe = { tool = \"p\", arguments = 5 } }",
        ]),
        pick(&[
            "",
            "when = { cross_folder = [\"a\", \"b\"] }",
            "when = { exists = \"path\", equals = { arg = \"a\", value = [1] } }",
            "when = { exist = \"path\" }",
        ]),
    )
        .prop_map(|(tool, targets, when)| {
            format!("[[vaults.gates]]\ntool = {tool}\n{targets}\n{when}\n")
        })
}

fn vault() -> impl Strategy<Value = String> {
    (
        pick(&["\"a\"", "\"b\"", "\"v.1_-\"", "\"a b\"", "\"\""]),
        pick(&["\"/srv/a\"", "\"rel\"", "\"/\""]),
        pick(&[
            "",
            "lean = true",
            "legacy_elicitation_shim = true",
            "command = []",
        ]),
        prop::collection::vec(gate(), 0..3),
        pick(&[
            "",
            "[[vaults.paged]]\ntool = \"r\"\nitems = \"paths\"",
            "[[vaults.paged]]\ntool = \"r\"\nitems = \"\"",
        ]),
        pick(&[
            "",
            "[vaults.acl]\ndeny = [\"private/**\"]\nread_only = [\"{a,b}/*\"]",
            "[vaults.acl]\ndeny = [\"[\"]",
        ]),
    )
        .prop_map(|(id, root, flag, gates, paged, acl)| {
            format!(
                "[[vaults]]\nid = {id}\nroot = {root}\n{flag}\n{}{paged}\n{acl}\n",
                gates.concat()
            )
        })
}

/// Documents built from the real tables and keys, mostly well formed, with values
/// that break one rule or another: they reach `validate`, not only the TOML parser.
fn document() -> impl Strategy<Value = String> {
    (
        pick(&[
            "",
            "[daemon]\nelicit_ttl_seconds = 0",
            "[daemon]\nelicit_ttl_seconds = 60",
            "[daemon]\nsockett = \"/x\"",
        ]),
        pick(&[
            "",
            "[governor]\nmax_response_bytes = 1023",
            "[governor]\nmax_response_bytes = 4096",
        ]),
        prop::collection::vec(vault(), 0..3),
    )
        .prop_map(|(daemon, governor, vaults)| format!("{daemon}\n{governor}\n{}", vaults.concat()))
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn any_text_is_a_config_or_a_named_error(text in "(?s).{0,300}") {
        match Config::parse(&text, Path::new("/fuzz.toml")) {
            Ok(c) => prop_assert!(holds(&c)),
            Err(e) => prop_assert!(named(&e), "{e:?}"),
        }
    }

    #[test]
    fn structured_documents_reach_validation(text in document()) {
        match Config::parse(&text, Path::new("/fuzz.toml")) {
            Ok(c) => prop_assert!(holds(&c), "{}", text),
            Err(e) => prop_assert!(named(&e), "{e:?}\n{text}"),
        }
    }
}

#[test]
fn corpus_config() {
    let dir = crate::fuzz_corpus::dir("config");
    let mut wrong = Vec::new();
    for (name, bytes) in crate::fuzz_corpus::read("config") {
        let p = dir.join(&name);
        let utf8 = std::str::from_utf8(&bytes).is_ok();
        // Through `load`, as the binaries read it (a non-UTF-8 file is a read error).
        let outcome = std::panic::catch_unwind(|| Config::load(Some(&p)));
        let ok = match &outcome {
            Ok(Ok(c)) => holds(c),
            Ok(Err(e)) if name.starts_with("valid-") => {
                wrong.push(format!("{name}: a valid seed was refused: {e}"));
                continue;
            }
            Ok(Err(ConfigError::Read { source, .. })) => {
                !utf8 && source.kind() == std::io::ErrorKind::InvalidData
            }
            Ok(Err(e)) => named(e),
            Err(_) => false,
        };
        if !ok {
            wrong.push(format!("{name}: {outcome:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
