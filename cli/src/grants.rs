//! Grants from the terminal: the `--grant` flags of `tcctl approve` (what similar calls
//! the approval also lets through, and for how long), `tcctl grants` and `tcctl revoke`.

use std::fmt::Write as _;

use clap::Args;
use tc_core::display::{escape, json_safe};
use tc_proto::v1;

use crate::client::{self, status_error, Target};
use crate::output::rfc3339;
use crate::CliError;

/// The grant flags of `tcctl approve`.
#[derive(Debug, Clone, Default, Args)]
pub struct GrantArgs {
    /// With the approval, let similar calls through without asking: same vault, caller
    /// and tool, every argument as approved except those widened below.
    #[arg(long)]
    pub grant: bool,
    /// How long the grant lasts (default 15m; at most the gate's max_grant_seconds).
    #[arg(long = "for", value_name = "DURATION", value_parser = crate::token::parse_ttl, requires = "grant")]
    pub duration: Option<u64>,
    /// How many calls it lets through (default: no count, only the time).
    #[arg(long, value_name = "N", requires = "grant")]
    pub uses: Option<u32>,
    /// ARG=GLOB: the file argument ARG may name any path under the vault root matching
    /// GLOB, judged where it really leads (`*` within a folder, `**` across). Repeatable.
    #[arg(long = "path", value_name = "ARG=GLOB", value_parser = arg_glob, requires = "grant")]
    pub paths: Vec<(String, String)>,
    /// ARG: the argument ARG may take any value. Repeatable.
    #[arg(long = "any", value_name = "ARG", requires = "grant")]
    pub any: Vec<String>,
}

fn arg_glob(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((a, g)) if !a.is_empty() && !g.is_empty() => Ok((a.to_string(), g.to_string())),
        _ => Err(format!("{s:?}: write ARG=GLOB, e.g. path=notes/**")),
    }
}

impl GrantArgs {
    /// The scope to send with the approval, if a grant was asked for.
    pub fn scope(&self) -> Option<v1::GrantScope> {
        self.grant.then(|| v1::GrantScope {
            seconds: self.duration.unwrap_or(0),
            uses: self.uses.unwrap_or(0),
            globs: self.paths.iter().cloned().collect(),
            any: self.any.clone(),
        })
    }

    /// What the human confirms besides the call, in words.
    pub fn describe(&self, p: &v1::PendingRequest) -> String {
        let b = p.binding.clone().unwrap_or_default();
        let secs = self.duration.unwrap_or(tc_core::grant::DEFAULT_SECONDS);
        let mut s = format!(
            "and for {} let through, without asking, calls of {} in vault {} by caller {}",
            span(secs),
            escape(&b.tool),
            escape(&b.vault),
            escape(&b.caller)
        );
        if let Some(n) = self.uses {
            let _ = write!(s, " (at most {n})");
        }
        let mut widened: Vec<String> = self
            .paths
            .iter()
            .map(|(a, g)| format!("{} under {}", escape(a), escape(g)))
            .collect();
        widened.extend(self.any.iter().map(|a| format!("{}: any value", escape(a))));
        if widened.is_empty() {
            s.push_str(" with exactly these arguments");
        } else {
            let _ = write!(
                s,
                " with {}, every other argument as shown",
                widened.join(", ")
            );
        }
        s
    }
}

fn span(secs: u64) -> String {
    match secs {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// `tcctl grants`: live grants and those that ended within a day.
pub async fn list(target: Target, json: bool) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let grants = d
        .client
        .list_grants(v1::ListGrantsRequest {})
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner()
        .grants;
    let mut out = String::new();
    if grants.is_empty() && !json {
        out.push_str("no grants\n");
    }
    for g in &grants {
        if json {
            out.push_str(&json_line(g));
        } else {
            out.push_str(&text(g));
        }
        out.push('\n');
    }
    crate::output::emit(&out)
}

fn text(g: &v1::Grant) -> String {
    let uses = match g.uses_left {
        -1 => "no use count".to_string(),
        n => format!("{n} use(s) left"),
    };
    let last = match g.last_used_at_ms {
        0 => "never used".to_string(),
        t => format!("{} use(s), last {}", g.used, rfc3339(t)),
    };
    format!(
        "{}  {}  {} in vault {} by {}\n  scope: {}\n  until {}; {uses}; {last}; given with request {}",
        escape(&g.id),
        escape(&g.status),
        escape(&g.tool),
        escape(&g.vault),
        escape(&g.caller),
        escape(&g.scope),
        rfc3339(g.expires_at_ms),
        escape(&g.request_id),
    )
}

fn json_line(g: &v1::Grant) -> String {
    let scope: serde_json::Value = serde_json::from_str(&g.scope_json).unwrap_or_default();
    let line = serde_json::json!({
        "id": g.id, "status": g.status, "vault": g.vault, "tool": g.tool, "caller": g.caller,
        "scope": g.scope, "scope_json": scope, "given_at_ms": g.given_at_ms,
        "expires_at_ms": g.expires_at_ms,
        "uses_left": (g.uses_left >= 0).then_some(g.uses_left), "used": g.used,
        "last_used_at_ms": (g.last_used_at_ms > 0).then_some(g.last_used_at_ms),
        "revoked_at_ms": (g.revoked_at_ms > 0).then_some(g.revoked_at_ms),
        "request_id": g.request_id,
    });
    json_safe(&line.to_string()).into_owned()
}

/// `tcctl revoke GRANT`: the next call it would have covered asks a human again.
pub async fn revoke(target: Target, id: String) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    d.client
        .revoke_grant(v1::RevokeGrantRequest {
            grant_id: id.clone(),
        })
        .await
        .map_err(|s| status_error(&target.path, &s))?;
    eprintln!(
        "revoked {}: the next call it would have let through asks a human",
        escape(&id)
    );
    Ok(())
}
