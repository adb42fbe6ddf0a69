//! End to end: era negotiation. The Python `mcp` 2.3 high-level `mcp.Client` (mode
//! "auto": probes `server/discover`, falls back to `initialize`) through tc-shim in front
//! of a legacy-only downstream (server-filesystem: the shim does the handshake itself and
//! answers `server/discover`) and a dual-era one (mcp-server-git: discover forwarded);
//! the gate and `elicit_token` stripping work in the modern era; an `initialize` selects
//! the legacy era.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

fn fs_env() -> Env {
    Env::with(&Vault::filesystem("fs").gate("write_file", r#"{ paths = ["path"] }"#))
}

fn git_env() -> Env {
    let env = Env::with(&Vault::git("repo").gate("git_commit", r#"{ git = "repo_path" }"#));
    git_repo_with_base(&env.root);
    env
}

#[test]
fn shim_era_modern_client_legacy_filesystem_downstream() {
    let mut env = fs_env();
    env.start_tcd();
    let note = env.root.join("note.txt");
    std::fs::write(&note, "v0").unwrap();
    let (argv, log) = env.shim_argv_logged("fs");
    let mut c = PyClient::start_auto(&argv);

    // The client adopted the shim's DiscoverResult: modern era end to end on its side.
    assert_eq!(c.hello["era"], "modern", "{}", c.hello);
    assert_eq!(c.hello["protocolVersion"], "2026-07-28", "{}", c.hello);
    let want = "client era: modern (2026-07-28), downstream era: legacy (2025-11-25, handshake by tc-shim)";
    let text = wait_log(&log, want);
    assert!(text.contains(want), "shim log:\n{text}");

    // tools/list from the legacy downstream, completed for the modern client.
    // (The 2026-07-28 client validates strictly: without the shim adding `resultType`,
    // `ttlMs` and `cacheScope` to the legacy result, list() fails with a ValidationError.)
    // Ungated calls flow.
    assert_fs_scene_listed_and_readable(&mut c);

    // Gated call (carrying the modern _meta envelope): elicit_required, nothing written.
    let args = json!({"path": "note.txt", "content": "v1"});
    let r = raise(&mut c, "write_file", &args);
    assert_eq!(
        sc(&r)["details"]["args_hash"],
        tc_core::hash::args_hash("write_file", &args)
    );
    assert!(sc(&r)["recovery"]["command"]
        .as_str()
        .unwrap()
        .starts_with("tcctl elicit --hash "));
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "v0");

    // Mint, re-call with the token: written once (the token was stripped before forwarding:
    // server-filesystem's strict schema would refuse an unknown argument).
    assert_redeemed_once(&mut c, &env, ("write_file", &args), &r, &note, "v1");
}

#[test]
fn shim_era_modern_client_modern_git_downstream() {
    let mut env = git_env();
    env.start_tcd();
    let root = env.root.clone();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    git(&root, &["add", "a.txt"]);
    let (argv, log) = env.shim_argv_logged("repo");
    let mut c = PyClient::start_auto(&argv);
    assert_eq!(c.hello["era"], "modern", "{}", c.hello);
    let want = "client era: modern (2026-07-28), downstream era: modern (2026-07-28)";
    let text = wait_log(&log, want);
    assert!(text.contains(want), "shim log:\n{text}");
    assert!(!text.contains("handshake by tc-shim"), "shim log:\n{text}");

    let tools = c.list();
    assert_listed(&tools, "git_commit", true);
    assert_floor_hidden(&tools, "git_reset");
    // The downstream's own modern result fields survive.
    assert_eq!(
        tools["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcp-git",
        "{tools}"
    );

    let r = c.call(
        "git_status",
        json!({"repo_path": root.display().to_string()}),
    );
    assert_eq!(code(&r), None, "{r}");

    let args = json!({"repo_path": root.display().to_string(), "message": "add a"});
    let r = raise(&mut c, "git_commit", &args);
    let count = || {
        git(&root, &["rev-list", "--count", "HEAD"])
            .trim()
            .to_string()
    };
    assert_eq!(count(), "1");
    let token = mint(&env.socket, &r);
    let r = c.call("git_commit", with_token(&args, &token));
    assert_eq!(code(&r), None, "{r}");
    assert_eq!(count(), "2");
    assert_eq!(git(&root, &["log", "-1", "--format=%s"]).trim(), "add a");
}

#[test]
fn shim_era_initialize_selects_legacy() {
    let env = git_env();
    let (argv, log) = env.shim_argv_logged("repo");
    let mut c = PyClient::start(&argv);
    assert_eq!(c.hello["era"], "legacy");
    assert_eq!(c.hello["protocolVersion"], "2025-11-25");
    let want = "client era: legacy (2025-11-25), downstream era: legacy (2025-11-25)";
    let text = wait_log(&log, want);
    assert!(text.contains(want), "shim log:\n{text}");
    let tools = c.list();
    assert!(tool(&tools, "git_status").is_some(), "{tools}");
}
