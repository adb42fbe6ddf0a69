//! Where a call's file-naming arguments really lead, relative to the vault root: what a
//! grant's globs are matched against (by tcd, which cannot see the files).

use serde_json::Value;
use tc_core::grant::RealPaths;

use tc_core::config::ArgKind;

use super::resolve::real_path;
use super::ArgSpec;
use super::Policy;

impl Policy {
    /// Each `Path` argument of `specs` that the call sets, to where each of its paths
    /// really leads (symlinks followed, as the ACL judges them); `None` for an argument
    /// with a path that leads outside the root, is not UTF-8, or cannot be resolved, so
    /// that no glob covers it. Revisions and pathspecs name no file a glob could judge.
    pub fn real_paths(&self, specs: &[ArgSpec], args: &Value) -> RealPaths {
        let mut found = RealPaths::new();
        for spec in specs.iter().filter(|s| s.kind == ArgKind::Path) {
            let name = spec.name.as_str();
            let Ok(values) = self.arg_values(args, name) else {
                found.insert(name.to_string(), None);
                continue;
            };
            if values.is_empty() {
                continue;
            }
            let real: Option<Vec<String>> = values
                .iter()
                .map(|raw| self.real_under_root(name, raw))
                .collect();
            found.insert(name.to_string(), real);
        }
        found
    }

    fn real_under_root(&self, arg: &str, raw: &str) -> Option<String> {
        let path = self.resolve(arg, raw).ok()?;
        let real = real_path(&path)?;
        let rel = real.strip_prefix(&self.canon_root).ok()?;
        rel.to_str().map(str::to_string)
    }
}
