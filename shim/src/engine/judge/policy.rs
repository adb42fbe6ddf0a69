//! The vault's policy as the shim applies it: which gate applies to a call (`when`),
//! floors from `destructiveHint`, path arguments resolved under the root, and the ACL.

mod discover;
pub mod gitspec;
mod grant_paths;
mod judge;
mod prejson;
mod resolve;
#[cfg(test)]
pub(in crate::engine) mod tests;
mod when;

pub use discover::{ArgSpec, PATHLIKE};
pub use resolve::NameError;

use crate::wire::value::at;
use resolve::real_path;
use std::path::PathBuf;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;
use tc_core::config::{ArgKind, Gate, PathArgs, VaultConfig};

/// Why a call was refused by policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("argument {arg:?}: {why}")]
    InvalidInput { arg: String, why: String },
    /// A path argument's name cannot be matched to one entry (told like `InvalidInput`).
    #[error("argument {arg:?}: {why}")]
    Name { arg: String, why: NameError },
    #[error("path {path} is denied by the vault ACL ({list} {glob})")]
    Acl {
        path: String,
        list: &'static str,
        glob: String,
    },
    #[error("bad ACL glob: {0}")]
    Glob(#[from] globset::Error),
    /// The vault has an ACL and this argument names files in a way it cannot judge.
    #[error("argument {arg:?} cannot be judged by the vault ACL: {why}")]
    Unjudged { arg: String, why: String },
}

/// The compiled policy of one vault.
#[derive(Debug)]
pub struct Policy {
    pub vault: String,
    pub root: PathBuf,
    canon_root: PathBuf,
    pub gates: Vec<Gate>,
    /// `legacy_elicitation_shim`: the shim itself prompts legacy clients that can.
    pub legacy_elicitation: bool,
    /// `lean`: the facade (`list_capabilities` + `call_capability`) replaces the tool list.
    pub lean: bool,
    deny: (GlobSet, Vec<String>),
    read_only: (GlobSet, Vec<String>),
    /// Whether `deny` or `read_only` lists anything.
    has_acl: bool,
    /// `[[vaults.paths]]`.
    decls: Vec<PathArgs>,
    /// `max_target_files`: most entries a `tree`/`matching` target walks.
    pub max_target_files: usize,
    /// This vault's stat cache of content hashes, for every target fingerprint.
    pub fp_cache: crate::engine::judge::targets::cache::Cache,
}

/// Compiles ACL globs; the second half maps each compiled glob back to the one written.
/// `dir/**` also covers `dir` itself: denying a folder's contents while listing it
/// would show what it holds.
fn compile(globs: &[String]) -> Result<(GlobSet, Vec<String>), PolicyError> {
    let mut b = GlobSetBuilder::new();
    let mut written = Vec::new();
    for g in globs {
        b.add(Glob::new(g)?);
        written.push(g.clone());
        if let Some(dir) = g.strip_suffix("/**").filter(|d| !d.is_empty()) {
            b.add(Glob::new(dir)?);
            written.push(g.clone());
        }
    }
    Ok((b.build()?, written))
}

/// Strings of an argument that may be a string or an array of strings.
pub fn arg_strings(args: &Value, name: &str) -> Vec<String> {
    match args.get(name) {
        Some(Value::String(s)) => with_embedded(s),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// A string argument and, when it holds a JSON array of strings, its items: a Python
/// SDK server reads it as that array (`prejson.rs`).
fn with_embedded(s: &str) -> Vec<String> {
    let mut out = vec![s.to_string()];
    if let prejson::Embedded::Strings(items) = prejson::embedded(s) {
        out.extend(items);
    }
    out
}

impl Policy {
    /// Compiles the vault's gates and ACL.
    pub fn new(v: &VaultConfig) -> Result<Policy, PolicyError> {
        let canon_root = std::fs::canonicalize(&v.root).unwrap_or_else(|_| v.root.clone());
        Ok(Policy {
            vault: v.id.clone(),
            root: v.root.clone(),
            canon_root,
            gates: v.gates.clone(),
            legacy_elicitation: v.legacy_elicitation_shim,
            lean: v.lean,
            deny: compile(&v.acl.deny)?,
            read_only: compile(&v.acl.read_only)?,
            has_acl: !(v.acl.deny.is_empty() && v.acl.read_only.is_empty()),
            decls: v.paths.clone(),
            max_target_files: v.max_target_files,
            fp_cache: crate::engine::judge::targets::cache::Cache::new(v.max_target_files),
        })
    }

    /// The gate entry for a tool, applying or not.
    pub fn gate_entry(&self, tool: &str) -> Option<&Gate> {
        self.gates.iter().find(|g| g.tool == tool)
    }

    /// The arguments of this call that name files: those [`discover::discover`] finds
    /// (config, known servers, the tool's schema, the usual names), plus every name the
    /// gate refers to (read as a path).
    pub fn path_args(&self, tool: &str, def: Option<&Value>, gate: Option<&Gate>) -> Vec<ArgSpec> {
        self.with_gate_args(&self.discover_args(tool, def), gate)
            .into_owned()
    }

    /// The arguments of `tool` that name files by [`discover::discover`]: what
    /// [`Policy::path_args`] finds before the gate's names. Depends only on the policy and
    /// the definition, so the gate computes it once per definition (`gate/tools.rs`).
    pub fn discover_args(&self, tool: &str, def: Option<&Value>) -> Vec<ArgSpec> {
        // A remote vault without a local root: the server's paths are not ours to judge.
        if self.root.as_os_str().is_empty() {
            Vec::new()
        } else {
            discover::discover(&self.decls, tool, def)
        }
    }

    /// [`Policy::path_args`] from the discovered arguments: plus every name the gate refers
    /// to (read as a path); borrowed when there is no gate entry.
    pub fn with_gate_args<'a>(
        &self,
        discovered: &'a [ArgSpec],
        gate: Option<&Gate>,
    ) -> std::borrow::Cow<'a, [ArgSpec]> {
        let Some(g) = gate else {
            return std::borrow::Cow::Borrowed(discovered);
        };
        let mut specs = discovered.to_vec();
        let names = g.path_args();
        for name in names {
            let spec = ArgSpec {
                name,
                kind: ArgKind::Path,
                repo: None,
            };
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
        std::borrow::Cow::Owned(specs)
    }

    /// Resolves every argument of a call that names files, refusing escapes (and, under
    /// an ACL, what cannot be judged): the paths [`Policy::check_acl`] is to judge.
    #[cfg(test)]
    pub fn resolve_all(
        &self,
        tool: &str,
        def: Option<&Value>,
        args: &Value,
        gate: Option<&Gate>,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        self.resolve_discovered(&self.discover_args(tool, def), args, gate)
    }

    /// [`Policy::resolve_all`] from the tool's [`Policy::discover_args`] (which the gate
    /// keeps per tool definition).
    pub fn resolve_discovered(
        &self,
        discovered: &[ArgSpec],
        args: &Value,
        gate: Option<&Gate>,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        self.resolve_specs(&self.with_gate_args(discovered, gate), args)
    }

    /// [`Policy::resolve_all`] over the given argument specs.
    pub fn resolve_specs(
        &self,
        specs: &[ArgSpec],
        args: &Value,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        let mut out = Vec::new();
        for spec in specs {
            self.judge_arg(args, spec, &mut out)?;
        }
        Ok(out)
    }

    /// The ACL: `deny` always, `read_only` unless the tool is read-only. Each path is
    /// judged as written and where it really leads: a symlink inside the root must not
    /// be a way around `deny = ["private/**"]`.
    pub fn check_acl(&self, paths: &[PathBuf], tool_read_only: bool) -> Result<(), PolicyError> {
        for p in paths {
            let real = real_path(p);
            let real_rel = real
                .as_deref()
                .and_then(|r| r.strip_prefix(&self.canon_root).ok());
            for rel in std::iter::once(self.relative(p)).chain(real_rel) {
                for (list, (set, globs)) in [("deny", &self.deny), ("read_only", &self.read_only)] {
                    if list == "read_only" && tool_read_only {
                        continue;
                    }
                    if let Some(i) = set.matches(rel).first() {
                        return Err(PolicyError::Acl {
                            path: rel.display().to_string(),
                            list,
                            glob: globs[*i].clone(),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// True when a tool definition explicitly says `destructiveHint: true` (the floor).
pub fn is_floor(def: Option<&Value>) -> bool {
    def.and_then(|d| at(d, &["annotations", "destructiveHint"])) == Some(&Value::Bool(true))
}

/// True when a tool definition says `readOnlyHint: true`.
pub fn is_read_only(def: Option<&Value>) -> bool {
    def.and_then(|d| at(d, &["annotations", "readOnlyHint"])) == Some(&Value::Bool(true))
}

/// The config entry to add for a floor tool that has none.
pub fn missing_gate_hint(tool: &str, def: Option<&Value>) -> String {
    let props: Vec<String> = def
        .and_then(|d| at(d, &["inputSchema", "properties"]))
        .and_then(Value::as_object)
        .map(|m| {
            m.keys()
                .filter(|k| PATHLIKE.contains(&k.as_str()))
                .map(|k| format!("{k:?}"))
                .collect()
        })
        .unwrap_or_default();
    let targets = if props.is_empty() {
        "\"none\"".to_string()
    } else {
        format!("{{ paths = [{}] }}", props.join(", "))
    };
    format!("[[vaults.gates]] tool = \"{tool}\" targets = {targets}")
}
