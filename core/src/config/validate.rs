//! The rules serde cannot express, checked over a whole parsed [`Config`]: validation goes
//! on past a broken rule, so every problem found is reported, each at its key.

use std::collections::HashSet;

use super::findings::Findings;
use super::{
    Config, ConfigError, Gate, Preview, Problems, Targets, VaultConfig, MIN_EVENTS_MAX_BYTES,
};

impl Config {
    /// Checks every rule serde cannot express, and reports every one broken.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut found = Findings::default();
        self.check_daemon(&mut found);
        self.check_store(&mut found);
        self.check_notify(&mut found);
        let mut ids = HashSet::new();
        for (i, v) in self.vaults.iter().enumerate() {
            found.in_vault(&v.id);
            check_vault(&mut found, &format!("vaults[{i}]"), v, &mut ids);
        }
        let problems = found.into_problems();
        if problems.is_empty() {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            path: self.source.clone().unwrap_or_default(),
            problems: Problems(problems),
        })
    }

    /// `[daemon]` and `[governor]`.
    fn check_daemon(&self, found: &mut Findings) {
        let d = &self.daemon;
        for (key, ok, rule) in [
            (
                "elicit_ttl_seconds",
                d.elicit_ttl_seconds >= 1,
                "must be at least 1".to_string(),
            ),
            (
                "events_max_age_days",
                d.events_max_age_days >= 1,
                "must be at least 1".into(),
            ),
            (
                "events_max_bytes",
                d.events_max_bytes >= MIN_EVENTS_MAX_BYTES,
                format!("must be at least {MIN_EVENTS_MAX_BYTES}"),
            ),
            (
                "rate_limit_per_minute",
                d.rate_limit_per_minute >= 1,
                "must be at least 1".into(),
            ),
            (
                "rate_limit_burst",
                d.rate_limit_burst >= 1,
                "must be at least 1".into(),
            ),
        ] {
            found.require(ok, format!("daemon.{key}"), rule);
        }
        found.require(
            self.governor.max_response_bytes >= 1024,
            "governor.max_response_bytes",
            "must be at least 1024",
        );
        if let Some(Err(errs)) = self.approvals.remote.as_ref().map(|r| r.spec()) {
            for (key, why) in errs {
                found.add(format!("approvals.remote.{key}"), why);
            }
        }
    }
}

/// One `[[vaults]]` table at `at` (`vaults[i]`); `ids` are the ids seen before it.
fn check_vault<'a>(found: &mut Findings, at: &str, v: &'a VaultConfig, ids: &mut HashSet<&'a str>) {
    let id_ok = !v.id.is_empty()
        && v.id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !id_ok {
        found.add(format!("{at}.id"), "must be non-empty [A-Za-z0-9._-]");
    } else if !ids.insert(v.id.as_str()) {
        found.add(format!("{at}.id"), format!("duplicate vault id {:?}", v.id));
    }
    found.require(
        (v.url.is_some() && !v.has_root()) || v.root.is_absolute(),
        format!("{at}.root"),
        "must be an absolute path",
    );
    super::remote::check_remote(found, at, v);
    found.require(
        v.max_target_files >= 1,
        format!("{at}.max_target_files"),
        "must be at least 1",
    );
    let mut tools = HashSet::new();
    for (j, g) in v.gates.iter().enumerate() {
        found.in_gate(Some(&g.tool));
        let key = format!("{at}.gates[{j}]");
        if !tools.insert(g.tool.as_str()) {
            found.add(
                format!("{key}.tool"),
                format!("tool {:?} is gated twice", g.tool),
            );
        }
        check_gate(found, &key, g);
    }
    found.in_gate(None);
    check_arguments(found, at, v);
    check_acl_and_http(found, at, v);
}

/// A gate's targets and preview.
fn check_gate(found: &mut Findings, key: &str, g: &Gate) {
    match &g.targets {
        None => found.add(
            format!("{key}.targets"),
            format!(
                "gate for tool {:?} declares no targets; every gate must say what its \
                 confirmation is bound to (write targets = \"none\" to bind on arguments alone)",
                g.tool
            ),
        ),
        Some(Targets::Paths(p)) if p.is_empty() => {
            found.add(format!("{key}.targets.paths"), "lists no argument")
        }
        Some(Targets::Tree { glob, .. }) => {
            if let Err(e) = globset::Glob::new(glob) {
                found.add(format!("{key}.targets.tree.glob"), e.to_string());
            }
        }
        Some(Targets::Probe { arguments, .. }) if !arguments.is_object() => {
            found.add(format!("{key}.targets.probe.arguments"), "must be a table")
        }
        _ => {}
    }
    if g.max_grant_seconds == Some(0) || g.max_grant_uses == Some(0) {
        found.add(
            format!("{key}.max_grant_seconds"),
            "max_grant_seconds and max_grant_uses must be at least 1 (write grants = false to forbid grants)",
        );
    }
    if let Some(Preview::Diff(d)) = &g.preview {
        if d.path.is_empty() || d.content.is_empty() || d.path == d.content {
            found.add(
                format!("{key}.preview.diff"),
                "must name two different arguments: path (the file) and content (what is written)",
            );
        }
    }
}

/// `[[vaults.paged]]` and `[[vaults.paths]]`: the arguments they name.
fn check_arguments(found: &mut Findings, at: &str, v: &VaultConfig) {
    for (j, p) in v.paged.iter().enumerate() {
        found.require(
            !p.items.is_empty(),
            format!("{at}.paged[{j}].items"),
            "must name an argument",
        );
    }
    let mut declared = HashSet::new();
    for (j, p) in v.paths.iter().enumerate() {
        let key = format!("{at}.paths[{j}]");
        if p.args.is_empty() || p.args.iter().any(String::is_empty) {
            found.add(format!("{key}.args"), "must name one argument or more");
        }
        // Each argument declared twice is one problem (not one per later declaration).
        let mut twice = HashSet::new();
        for a in &p.args {
            if !a.is_empty()
                && !declared.insert((p.tool.as_str(), a.as_str()))
                && twice.insert(a.as_str())
            {
                found.add(
                    format!("{key}.args"),
                    format!("argument {a:?} of tool {:?} is declared twice", p.tool),
                );
            }
        }
        found.require(
            p.repo.as_deref() != Some(""),
            format!("{key}.repo"),
            "must name an argument",
        );
    }
}

/// `[vaults.acl]`'s globs and `[vaults.http]` with its `auth`.
fn check_acl_and_http(found: &mut Findings, at: &str, v: &VaultConfig) {
    for (list, globs) in [("deny", &v.acl.deny), ("read_only", &v.acl.read_only)] {
        for (j, g) in globs.iter().enumerate() {
            if let Err(e) = globset::Glob::new(g) {
                found.add(format!("{at}.acl.{list}[{j}]"), e.to_string());
            }
        }
    }
    if let Some(h) = &v.http {
        for (k, why) in h.check() {
            found.add(format!("{at}.http.{k}"), why);
        }
        for (k, why) in h.auth.check(h.listen.as_deref()) {
            found.add(format!("{at}.http.auth.{k}"), why);
        }
    }
}
