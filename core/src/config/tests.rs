//! Unit tests of the configuration: parsing, defaults, and the rules each key
//! breaks named in the message.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/tc.toml"))
}

#[test]
fn empty_file_is_all_defaults() {
    let c = parse("").unwrap();
    assert_eq!(c.daemon.elicit_ttl_seconds, 300);
    assert_eq!(c.daemon.events_max_age_days, 90);
    assert_eq!(c.daemon.events_max_bytes, 16 * 1024 * 1024);
    assert_eq!(c.daemon.rate_limit_per_minute, 120);
    assert_eq!(c.daemon.rate_limit_burst, 300);
    assert_eq!(c.governor.max_response_bytes, 1_048_576);
    assert!(c.vaults.is_empty());
}

#[test]
fn design_example_parses() {
    // The design's example config, as the fuzz corpus keeps it (fuzz/gen_corpus.py).
    let text = std::fs::read_to_string(crate::fuzz_corpus::dir("config").join("valid-design.toml"))
        .expect("the corpus's valid-design.toml");
    let c = parse(&text).unwrap();
    let v = c.vault("notes").unwrap();
    assert_eq!(
        v.gates[0].targets,
        Some(Targets::Paths(vec!["source".into(), "destination".into()]))
    );
    assert_eq!(
        v.gates[1].targets,
        Some(Targets::Git(Some("repo_path".into())))
    );
    assert!(
        matches!(&v.gates[2].targets, Some(Targets::Probe { tool, .. }) if tool == "open_nodes")
    );
    assert_eq!(v.gates[3].targets, Some(Targets::None));
    assert_eq!(
        v.gates[0]
            .when
            .as_ref()
            .unwrap()
            .cross_folder
            .as_ref()
            .unwrap()[1],
        "destination"
    );
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let e = parse("[daemon]\nsockett = \"/x\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("sockett") && e.contains("/etc/tc.toml"), "{e}");
    let e = parse("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"t\"\ntargets = \"none\"\nwhen = { exist = \"p\" }\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("exist"), "{e}");
}

#[test]
fn a_gate_preview_names_two_arguments() {
    let gate = |preview: &str| {
        format!("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"w\"\ntargets = {{ paths = [\"path\"] }}\npreview = {preview}\n")
    };
    let c = parse(&gate(
        "{ diff = { path = \"path\", content = \"content\" } }",
    ))
    .unwrap();
    assert_eq!(
        c.vaults[0].gates[0].preview,
        Some(Preview::Diff(DiffPreview {
            path: "path".into(),
            content: "content".into()
        }))
    );
    for (bad, key) in [
        ("{ diff = { path = \"path\" } }", "content"),
        (
            "{ diff = { path = \"p\", content = \"c\", mode = \"x\" } }",
            "mode",
        ),
        ("{ image = { path = \"p\" } }", "image"),
        (
            "{ diff = { path = \"p\", content = \"p\" } }",
            "preview.diff",
        ),
        (
            "{ diff = { path = \"\", content = \"c\" } }",
            "preview.diff",
        ),
    ] {
        let e = parse(&gate(bad)).unwrap_err().to_string();
        assert!(e.contains(key), "{bad}: {e}");
    }
}

#[test]
fn a_gate_without_targets_is_refused_with_what_to_write() {
    let e = parse("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"rm\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vaults[0].gates[0].targets") && e.contains("targets = \"none\""),
        "{e}"
    );
    let e = parse("[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults.gates]]\ntool = \"rm\"\ntargets = \"all\"\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("targets"), "{e}");
}

#[test]
fn rule_violations_name_the_key() {
    for (text, key) in [
        (
            "[daemon]\nelicit_ttl_seconds = 0\n",
            "daemon.elicit_ttl_seconds",
        ),
        (
            "[daemon]\nevents_max_age_days = 0\n",
            "daemon.events_max_age_days",
        ),
        (
            "[daemon]\nevents_max_bytes = 1000\n",
            "daemon.events_max_bytes",
        ),
        (
            "[daemon]\nrate_limit_per_minute = 0\n",
            "daemon.rate_limit_per_minute",
        ),
        (
            "[daemon]\nrate_limit_burst = 0\n",
            "daemon.rate_limit_burst",
        ),
        ("[[vaults]]\nid = \"a\"\nroot = \"rel\"\n", "vaults[0].root"),
        (
            "[[vaults]]\nid = \"a\"\nroot = \"/a\"\nmax_target_files = 0\n",
            "vaults[0].max_target_files",
        ),
        (
            "[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[[vaults]]\nid = \"a\"\nroot = \"/b\"\n",
            "vaults[1].id",
        ),
        (
            "[[vaults]]\nid = \"a\"\nroot = \"/a\"\n[vaults.acl]\ndeny = [\"[\"]\n",
            "vaults[0].acl.deny[0]",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(key), "{text:?} -> {e}");
    }
}

#[test]
fn path_argument_declarations() {
    let base = "[[vaults]]\nid = \"a\"\nroot = \"/a\"\n";
    let c = parse(&format!(
            "{base}[[vaults.paths]]\ntool = \"git_show\"\nargs = [\"revision\"]\nkind = \"revision\"\nrepo = \"repo_path\"\n"
        ))
        .unwrap();
    let p = &c.vaults[0].paths[0];
    assert_eq!(
        (p.kind, p.repo.as_deref()),
        (ArgKind::Revision, Some("repo_path"))
    );
    for (extra, want) in [
        ("args = [\"r\"]\nkind = \"rev\"\n", "rev"),
        ("args = [\"r\"]\nkind = \"path\"\nrepos = \"x\"\n", "repos"),
        ("args = []\nkind = \"path\"\n", "vaults[0].paths[0].args"),
        ("args = [\"r\", \"r\"]\nkind = \"path\"\n", "declared twice"),
    ] {
        let e = parse(&format!("{base}[[vaults.paths]]\ntool = \"t\"\n{extra}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{extra:?} -> {e}");
    }
}

#[test]
fn missing_default_file_is_defaults_but_missing_explicit_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let env = move |k: &str| (k == "HOME").then(|| home.clone().into_os_string());
    assert!(Config::load_with_env(None, &env).unwrap().vaults.is_empty());
    let e = Config::load_with_env(Some(&dir.path().join("nope.toml")), &env).unwrap_err();
    assert!(matches!(e, ConfigError::Missing { .. }), "{e}");
}

/// A config breaking a dozen rules, in the daemon, the governor, two vaults and gates.
const SEVERAL: &str = "[daemon]\nelicit_ttl_seconds = 0\nrate_limit_burst = 0\n\
    [governor]\nmax_response_bytes = 10\n\
    [[vaults]]\nid = \"notes\"\nroot = \"rel\"\nmax_target_files = 0\n\
    [[vaults.gates]]\ntool = \"rm\"\n\
    [[vaults.gates]]\ntool = \"mv\"\ntargets = { tree = { root = \"d\", glob = \"[\" } }\n\
    [[vaults.gates]]\ntool = \"rm\"\ntargets = { paths = [] }\n\
    [vaults.acl]\ndeny = [\"[\"]\n\
    [[vaults]]\nid = \"notes\"\nroot = \"/b\"\n\
    [[vaults.paged]]\ntool = \"r\"\nitems = \"\"\n";

#[test]
fn every_problem_is_reported_with_its_key_vault_and_gate() {
    let e = parse(SEVERAL).unwrap_err();
    let ConfigError::Invalid { problems, .. } = &e else {
        panic!("{e}")
    };
    let at: Vec<_> = problems
        .0
        .iter()
        .map(|p| (p.key.as_str(), p.vault.as_deref(), p.tool.as_deref()))
        .collect();
    let (notes, rm, mv) = (Some("notes"), Some("rm"), Some("mv"));
    assert_eq!(
        at,
        [
            ("daemon.elicit_ttl_seconds", None, None),
            ("daemon.rate_limit_burst", None, None),
            ("governor.max_response_bytes", None, None),
            ("vaults[0].root", notes, None),
            ("vaults[0].max_target_files", notes, None),
            ("vaults[0].gates[0].targets", notes, rm),
            ("vaults[0].gates[1].targets.tree.glob", notes, mv),
            ("vaults[0].gates[2].tool", notes, rm),
            ("vaults[0].gates[2].targets.paths", notes, rm),
            ("vaults[0].acl.deny[0]", notes, None),
            ("vaults[1].id", notes, None),
            ("vaults[1].paged[0].items", notes, None),
        ]
    );
}

#[test]
fn several_problems_print_one_per_line() {
    let text = parse(SEVERAL).unwrap_err().to_string();
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 13, "{text}");
    assert_eq!(lines[0], "invalid config /etc/tc.toml: 12 problems:");
    assert_eq!(
        lines[6],
        "  vaults[0].gates[0].targets (vault \"notes\", gate \"rm\"): gate for tool \"rm\" \
         declares no targets; every gate must say what its confirmation is bound to (write \
         targets = \"none\" to bind on arguments alone)"
    );
    assert_eq!(
        lines[11],
        "  vaults[1].id (vault \"notes\"): duplicate vault id \"notes\""
    );
}

#[test]
fn one_problem_is_one_line_as_before() {
    let e = parse("[daemon]\nelicit_ttl_seconds = 0\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid config /etc/tc.toml: daemon.elicit_ttl_seconds: must be at least 1"
    );
}

#[test]
fn a_remote_vault_reports_each_of_its_problems() {
    let e = parse(
        "[[vaults]]\nid = \"r\"\nurl = \"ftp://h/mcp\"\ncommand = [\"x\"]\nca_file = \"ca.pem\"\n\
         [vaults.headers]\nAuthorization = \"Bearer x\"\nMcp-Session-Id = \"s\"\n\
         [vaults.bearer]\nenv = \"\"\n\
         [[vaults.gates]]\ntool = \"w\"\ntargets = { paths = [\"p\"] }\n\
         [vaults.acl]\ndeny = [\"x/**\"]\n\
         [vaults.http]\nmax_sessions = 0\nmax_body_bytes = 1\n",
    )
    .unwrap_err();
    let ConfigError::Invalid { problems, .. } = &e else {
        panic!("{e}")
    };
    let keys: Vec<_> = problems.0.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "vaults[0].ca_file",
            "vaults[0].ca_file",
            "vaults[0].url",
            "vaults[0].url",
            "vaults[0].headers.Authorization",
            "vaults[0].headers.Mcp-Session-Id",
            "vaults[0].bearer.env",
            "vaults[0].gates[0].targets",
            "vaults[0].acl",
            "vaults[0].http.max_sessions",
            "vaults[0].http.max_body_bytes",
        ],
        "{e}"
    );
    // The header's value (a credential) is not repeated in the message.
    assert!(!e.to_string().contains("Bearer x"), "{e}");
}

#[test]
fn a_broken_remote_page_is_refused_at_its_key_and_unknown_keys_too() {
    let e = parse(
        "[approvals]\nremote = { listen = \"0.0.0.0:8443\", public_url = \"https://10.0.0.1:8443\", tls = \"self-signed\" }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("approvals.remote.public_url: \"https://10.0.0.1:8443\" names an IP address"),
        "{e}"
    );
    let e = parse("[approvals]\nremote = { listen = \"0.0.0.0:8443\", public_url = \"https://a.b\", tls = \"self-signed\", cert = \"x\" }\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `cert`"), "{e}");
    let c = parse("[approvals]\nremote = { listen = \"0.0.0.0:8443\", public_url = \"https://tc.home.arpa:8443\", tls = \"self-signed\" }\n").unwrap();
    let s = c.approvals.remote.unwrap().spec().unwrap();
    assert_eq!(s.rp_id, "tc.home.arpa");
}
