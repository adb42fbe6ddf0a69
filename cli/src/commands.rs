//! One function per `tcctl` subcommand. Output meant for scripts (the token, `--json`)
//! goes to stdout alone; everything for people goes to stderr or formatted stdout.

use std::fmt::Write as _;
use std::io::Write;

use clap::CommandFactory;
use tc_core::config::{Config, Targets};
use tc_core::display::{escape, json_safe, reescape};
use tc_proto::v1;
use tokio_stream::StreamExt;

use crate::cli::{
    ApprovalsCommand, Cli, Command, ElicitArgs, EnrollCommand, PasskeyCommand, PolicyCommand,
};
use crate::client::{self, status_error, vault_for, Target};
use crate::output::{emit, rfc3339};
use crate::{exit, CliError};

/// Dispatches a parsed command line.
pub async fn run(args: Cli) -> Result<(), CliError> {
    match &args.command {
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "tcctl", &mut script);
            return emit(&String::from_utf8_lossy(&script));
        }
        // Needs no config and no daemon.
        Command::Policy {
            command: PolicyCommand::Init { vault, command },
        } => {
            return emit(&crate::policy_init::run(vault, command).await?);
        }
        _ => {}
    }
    let (config, socket) = client::target(args.config.as_deref(), args.socket.as_deref())?;
    match args.command {
        Command::Elicit(a) => elicit(&config, socket, a).await,
        Command::Approve(a) => crate::approve::approve(socket, a).await,
        Command::Decline(a) => crate::approve::decline(socket, a).await,
        Command::Grants { json } => crate::grants::list(socket, json).await,
        Command::Revoke { grant } => crate::grants::revoke(socket, grant).await,
        Command::Pending {
            vault, watch: true, ..
        } => crate::watch::pending_watch(socket, vault, config.approvals.listen.clone()).await,
        Command::Pending { vault, json, .. } => pending(socket, vault, json).await,
        Command::Watch { terminal } => {
            crate::watch::watch(socket, terminal, config.approvals.listen.clone()).await
        }
        Command::Events {
            follow,
            json,
            after,
            limit,
        } => events(socket, follow, json, after, limit).await,
        Command::Metrics => metrics(socket).await,
        Command::Status => status(socket).await,
        Command::RotateSecret => rotate(socket).await,
        Command::Enroll {
            command: EnrollCommand::Totp { user },
        } => crate::factor::enroll_totp(&socket, &user).await,
        Command::Unlock { user } => crate::factor::unlock(&socket, &user).await,
        Command::Policy {
            command: PolicyCommand::Check,
        } => policy_check(&config),
        Command::Page {
            request,
            print,
            remote: false,
        } => crate::page::open(socket, request, print).await,
        Command::Page { remote: true, .. } => crate::page::open_remote(socket).await,
        Command::Approvals {
            command: ApprovalsCommand::Open { print },
        } => crate::page::open(socket, None, print).await,
        Command::Passkey { command } => match command {
            PasskeyCommand::Add { user } => crate::page::passkey_add(socket, user).await,
            PasskeyCommand::List { json } => crate::page::passkey_list(socket, json).await,
            PasskeyCommand::Confirm { credential } => {
                crate::page::passkey_confirm(socket, credential).await
            }
            PasskeyCommand::Remove { credential } => {
                crate::page::passkey_remove(socket, credential).await
            }
        },
        Command::Token {
            command: crate::token::TokenCommand::Mint(a),
        } => crate::token::mint(&config, socket, a).await,
        Command::Completions { .. }
        | Command::Policy {
            command: PolicyCommand::Init { .. },
        } => {
            unreachable!("handled above")
        }
    }
}

fn check_hex(flag: &str, v: &str) -> Result<(), CliError> {
    if tc_core::hash::is_sha256_hex(v) {
        Ok(())
    } else {
        Err(CliError::new(
            exit::FAILURE,
            format!("{flag} must be the 64 hex digits from the refusal, got {v:?}"),
        ))
    }
}

async fn elicit(config: &Config, socket: Target, a: ElicitArgs) -> Result<(), CliError> {
    check_hex("--hash", &a.hash)?;
    if let Some(fp) = &a.state_fp {
        check_hex("--state-fp", fp)?;
    }
    let vault = vault_for(config, a.vault)?;
    let mut d = client::connect(&socket).await?;
    // Guarded mode (the daemon says so, not our config): the human's code, typed on the
    // controlling terminal, goes with the approval.
    let binding = v1::Binding {
        vault: vault.clone(),
        tool: a.tool.clone(),
        caller: a.caller.clone(),
        args_hash: a.hash.clone(),
    };
    let factor = if d.guarded() {
        crate::approve::confirm_for_elicit(&mut d, &socket.path, &binding).await?;
        Some(crate::factor::read_approval_code(&format!(
            "{} in vault {} for caller {} (args_hash {})",
            escape(&a.tool),
            escape(&vault),
            escape(&a.caller),
            escape(&a.hash)
        ))?)
    } else {
        None
    };
    let reply = d
        .client
        .mint(v1::MintRequest {
            binding: Some(binding),
            state_fp: a.state_fp,
            factor,
        })
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner();
    crate::print_token(
        &reply.token,
        "; nobody has it, so run the same tcctl elicit again",
    )
}

async fn pending(socket: Target, vault: Option<String>, json: bool) -> Result<(), CliError> {
    let mut d = client::connect(&socket).await?;
    let reqs = d
        .client
        .list_pending(v1::ListPendingRequest {
            vault: vault.unwrap_or_default(),
        })
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner()
        .requests;
    let mut out = String::new();
    if !json && reqs.is_empty() {
        let _ = writeln!(out, "nothing is waiting for confirmation");
    }
    for p in reqs {
        let b = p.binding.unwrap_or_default();
        if json {
            let line = serde_json::json!({
                "vault": b.vault, "tool": b.tool, "caller": b.caller, "args_hash": b.args_hash,
                "state_fp": p.state_fp, "summary": p.summary, "raised_at_ms": p.raised_at_ms,
                "expires_at_ms": p.expires_at_ms, "minted": p.minted,
                "request_id": p.request_id, "status": p.status,
                "raised_by_uid": (p.raised_by_uid != u32::MAX).then_some(p.raised_by_uid),
                "preview": p.preview,
            });
            let _ = writeln!(out, "{}", json_safe(&line.to_string()));
            continue;
        }
        let _ = writeln!(
            out,
            "[{}] {}{}",
            escape(&p.request_id),
            escape(&p.status),
            if p.status == "pending" {
                format!(
                    " · approve: tcctl approve {} · decline: tcctl decline {}",
                    escape(&p.request_id),
                    escape(&p.request_id)
                )
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "{}{} · vault {} · caller {} · raised {} · expires {}\n  {}\n  token route: tcctl elicit --hash {} --tool {} --vault {} --caller {} --state-fp {}\n",
            escape(&b.tool),
            if p.minted { " (token minted)" } else { "" },
            escape(&b.vault),
            escape(&b.caller),
            rfc3339(p.raised_at_ms),
            rfc3339(p.expires_at_ms),
            reescape(&p.summary),
            shell_word(&b.args_hash),
            shell_word(&b.tool),
            shell_word(&b.vault),
            shell_word(&b.caller),
            shell_word(&p.state_fp)
        );
    }
    emit(&out)
}

async fn events(
    socket: Target,
    follow: bool,
    json: bool,
    after: i64,
    limit: u32,
) -> Result<(), CliError> {
    let mut d = client::connect(&socket).await?;
    let mut stream = d
        .client
        .list_events(v1::ListEventsRequest {
            after_id: after,
            limit,
            follow,
        })
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner();
    while let Some(item) = stream.next().await {
        let e = item.map_err(|s| status_error(&socket.path, &s))?;
        let detail: serde_json::Value =
            serde_json::from_str(&e.detail_json).unwrap_or(serde_json::Value::Null);
        let line = if json {
            let line = serde_json::json!({
                "id": e.id, "at_ms": e.at_ms, "kind": e.kind, "vault": e.vault, "tool": e.tool,
                "caller": e.caller, "args_hash": e.args_hash, "state_fp": e.state_fp, "detail": detail,
            })
            .to_string();
            json_safe(&line).into_owned()
        } else {
            let mut s = format!("{:>6} {} {}", e.id, rfc3339(e.at_ms), escape(&e.kind));
            for (k, v) in [
                ("vault", &e.vault),
                ("tool", &e.tool),
                ("caller", &e.caller),
            ] {
                if !v.is_empty() {
                    s.push_str(&format!(" {k}={}", escape(v)));
                }
            }
            if !e.args_hash.is_empty() {
                s.push_str(&format!(
                    " args_hash={}",
                    escape(&e.args_hash.chars().take(12).collect::<String>())
                ));
            }
            if detail.as_object().is_some_and(|o| !o.is_empty()) {
                s.push_str(&format!(" {}", reescape(&detail.to_string())));
            }
            s
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
            return Ok(()); // stdout closed (e.g. piped into head)
        }
    }
    Ok(())
}

async fn metrics(socket: Target) -> Result<(), CliError> {
    let mut d = client::connect(&socket).await?;
    let counters = d
        .client
        .counters(v1::CountersRequest {})
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner()
        .counters;
    let st = d
        .client
        .status(v1::StatusRequest {})
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner();
    emit(&prometheus(&counters, &st))
}

/// Events the daemon's retention deleted from the audit log, by reason (`age`, `size`).
const PRUNED: &str = "tc_events_pruned_total";

/// Renders counters and status gauges in the Prometheus text exposition format.
pub fn prometheus(counters: &[v1::Counter], st: &v1::StatusReply) -> String {
    let mut out = String::new();
    let mut last = "";
    for c in counters {
        if c.name != last {
            out.push_str(&format!("# TYPE {} counter\n", c.name));
            last = &c.name;
        }
        if c.labels.is_empty() {
            out.push_str(&format!("{} {}\n", c.name, c.value));
        } else {
            out.push_str(&format!("{}{{{}}} {}\n", c.name, c.labels, c.value));
        }
    }
    if !counters
        .iter()
        .any(|c| c.name == "governor_truncations_total")
    {
        out.push_str("# TYPE governor_truncations_total counter\ngovernor_truncations_total 0\n");
    }
    if !counters.iter().any(|c| c.name == PRUNED) {
        out.push_str(&format!(
            "# TYPE {PRUNED} counter\n{PRUNED}{{reason=\"age\"}} 0\n{PRUNED}{{reason=\"size\"}} 0\n"
        ));
    }
    for (name, v) in [
        ("tc_pending_requests", st.pending_requests),
        ("tc_live_tokens", st.live_tokens),
        ("tc_uptime_seconds", st.uptime_seconds),
    ] {
        out.push_str(&format!("# TYPE {name} gauge\n{name} {v}\n"));
    }
    out
}

async fn status(socket: Target) -> Result<(), CliError> {
    let mut d = client::connect(&socket).await?;
    let s = d
        .client
        .status(v1::StatusRequest {})
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner();
    let pruned: u64 = d
        .client
        .counters(v1::CountersRequest {})
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner()
        .counters
        .iter()
        .filter(|c| c.name == PRUNED)
        .map(|c| c.value)
        .sum();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "tcd {} (protocol {}) running",
        escape(&s.version),
        s.protocol
    );
    let _ = writeln!(o, "mode:       {}", mode_line(&s.mode));
    let _ = writeln!(o, "socket:     {}", escape(&s.socket));
    let _ = writeln!(o, "cache dir:  {}", escape(&s.cache_dir));
    if !s.store.is_empty() && s.store != "sqlite" {
        let _ = writeln!(o, "store:      {}", escape(&s.store));
    }
    let _ = writeln!(
        o,
        "key:        {}{}",
        escape(&s.key_source),
        if s.ephemeral {
            " (nothing survives a restart)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "ttl:        {} s", s.elicit_ttl_seconds);
    let _ = writeln!(o, "uptime:     {} s", s.uptime_seconds);
    let _ = writeln!(
        o,
        "pending:    {} requests, {} live tokens, {} events ({pruned} pruned by retention)",
        s.pending_requests, s.live_tokens, s.events
    );
    if !s.remote_page_url.is_empty() {
        let _ = writeln!(o, "remote page: {}", escape(&s.remote_page_url));
        let _ = writeln!(
            o,
            "  certificate SHA-256: {}",
            escape(&s.remote_cert_sha256)
        );
        let _ = writeln!(
            o,
            "  public key SHA-256 (base64): {}",
            escape(&s.remote_spki_sha256)
        );
    }
    emit(&o)
}

/// The mode as `tcctl status` shows it: personal mode says what it does not stop.
pub fn mode_line(mode: &str) -> String {
    match mode {
        "personal" => "personal (tcd runs as you: an agent with a shell as your user can \
                       approve its own calls; guarded mode stops that, see the README)"
            .into(),
        "guarded" => "guarded (tcd runs as its own user; approvals need your factor)".into(),
        // An older tcd fills no mode.
        "" => "unknown (tcd did not say; an older tcd runs personal)".into(),
        other => escape(other).into_owned(),
    }
}

async fn rotate(socket: Target) -> Result<(), CliError> {
    let mut d = client::connect(&socket).await?;
    let r = d
        .client
        .rotate_secret(v1::RotateSecretRequest {})
        .await
        .map_err(|s| status_error(&socket.path, &s))?
        .into_inner();
    emit(&format!(
        "secret rotated: {} unspent token(s) voided; pending request states and cursors no longer verify \
         (clients are offered a fresh confirmation)\n",
        r.voided_tokens
    ))
}

fn describe(t: &Option<Targets>) -> String {
    match t {
        None => "NO TARGETS".into(),
        Some(Targets::None) => "none (arguments only)".into(),
        Some(Targets::Paths(p)) => format!("paths {}", p.join(", ")),
        Some(Targets::Tree { root, glob }) => format!("tree {root} {glob}"),
        Some(Targets::Matching { root, contains }) => {
            format!("matching under {root} containing {contains}")
        }
        Some(Targets::Git(a)) => format!("git {}", a.as_deref().unwrap_or("(vault root)")),
        Some(Targets::Probe { tool, .. }) => format!("probe {tool}"),
    }
}

fn policy_check(config: &Config) -> Result<(), CliError> {
    let src = config
        .source
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(defaults: no file)".into());
    let mut o = String::new();
    let _ = writeln!(o, "config {src}: valid");
    for v in &config.vaults {
        let _ = writeln!(o, "vault {} (root {})", v.id, v.root.display());
        if !v.root.is_dir() {
            let _ = writeln!(
                o,
                "  warning: root {} is not a directory here",
                v.root.display()
            );
        }
        if v.command.is_empty() {
            let _ = writeln!(
                o,
                "  note: no command; give it inline: tc-shim serve {} -- <server command>",
                v.id
            );
        }
        for g in &v.gates {
            let when = if g.when.is_some() {
                " (conditional)"
            } else {
                ""
            };
            let _ = writeln!(o, "  gate {}{when}: {}", g.tool, describe(&g.targets));
            let _ = writeln!(o, "    grants: {}", grant_rule(g));
        }
        for p in &v.paged {
            let _ = writeln!(o, "  paged {} over {}", p.tool, p.items);
        }
        let _ = writeln!(o, "  floors: tools the server marks destructiveHint: true are gated even if not listed here");
    }
    emit(&o)
}

/// A gate's grant rule in words (`tcctl approve --grant`).
fn grant_rule(g: &tc_core::config::Gate) -> String {
    if !g.grants {
        return "forbidden (grants = false): each call needs its own approval".into();
    }
    let uses = match g.max_grant_uses {
        Some(n) => format!(", at most {n} uses"),
        None => String::new(),
    };
    format!("allowed, at most {} s{uses}", g.grant_seconds_cap())
}

/// `v` as one shell word a person can paste: bare when it is plainly safe, else single
/// quoted (escaped for display too, so the line shows what it runs).
fn shell_word(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':' | '@' | ',')
        });
    if plain {
        v.to_string()
    } else {
        format!("'{}'", escape(&v.replace('\'', "'\\''")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_mode_and_personal_says_what_it_does_not_stop() {
        let p = mode_line("personal");
        assert!(
            p.starts_with("personal") && p.contains("approve its own"),
            "{p}"
        );
        assert!(mode_line("guarded").starts_with("guarded"));
        assert!(mode_line("").starts_with("unknown"));
    }

    #[test]
    fn prometheus_text_has_types_and_labels() {
        let c = vec![
            v1::Counter {
                name: "tc_events_total".into(),
                labels: "kind=\"a\"".into(),
                value: 2,
            },
            v1::Counter {
                name: "tc_events_total".into(),
                labels: "kind=\"b\"".into(),
                value: 1,
            },
        ];
        let t = prometheus(&c, &v1::StatusReply::default());
        assert_eq!(t.matches("# TYPE tc_events_total counter").count(), 1);
        assert!(t.contains("tc_events_total{kind=\"a\"} 2\n"));
        assert!(t.contains("governor_truncations_total 0\n"));
        assert!(t.contains("# TYPE tc_live_tokens gauge\ntc_live_tokens 0\n"));
    }
}
