//! `tcctl policy init` against real MCP servers (server-filesystem from npm,
//! mcp-server-git from PyPI): the printed starter policy must be a valid config that
//! gates the servers' writing tools and skips their read-only ones.

use std::process::Command;

use tc_tests::{bin, peers_dir};

fn init(args: &[&str]) -> tc_core::Config {
    let out = Command::new(bin("tcctl"))
        .args(["policy", "init", "--vault", "v", "--"])
        .args(args)
        .output()
        .expect("run tcctl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "tcctl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    tc_core::Config::parse(&text, std::path::Path::new("generated"))
        .unwrap_or_else(|e| panic!("generated policy is not a valid config: {e}\n{text}"))
}

fn gate_tools(c: &tc_core::Config) -> Vec<String> {
    c.vaults[0].gates.iter().map(|g| g.tool.clone()).collect()
}

#[test]
fn filesystem_server_gets_path_gates_for_its_writing_tools() {
    let server =
        peers_dir().join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        server.exists(),
        "{} missing: run scripts/install-peers",
        server.display()
    );
    let root = tempfile::tempdir().unwrap();
    let cfg = init(&[
        "node",
        server.to_str().unwrap(),
        root.path().to_str().unwrap(),
    ]);
    let tools = gate_tools(&cfg);
    for t in ["write_file", "edit_file", "move_file"] {
        assert!(tools.contains(&t.to_string()), "{t} not gated: {tools:?}");
    }
    for t in ["read_text_file", "list_directory", "search_files"] {
        assert!(
            !tools.contains(&t.to_string()),
            "read-only {t} gated: {tools:?}"
        );
    }
    let mv = cfg.vaults[0]
        .gates
        .iter()
        .find(|g| g.tool == "move_file")
        .unwrap();
    assert_eq!(
        mv.targets,
        Some(tc_core::config::Targets::Paths(vec![
            "destination".into(),
            "source".into()
        ]))
    );
    assert_eq!(cfg.vaults[0].root, root.path());
}

#[test]
fn git_server_gets_a_gate_for_commit_and_reset() {
    let python = peers_dir().join("venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/install-peers",
        python.display()
    );
    let repo = tempfile::tempdir().unwrap();
    let st = Command::new("git")
        .arg("init")
        .arg("-q")
        .arg(repo.path())
        .status()
        .expect("git init");
    assert!(st.success());
    let cfg = init(&[
        python.to_str().unwrap(),
        "-m",
        "mcp_server_git",
        "--repository",
        repo.path().to_str().unwrap(),
    ]);
    let tools = gate_tools(&cfg);
    for t in ["git_commit", "git_reset"] {
        assert!(tools.contains(&t.to_string()), "{t} not gated: {tools:?}");
    }
}
