//! The vault's policy as the shim applies it: which gate applies to a call (`when`),
//! floors from `destructiveHint`, path arguments resolved under the root, and the ACL.

mod discover;
pub mod gitspec;
mod judge;
mod prejson;

pub use discover::{ArgSpec, PATHLIKE};

use crate::wire::value::at;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;
use tc_core::config::{ArgKind, Gate, PathArgs, Targets, VaultConfig};
use unicode_normalization::UnicodeNormalization;

/// Why a call was refused by policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("argument {arg:?}: {why}")]
    InvalidInput { arg: String, why: String },
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

/// JSON equality for `when.equals`, except that numbers compare by value (`1.0` is `1`):
/// a client choosing another spelling of the same number must not escape a gate.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn nfc(s: &OsStr) -> Option<String> {
    s.to_str().map(|s| s.nfc().collect())
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
        let mut names = Vec::new();
        if let Some(w) = &g.when {
            if let Some(cf) = &w.cross_folder {
                names.extend(cf.iter().cloned());
            }
            if let Some(e) = &w.exists {
                names.push(e.clone());
            }
        }
        match &g.targets {
            Some(Targets::Paths(p)) => names.extend(p.iter().cloned()),
            Some(Targets::Tree { root, .. }) | Some(Targets::Matching { root, .. }) => {
                names.push(root.clone())
            }
            Some(Targets::Git(Some(a))) => names.push(a.clone()),
            _ => {}
        }
        if let Some(tc_core::config::Preview::Diff(d)) = &g.preview {
            names.push(d.path.clone());
        }
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

    /// Resolves one path argument under the root: relative → root-joined; `..`, absolute
    /// elsewhere or a symlink out of the root is refused.
    pub fn resolve(&self, arg: &str, raw: &str) -> Result<PathBuf, PolicyError> {
        let bad = |why: String| PolicyError::InvalidInput {
            arg: arg.into(),
            why,
        };
        if raw.contains('\0') {
            return Err(bad("contains a NUL byte".into()));
        }
        let p = Path::new(raw);
        // server-filesystem expands a leading `~`; judging `<root>/~/x` instead would
        // gate, ACL-check and fingerprint a path the server never touches.
        let home = p.components().next().is_some_and(
            |c| matches!(c, Component::Normal(n) if n.as_encoded_bytes().starts_with(b"~")),
        );
        if home {
            return Err(bad(format!(
                "{raw:?} starts with `~`: tc does not expand home directories; give the path \
                 relative to the vault root (or absolute under it)"
            )));
        }
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(bad(format!(
                "{raw:?} contains `..`; paths must stay under the vault root"
            )));
        }
        let joined = if p.is_absolute() {
            p.to_path_buf()
        } else if self.root.as_os_str().is_empty() {
            // No local root (a remote vault): only an absolute local path means anything.
            return Err(bad(format!(
                "{raw:?} is not an absolute path, and this vault has no local root"
            )));
        } else {
            self.root.join(p)
        };
        let norm: PathBuf = joined
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect();
        let under_root = norm.starts_with(&self.root) || norm.starts_with(&self.canon_root);
        if !under_root {
            return Err(bad(format!(
                "{raw:?} is outside the vault root {}",
                self.root.display()
            )));
        }
        let norm = self.real_names(norm).map_err(bad)?;
        // Symlinks: the longest existing ancestor must canonicalize under the root.
        match real_path(&norm) {
            Some(real) if !real.starts_with(&self.canon_root) => {
                return Err(bad(format!(
                    "{raw:?} leaves the vault root through a symlink"
                )))
            }
            Some(_) => {}
            None => return Err(bad(format!("{raw:?} goes through a symlink loop"))),
        }
        Ok(norm)
    }

    /// Replaces each name that does not exist byte-for-byte by the one existing entry of
    /// its folder equal to it under Unicode NFC, as server-filesystem does: otherwise
    /// the NFD spelling of an existing file would be judged new. Several → ambiguous.
    fn real_names(&self, norm: PathBuf) -> Result<PathBuf, String> {
        let base = if norm.starts_with(&self.root) {
            &self.root
        } else {
            &self.canon_root
        };
        let Ok(rest) = norm.strip_prefix(base) else {
            return Ok(norm);
        };
        let mut out = base.clone();
        let mut comps = rest.components();
        for c in comps.by_ref() {
            let name = c.as_os_str();
            let direct = out.join(name);
            if std::fs::symlink_metadata(&direct).is_ok() {
                out = direct;
                continue;
            }
            let Some(want) = nfc(name) else {
                out = direct;
                break;
            };
            let found: Vec<_> = match std::fs::read_dir(&out) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok().map(|e| e.file_name()))
                    .filter(|n| nfc(n).as_deref() == Some(want.as_str()))
                    .collect(),
                Err(_) => Vec::new(),
            };
            match found.as_slice() {
                [one] => out.push(one),
                [] => {
                    out = direct;
                    break;
                }
                many => {
                    let names: Vec<_> = many.iter().map(|n| n.to_string_lossy()).collect();
                    return Err(format!(
                        "{name:?} is ambiguous in {}: several entries are the same name \
                         under Unicode normalization ({}); use the exact name",
                        self.relative(&out).display(),
                        names.join(", ")
                    ));
                }
            }
        }
        out.extend(comps);
        Ok(out)
    }

    /// The root `p` is written under (as configured, or canonical).
    pub fn base_of(&self, p: &Path) -> &Path {
        if p.starts_with(&self.root) {
            &self.root
        } else {
            &self.canon_root
        }
    }

    /// The path relative to the root (for ACL globs and fingerprints).
    pub fn relative<'a>(&self, p: &'a Path) -> &'a Path {
        p.strip_prefix(&self.root)
            .or_else(|_| p.strip_prefix(&self.canon_root))
            .unwrap_or(p)
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

    /// Whether the gate applies to these arguments (`when`, all given conditions must hold).
    /// Array arguments count every element, not just the first. Each path is judged as
    /// written and where it really leads (the server acts on the latter), and a condition
    /// holds if it holds for either: a link must not move a call out of its gate.
    pub fn applies(&self, gate: &Gate, args: &Value) -> Result<bool, PolicyError> {
        let Some(w) = &gate.when else { return Ok(true) };
        if let Some([a, b]) = &w.cross_folder {
            let paths = |name: &str| self.paths(args, name);
            let (pa, pb) = (paths(a)?, paths(b)?);
            let differ = |view: &dyn Fn(&Path) -> PathBuf| {
                let folders = |ps: &[PathBuf]| -> Vec<PathBuf> {
                    ps.iter()
                        .map(|p| view(p).parent().map(Path::to_path_buf).unwrap_or_default())
                        .collect()
                };
                let (fa, fb) = (folders(&pa), folders(&pb));
                // One side given and not the other counts as a difference (as before).
                fa.is_empty() != fb.is_empty() || {
                    let all: Vec<_> = fa.iter().chain(&fb).collect();
                    all.iter().any(|f| *f != all[0])
                }
            };
            let written = |p: &Path| self.relative(p).to_path_buf();
            if !differ(&written) && !differ(&|p: &Path| self.real_relative(p)) {
                return Ok(false);
            }
        }
        if let Some(e) = &w.exists {
            let paths = self.paths(args, e)?;
            let exists = |p: &PathBuf| {
                std::fs::symlink_metadata(p).is_ok()
                    || real_path(p).is_some_and(|r| std::fs::symlink_metadata(r).is_ok())
            };
            if !paths.iter().any(exists) {
                return Ok(false);
            }
        }
        if let Some(eq) = &w.equals {
            let hit = args
                .get(&eq.arg)
                .is_some_and(|v| json_eq(v, &eq.value) || self.same_path(&eq.arg, v, &eq.value));
            if !hit {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Where a path under the root really leads, relative to the root (as written when
    /// that cannot be known).
    pub(in crate::engine) fn real_relative(&self, p: &Path) -> PathBuf {
        real_path(p)
            .and_then(|r| r.strip_prefix(&self.canon_root).ok().map(Path::to_path_buf))
            .unwrap_or_else(|| self.relative(p).to_path_buf())
    }

    /// `when.equals` on a path: the argument names the value's path, as written
    /// (`./a`, `a//b`) or through a link. Only widens the condition (fails toward gating).
    fn same_path(&self, arg: &str, v: &Value, value: &Value) -> bool {
        let (Some(raw), Some(want)) = (v.as_str(), value.as_str()) else {
            return false;
        };
        let (Ok(p), Ok(w)) = (self.resolve(arg, raw), self.resolve(arg, want)) else {
            return false;
        };
        let w_rel = self.relative(&w).to_path_buf();
        [self.relative(&p).to_path_buf(), self.real_relative(&p)]
            .iter()
            .any(|r| *r == w_rel || *r == self.real_relative(&w))
    }

    /// Every element of a path argument, resolved (an escape anywhere is refused).
    fn paths(&self, args: &Value, name: &str) -> Result<Vec<PathBuf>, PolicyError> {
        arg_strings(args, name)
            .iter()
            .map(|raw| self.resolve(name, raw))
            .collect()
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

/// Where a path really leads: its longest existing ancestor canonicalized, plus the
/// rest as written. A dangling symlink on the way is followed too (a write through it
/// creates its target). None: nothing of it exists, not even `/`, or symlinks loop.
fn real_path(p: &Path) -> Option<PathBuf> {
    real_path_hops(p, 0)
}

fn real_path_hops(p: &Path, hops: u32) -> Option<PathBuf> {
    if hops > 40 {
        return None;
    }
    let mut probe = p;
    loop {
        if let Ok(c) = std::fs::canonicalize(probe) {
            return Some(match p.strip_prefix(probe) {
                Ok(rest) if !rest.as_os_str().is_empty() => c.join(rest),
                _ => c,
            });
        }
        // canonicalize fails on a symlink whose target does not exist yet.
        if let Ok(target) = std::fs::read_link(probe) {
            let base = probe.parent().unwrap_or(Path::new("/"));
            let mut next = lexical(&base.join(target));
            if let Ok(rest) = p.strip_prefix(probe) {
                if !rest.as_os_str().is_empty() {
                    next = lexical(&next.join(rest));
                }
            }
            return real_path_hops(&next, hops + 1);
        }
        probe = probe.parent()?;
    }
}

/// `p` with `.` dropped and `..` applied to the part before it, as a server's
/// `path.resolve` reads a path that does not exist yet.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
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

#[cfg(test)]
pub(in crate::engine) mod tests {
    use super::*;
    use serde_json::json;

    /// A policy for one vault `v` at `root`, `extra` added to its table.
    pub(in crate::engine) fn policy(root: &Path, extra: &str) -> Policy {
        let text = format!(
            "[[vaults]]\nid = \"v\"\nroot = \"{}\"\n{extra}",
            root.display()
        );
        let c = tc_core::Config::parse(&text, Path::new("/t.toml")).unwrap();
        Policy::new(&c.vaults[0]).unwrap()
    }

    #[test]
    fn a_rootless_remote_vault_discovers_no_paths_and_takes_only_absolute_ones() {
        let text = "[[vaults]]\nid = \"r\"\nurl = \"https://h/mcp\"\n[[vaults.gates]]\n\
                    tool = \"commit\"\ntargets = { git = \"repo_path\" }\n";
        let c = tc_core::Config::parse(text, Path::new("/t.toml")).unwrap();
        let p = Policy::new(&c.vaults[0]).unwrap();
        let def =
            json!({"name": "read", "inputSchema": {"properties": {"path": {"type": "string"}}}});
        assert!(
            p.path_args("read", Some(&def), None).is_empty(),
            "the server's paths are not ours"
        );
        let specs = p.path_args("commit", None, p.gate_entry("commit"));
        assert_eq!(
            specs.len(),
            1,
            "the git target's argument is still a local path"
        );
        assert!(p.resolve("repo_path", "relative/repo").is_err());
        assert!(p.resolve("repo_path", "/srv/../etc").is_err());
        assert_eq!(
            p.resolve("repo_path", "/srv/repo").unwrap(),
            Path::new("/srv/repo")
        );
    }

    #[test]
    fn resolves_and_refuses_escapes() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let p = policy(&root, "");
        assert_eq!(p.resolve("path", "a/b.txt").unwrap(), root.join("a/b.txt"));
        assert_eq!(
            p.resolve("path", root.join("x").to_str().unwrap()).unwrap(),
            root.join("x")
        );
        assert!(matches!(
            p.resolve("path", "../x"),
            Err(PolicyError::InvalidInput { .. })
        ));
        assert!(p.resolve("path", "/etc/passwd").is_err());
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        assert!(p.resolve("path", "out/passwd").is_err());
    }

    #[test]
    fn when_conditions_and_acl() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::write(root.join("here.txt"), "x").unwrap();
        let p = policy(
            &root,
            "[[vaults.gates]]\ntool = \"move_file\"\nwhen = { cross_folder = [\"source\", \"destination\"] }\ntargets = { paths = [\"source\", \"destination\"] }\n\
             [[vaults.gates]]\ntool = \"write_file\"\nwhen = { exists = \"path\" }\ntargets = { paths = [\"path\"] }\n\
             [[vaults.gates]]\ntool = \"run\"\nwhen = { equals = { arg = \"mode\", value = \"force\" } }\ntargets = \"none\"\n\
             [vaults.acl]\ndeny = [\"private/**\"]\nread_only = [\"ro/**\"]\n",
        );
        let mv = p.gate_entry("move_file").unwrap();
        assert!(!p
            .applies(mv, &json!({"source": "a/x", "destination": "a/y"}))
            .unwrap());
        assert!(p
            .applies(mv, &json!({"source": "a/x", "destination": "b/x"}))
            .unwrap());
        let wf = p.gate_entry("write_file").unwrap();
        assert!(p.applies(wf, &json!({"path": "here.txt"})).unwrap());
        assert!(!p.applies(wf, &json!({"path": "new.txt"})).unwrap());
        let run = p.gate_entry("run").unwrap();
        assert!(p.applies(run, &json!({"mode": "force"})).unwrap());
        assert!(!p.applies(run, &json!({"mode": "soft"})).unwrap());
        let paths = p
            .resolve_all("t", None, &json!({"path": "private/k"}), None)
            .unwrap();
        assert!(matches!(
            p.check_acl(&paths, true),
            Err(PolicyError::Acl { list: "deny", .. })
        ));
        let paths = p
            .resolve_all("t", None, &json!({"path": "ro/k"}), None)
            .unwrap();
        assert!(p.check_acl(&paths, true).is_ok());
        assert!(p.check_acl(&paths, false).is_err());
    }

    /// `a/link.md -> ../b/report.md`: moving the link within `a` moves `b/report.md`
    /// out of `b`; `when` is judged where the path leads too.
    #[test]
    fn when_conditions_see_through_links() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        std::fs::write(root.join("b/report.md"), "r").unwrap();
        std::os::unix::fs::symlink("../b/report.md", root.join("a/link.md")).unwrap();
        std::os::unix::fs::symlink("b", root.join("bee")).unwrap();
        let p = policy(
            &root,
            "[[vaults.gates]]\ntool = \"mv\"\nwhen = { cross_folder = [\"source\", \"destination\"] }\ntargets = { paths = [\"source\", \"destination\"] }\n\
             [[vaults.gates]]\ntool = \"wf\"\nwhen = { equals = { arg = \"path\", value = \"b/report.md\" } }\ntargets = { paths = [\"path\"] }\n",
        );
        let mv = p.gate_entry("mv").unwrap();
        assert!(p
            .applies(
                mv,
                &json!({"source": "a/link.md", "destination": "a/report.md"})
            )
            .unwrap());
        // A folder link: `bee/report.md` is `b/report.md`, moved to `a`.
        assert!(p
            .applies(mv, &json!({"source": "a/x.md", "destination": "a/y.md"}))
            .is_ok_and(|g| !g));
        // Written folders differ, real ones do not: either saying so gates.
        assert!(p
            .applies(
                mv,
                &json!({"source": "b/report.md", "destination": "bee/r2.md"})
            )
            .unwrap());
        let wf = p.gate_entry("wf").unwrap();
        for raw in [
            "b/report.md",
            "./b/report.md",
            "b//report.md",
            "a/link.md",
            "bee/report.md",
        ] {
            assert!(p.applies(wf, &json!({"path": raw})).unwrap(), "{raw}");
        }
        assert!(!p.applies(wf, &json!({"path": "b/other.md"})).unwrap());
    }

    #[test]
    fn refuses_home_paths() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let p = policy(&root, "");
        for raw in ["~", "~/x", "~/vault/x.md", "~user/x"] {
            match p.resolve("path", raw) {
                Err(PolicyError::InvalidInput { why, .. }) => {
                    assert!(why.contains("does not expand home directories"), "{why}")
                }
                other => panic!("{raw}: {other:?}"),
            }
        }
        // Only a leading `~` is special (server-filesystem expands only that).
        assert_eq!(p.resolve("path", "a/~b").unwrap(), root.join("a/~b"));
    }

    #[test]
    fn unicode_equivalent_names_resolve_to_the_real_entry() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let nfc = "caf\u{e9}";
        let nfd = "cafe\u{301}";
        std::fs::create_dir(root.join(nfc)).unwrap();
        std::fs::write(root.join(nfc).join(format!("{nfc}.md")), "x").unwrap();
        let p = policy(
            &root,
            "[[vaults.gates]]\ntool = \"write_file\"\nwhen = { exists = \"path\" }\ntargets = { paths = [\"path\"] }\n",
        );
        let real = root.join(nfc).join(format!("{nfc}.md"));
        assert_eq!(p.resolve("path", &format!("{nfd}/{nfd}.md")).unwrap(), real);
        // A new file under an equivalent folder keeps its own name, under the real folder.
        assert_eq!(
            p.resolve("path", &format!("{nfd}/new.md")).unwrap(),
            root.join(nfc).join("new.md")
        );
        let wf = p.gate_entry("write_file").unwrap();
        assert!(p
            .applies(wf, &json!({"path": format!("{nfc}/{nfd}.md")}))
            .unwrap());
        // Two existing spellings equivalent to a third: ambiguous, refused.
        std::fs::write(root.join("\u{1ec7}"), "a").unwrap();
        std::fs::write(root.join("e\u{323}\u{302}"), "b").unwrap();
        assert!(matches!(
            p.resolve("path", "\u{ea}\u{323}"),
            Err(PolicyError::InvalidInput { .. })
        ));
    }

    #[test]
    fn equals_compares_numbers_by_value() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let p = policy(
            &root,
            "[[vaults.gates]]\ntool = \"t\"\nwhen = { equals = { arg = \"depth\", value = 1 } }\ntargets = \"none\"\n\
             [[vaults.gates]]\ntool = \"b\"\nwhen = { equals = { arg = \"force\", value = true } }\ntargets = \"none\"\n",
        );
        let t = p.gate_entry("t").unwrap();
        assert!(p.applies(t, &json!({"depth": 1})).unwrap());
        assert!(p.applies(t, &json!({"depth": 1.0})).unwrap());
        assert!(!p.applies(t, &json!({"depth": 1.5})).unwrap());
        assert!(!p.applies(t, &json!({"depth": "1"})).unwrap());
        let b = p.gate_entry("b").unwrap();
        assert!(p.applies(b, &json!({"force": true})).unwrap());
        assert!(!p.applies(b, &json!({"force": "true"})).unwrap());
    }

    #[test]
    fn array_arguments_count_every_element() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::write(root.join("keep.md"), "x").unwrap();
        let p = policy(
            &root,
            "[[vaults.gates]]\ntool = \"del\"\nwhen = { exists = \"paths\" }\ntargets = { paths = [\"paths\"] }\n\
             [[vaults.gates]]\ntool = \"mv\"\nwhen = { cross_folder = [\"source\", \"destination\"] }\ntargets = { paths = [\"source\", \"destination\"] }\n",
        );
        let del = p.gate_entry("del").unwrap();
        assert!(p
            .applies(del, &json!({"paths": ["nope.md", "keep.md"]}))
            .unwrap());
        assert!(!p
            .applies(del, &json!({"paths": ["nope.md", "gone.md"]}))
            .unwrap());
        assert!(matches!(
            p.applies(del, &json!({"paths": ["keep.md", "../x"]})),
            Err(PolicyError::InvalidInput { .. })
        ));
        let mv = p.gate_entry("mv").unwrap();
        assert!(p
            .applies(mv, &json!({"source": ["a/x", "b/y"], "destination": "a/z"}))
            .unwrap());
        assert!(!p
            .applies(mv, &json!({"source": ["a/x", "a/y"], "destination": "a/z"}))
            .unwrap());
        assert!(p
            .applies(mv, &json!({"source": "a/x", "destination": ["a/y", "c/y"]}))
            .unwrap());
        assert!(matches!(
            p.applies(
                mv,
                &json!({"source": ["a/x", "/etc/x"], "destination": "a/z"})
            ),
            Err(PolicyError::InvalidInput { .. })
        ));
    }

    #[test]
    fn acl_follows_symlinks_inside_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("private")).unwrap();
        std::fs::write(root.join("private/secret.md"), "s").unwrap();
        std::os::unix::fs::symlink("private", root.join("link")).unwrap();
        let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
        for raw in ["link/secret.md", "link/new.md"] {
            let paths = p
                .resolve_all("t", None, &json!({"path": raw}), None)
                .unwrap();
            assert!(
                matches!(
                    p.check_acl(&paths, true),
                    Err(PolicyError::Acl { list: "deny", .. })
                ),
                "{raw}"
            );
        }
        std::fs::write(root.join("open.md"), "o").unwrap();
        std::os::unix::fs::symlink("open.md", root.join("alias.md")).unwrap();
        let paths = p
            .resolve_all("t", None, &json!({"path": "alias.md"}), None)
            .unwrap();
        assert!(p.check_acl(&paths, true).is_ok());
    }

    /// A symlink whose target does not exist yet leads where a write through it would
    /// create the file: out of the root is an escape, into a denied folder is denied.
    #[test]
    fn dangling_symlinks_are_judged_by_their_target() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap().join("vault");
        std::fs::create_dir_all(root.join("private")).unwrap();
        std::os::unix::fs::symlink("../outside/new.md", root.join("out")).unwrap();
        std::os::unix::fs::symlink("nowhere/../../x.md", root.join("sneaky")).unwrap();
        std::os::unix::fs::symlink("private/new.md", root.join("in")).unwrap();
        std::os::unix::fs::symlink("loop_b", root.join("loop_a")).unwrap();
        std::os::unix::fs::symlink("loop_a", root.join("loop_b")).unwrap();
        let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
        for raw in ["out", "sneaky", "loop_a"] {
            assert!(
                matches!(
                    p.resolve("path", raw),
                    Err(PolicyError::InvalidInput { .. })
                ),
                "{raw}: {:?}",
                p.resolve("path", raw)
            );
        }
        let paths = p
            .resolve_all("t", None, &json!({"path": "in"}), None)
            .unwrap();
        assert!(
            matches!(
                p.check_acl(&paths, true),
                Err(PolicyError::Acl { list: "deny", .. })
            ),
            "{paths:?}"
        );
    }

    #[test]
    fn folder_globs_cover_the_folder_itself() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("private")).unwrap();
        let p = policy(
            &root,
            "[vaults.acl]\ndeny = [\"private/**\"]\nread_only = [\"**/ro/**\"]\n",
        );
        for raw in ["private", "private/", "./private"] {
            let paths = p
                .resolve_all("t", None, &json!({"path": raw}), None)
                .unwrap();
            match p.check_acl(&paths, true) {
                Err(PolicyError::Acl { list, glob, .. }) => {
                    assert_eq!((list, glob.as_str()), ("deny", "private/**"))
                }
                other => panic!("{raw}: {other:?}"),
            }
        }
        let paths = p
            .resolve_all("t", None, &json!({"path": "privateer/x"}), None)
            .unwrap();
        assert!(p.check_acl(&paths, true).is_ok());
        let paths = p
            .resolve_all("t", None, &json!({"path": "a/ro"}), None)
            .unwrap();
        assert!(p.check_acl(&paths, true).is_ok());
        assert!(p.check_acl(&paths, false).is_err());
    }

    #[test]
    fn floors_and_hint() {
        let def = json!({"name": "write_file", "annotations": {"destructiveHint": true},
            "inputSchema": {"properties": {"path": {}, "content": {}}}});
        assert!(is_floor(Some(&def)));
        assert!(!is_floor(Some(&json!({"name": "x"}))));
        assert_eq!(
            missing_gate_hint("write_file", Some(&def)),
            "[[vaults.gates]] tool = \"write_file\" targets = { paths = [\"path\"] }"
        );
    }
}
