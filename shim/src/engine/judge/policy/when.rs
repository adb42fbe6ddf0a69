//! `when`: whether a gate applies to a call's arguments (`cross_folder`, `exists`,
//! `equals`), each path judged as written and where it really leads.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tc_core::config::Gate;

use super::resolve::real_path;
use super::{arg_strings, Policy, PolicyError};

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

impl Policy {
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
}
