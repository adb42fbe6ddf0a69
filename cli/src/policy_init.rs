//! `tcctl policy init -- <server command>`: asks a real MCP server for its tools and
//! prints a starter `[[vaults.gates]]` block for every tool that is not read-only.
//!
//! Path-like properties of each tool's input schema become `paths` targets; a tool with
//! none gets `targets = "none"` and a comment saying to pick a better target. Arguments
//! of known servers that name files in a git syntax get `[[vaults.paths]]` entries.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::{exit, CliError};

/// How long the server gets to answer `initialize` and `tools/list`.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the server, lists its tools and returns the TOML to print.
pub async fn run(vault: &str, command: &[String]) -> Result<String, CliError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CliError::new(exit::FAILURE, "give the server command after --"))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CliError::new(exit::FAILURE, format!("cannot start {program:?}: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let tools = tokio::time::timeout(ANSWER_TIMEOUT, async {
        let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},
            "clientInfo":{"name":"tcctl-policy-init","version":env!("CARGO_PKG_VERSION")}}});
        send(&mut stdin, &init).await?;
        await_id(&mut lines, 1).await?;
        send(
            &mut stdin,
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await?;
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        for id in 2..100 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            send(
                &mut stdin,
                &json!({"jsonrpc":"2.0","id":id,"method":"tools/list","params":params}),
            )
            .await?;
            let result = await_id(&mut lines, id).await?;
            tools.extend(result["tools"].as_array().cloned().unwrap_or_default());
            cursor = result.get("nextCursor").filter(|c| !c.is_null()).cloned();
            if cursor.is_none() {
                break;
            }
        }
        Ok::<_, CliError>(tools)
    })
    .await
    .map_err(|_| {
        CliError::new(
            exit::FAILURE,
            format!("{program:?} did not answer tools/list within {ANSWER_TIMEOUT:?}"),
        )
    })??;
    let _ = child.kill().await;
    Ok(render(vault, command, &tools))
}

async fn send(stdin: &mut tokio::process::ChildStdin, msg: &Value) -> Result<(), CliError> {
    let mut line = msg.to_string();
    line.push('\n');
    stdin
        .write_all(line.as_bytes())
        .await
        .map_err(|e| CliError::new(exit::FAILURE, format!("server closed its input: {e}")))
}

async fn await_id(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    id: i64,
) -> Result<Value, CliError> {
    loop {
        let line = lines
            .next_line()
            .await
            .map_err(|e| CliError::new(exit::FAILURE, format!("reading the server: {e}")))?
            .ok_or_else(|| CliError::new(exit::FAILURE, "the server exited before answering"))?;
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg.get("id").and_then(Value::as_i64) != Some(id) || msg.get("method").is_some() {
            continue; // notifications, server requests, other answers
        }
        if let Some(err) = msg.get("error") {
            return Err(CliError::new(
                exit::FAILURE,
                format!("the server answered an error: {err}"),
            ));
        }
        return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
    }
}

/// Property names and descriptions that suggest a filesystem path.
fn is_path_like(name: &str, schema: &Value) -> bool {
    let n = name.to_ascii_lowercase();
    let by_name = [
        "path",
        "file",
        "dir",
        "folder",
        "source",
        "destination",
        "target",
        "repo",
    ]
    .iter()
    .any(|w| n.contains(w));
    let by_desc = schema["description"]
        .as_str()
        .is_some_and(|d| d.to_ascii_lowercase().contains("path"));
    let stringy = matches!(schema["type"].as_str(), Some("string") | None)
        || (schema["type"] == "array"
            && matches!(schema["items"]["type"].as_str(), Some("string") | None));
    stringy && (by_name || by_desc)
}

fn toml_str(s: &str) -> String {
    // JSON's escapes are TOML's, but a raw bidi or invisible character from the server
    // must not reach the file a person reviews: those become TOML `\u`/`\U` escapes.
    let mut out = String::new();
    for c in Value::String(s.to_string()).to_string().chars() {
        match c as u32 {
            u if tc_core::display::needs_escape(c) && u > 0xFFFF => {
                out.push_str(&format!("\\U{u:08X}"))
            }
            u if tc_core::display::needs_escape(c) => out.push_str(&format!("\\u{u:04X}")),
            _ => out.push(c),
        }
    }
    out
}

/// The starter policy for `tools`.
pub fn render(vault: &str, command: &[String], tools: &[Value]) -> String {
    // Servers usually take their root folder as an argument: use the last existing one.
    let root = command
        .iter()
        .skip(1)
        .rev()
        .find(|a| a.starts_with('/') && std::path::Path::new(a).is_dir())
        .map(|a| toml_str(a))
        .unwrap_or_else(|| "\"/CHANGE/ME\"".into());
    let mut out = String::new();
    out.push_str(&format!(
        "# Starter policy from `tcctl policy init`: review every gate before relying on it.\n\
         [[vaults]]\nid = {}\nroot = {root}   # path targets must stay under this folder\ncommand = [{}]\n",
        toml_str(vault),
        command.iter().map(|c| toml_str(c)).collect::<Vec<_>>().join(", ")
    ));
    out.push_str(&path_declarations(tools));
    for t in tools {
        let Some(name) = t["name"].as_str() else {
            continue;
        };
        let ann = &t["annotations"];
        if ann["readOnlyHint"] == Value::Bool(true) {
            continue;
        }
        let paths: Vec<&str> = t["inputSchema"]["properties"]
            .as_object()
            .map(|props| {
                props
                    .iter()
                    .filter(|(k, v)| is_path_like(k, v))
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        out.push('\n');
        if ann["destructiveHint"] == Value::Bool(true) {
            out.push_str("# floor: the server marks this tool destructive, so it is gated whatever the config says\n");
        }
        out.push_str(&format!("[[vaults.gates]]\ntool = {}\n", toml_str(name)));
        if paths.is_empty() {
            out.push_str("# no path-like argument found: pick `git`, `probe` or `tree` targets if the tool has a target\ntargets = \"none\"\n");
        } else {
            out.push_str(&format!(
                "targets = {{ paths = [{}] }}\n",
                paths
                    .iter()
                    .map(|p| toml_str(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out
}

/// `[[vaults.paths]]` for the arguments of `tools` that the built-in table
/// ([`tc_core::config::KNOWN_PATH_ARGS`]) knows, so the policy says how the ACL reads
/// them (git revisions, pathspecs) instead of relying on what is built in.
fn path_declarations(tools: &[Value]) -> String {
    use tc_core::config::{ArgKind, KNOWN_PATH_ARGS};
    let mut out = String::new();
    for (tool, arg, kind, repo) in KNOWN_PATH_ARGS {
        let has = tools
            .iter()
            .any(|t| t["name"] == *tool && t["inputSchema"]["properties"].get(*arg).is_some());
        if !has {
            continue;
        }
        let kind = match kind {
            ArgKind::Path => "path",
            ArgKind::Revision => "revision",
            ArgKind::Pathspec => "pathspec",
            ArgKind::RevisionOrPathspec => "revision_or_pathspec",
            ArgKind::Tracked => "tracked",
            ArgKind::None => "none",
        };
        if out.is_empty() {
            out.push_str(
                "\n# Arguments that name files in a way the ACL must parse (schemas say only \"string\").\n",
            );
        }
        out.push_str(&format!(
            "[[vaults.paths]]\ntool = {}\nargs = [{}]\nkind = \"{kind}\"\n",
            toml_str(tool),
            toml_str(arg)
        ));
        if let Some(r) = repo {
            out.push_str(&format!("repo = {}\n", toml_str(r)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_tools_are_skipped_and_paths_guessed() {
        let tools = vec![
            json!({"name":"read_file","annotations":{"readOnlyHint":true},"inputSchema":{"properties":{"path":{"type":"string"}}}}),
            json!({"name":"move_file","annotations":{"destructiveHint":true},"inputSchema":{"properties":{
                "source":{"type":"string"},"destination":{"type":"string"},"overwrite":{"type":"boolean"}}}}),
            json!({"name":"run","inputSchema":{"properties":{"cmd":{"type":"string"}}}}),
        ];
        let out = render("fs", &["npx".into(), "server".into()], &tools);
        let cfg = tc_core::Config::parse(
            &out.replace("/CHANGE/ME", "/tmp"),
            std::path::Path::new("gen"),
        )
        .expect("generated policy must be a valid config");
        let gates = &cfg.vaults[0].gates;
        assert_eq!(gates.len(), 2, "{out}");
        assert_eq!(gates[0].tool, "move_file");
        assert_eq!(
            gates[0].targets,
            Some(tc_core::config::Targets::Paths(vec![
                "destination".into(),
                "source".into()
            ]))
        );
        assert_eq!(gates[1].targets, Some(tc_core::config::Targets::None));
        assert!(out.contains("# floor:"));
        assert!(cfg.vaults[0].paths.is_empty(), "{out}");
    }

    #[test]
    fn git_servers_get_path_declarations() {
        let tools = vec![
            json!({"name":"git_show","annotations":{"readOnlyHint":true},"inputSchema":{"properties":{
                "repo_path":{"type":"string"},"revision":{"type":"string"}}}}),
            json!({"name":"git_add","inputSchema":{"properties":{
                "repo_path":{"type":"string"},"files":{"type":"array","items":{"type":"string"}}}}}),
            json!({"name":"git_diff","inputSchema":{"properties":{"repo_path":{"type":"string"}}}}),
        ];
        let out = render("git", &["mcp-server-git".into()], &tools);
        let cfg = tc_core::Config::parse(
            &out.replace("/CHANGE/ME", "/tmp"),
            std::path::Path::new("gen"),
        )
        .expect("generated policy must be a valid config");
        let p: Vec<_> = cfg.vaults[0]
            .paths
            .iter()
            .map(|p| {
                (
                    p.tool.as_str(),
                    p.args[0].as_str(),
                    p.kind,
                    p.repo.as_deref(),
                )
            })
            .collect();
        use tc_core::config::ArgKind;
        assert_eq!(
            p,
            [
                ("git_show", "revision", ArgKind::Revision, Some("repo_path")),
                ("git_add", "files", ArgKind::Pathspec, Some("repo_path")),
            ],
            "{out}"
        );
    }
}
