//! The vault's policy as the shim applies it: which gate applies to a call (`when`),
//! floors from `destructiveHint`, path arguments resolved under the root, and the ACL.

use crate::value::at;
use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;
use tc_core::config::{Gate, Targets, VaultConfig};

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
}

/// Argument names treated as paths for the ACL and escape checks even when no gate names them.
const PATHLIKE: &[&str] = &[
    "path",
    "paths",
    "source",
    "destination",
    "repo_path",
    "file",
    "directory",
    "dir",
    "root",
];

fn compile(globs: &[String]) -> Result<(GlobSet, Vec<String>), PolicyError> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        b.add(Glob::new(g)?);
    }
    Ok((b.build()?, globs.to_vec()))
}

/// Strings of an argument that may be a string or an array of strings.
pub fn arg_strings(args: &Value, name: &str) -> Vec<String> {
    match args.get(name) {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
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
        })
    }

    /// The gate entry for a tool, applying or not.
    pub fn gate_entry(&self, tool: &str) -> Option<&Gate> {
        self.gates.iter().find(|g| g.tool == tool)
    }

    /// Argument names that hold paths for this call: every name the gate refers to, plus the usual ones.
    pub fn path_args(&self, gate: Option<&Gate>) -> Vec<String> {
        let mut names: Vec<String> = PATHLIKE.iter().map(|s| s.to_string()).collect();
        if let Some(g) = gate {
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
        }
        names.sort();
        names.dedup();
        names
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
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(bad(format!(
                "{raw:?} contains `..`; paths must stay under the vault root"
            )));
        }
        let joined = if p.is_absolute() {
            p.to_path_buf()
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
        // Symlinks: the longest existing ancestor must canonicalize under the root.
        let mut probe = norm.as_path();
        loop {
            if let Ok(c) = std::fs::canonicalize(probe) {
                if !c.starts_with(&self.canon_root) {
                    return Err(bad(format!(
                        "{raw:?} leaves the vault root through a symlink"
                    )));
                }
                break;
            }
            match probe.parent() {
                Some(parent) => probe = parent,
                None => break,
            }
        }
        Ok(norm)
    }

    /// The path relative to the root (for ACL globs and fingerprints).
    pub fn relative<'a>(&self, p: &'a Path) -> &'a Path {
        p.strip_prefix(&self.root)
            .or_else(|_| p.strip_prefix(&self.canon_root))
            .unwrap_or(p)
    }

    /// Resolves every path argument of a call, refusing escapes.
    pub fn resolve_all(
        &self,
        args: &Value,
        gate: Option<&Gate>,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        let mut out = Vec::new();
        for name in self.path_args(gate) {
            for raw in arg_strings(args, &name) {
                out.push(self.resolve(&name, &raw)?);
            }
        }
        Ok(out)
    }

    /// Whether the gate applies to these arguments (`when`, all given conditions must hold).
    pub fn applies(&self, gate: &Gate, args: &Value) -> Result<bool, PolicyError> {
        let Some(w) = &gate.when else { return Ok(true) };
        if let Some([a, b]) = &w.cross_folder {
            let pa = self.first_path(args, a)?;
            let pb = self.first_path(args, b)?;
            let folder =
                |p: &Option<PathBuf>| p.as_ref().and_then(|p| p.parent().map(Path::to_path_buf));
            if folder(&pa) == folder(&pb) {
                return Ok(false);
            }
        }
        if let Some(e) = &w.exists {
            match self.first_path(args, e)? {
                Some(p) if std::fs::symlink_metadata(&p).is_ok() => {}
                _ => return Ok(false),
            }
        }
        if let Some(eq) = &w.equals {
            if args.get(&eq.arg) != Some(&eq.value) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn first_path(&self, args: &Value, name: &str) -> Result<Option<PathBuf>, PolicyError> {
        match arg_strings(args, name).first() {
            Some(raw) => self.resolve(name, raw).map(Some),
            None => Ok(None),
        }
    }

    /// The ACL: `deny` always, `read_only` unless the tool is read-only.
    pub fn check_acl(&self, paths: &[PathBuf], tool_read_only: bool) -> Result<(), PolicyError> {
        for p in paths {
            let rel = self.relative(p);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(root: &Path, extra: &str) -> Policy {
        let text = format!(
            "[[vaults]]\nid = \"v\"\nroot = \"{}\"\n{extra}",
            root.display()
        );
        let c = tc_core::Config::parse(&text, Path::new("/t.toml")).unwrap();
        Policy::new(&c.vaults[0]).unwrap()
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
        let paths = p.resolve_all(&json!({"path": "private/k"}), None).unwrap();
        assert!(matches!(
            p.check_acl(&paths, true),
            Err(PolicyError::Acl { list: "deny", .. })
        ));
        let paths = p.resolve_all(&json!({"path": "ro/k"}), None).unwrap();
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
