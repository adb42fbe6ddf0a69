//! A grant's scope: which later calls of one tool, by one caller in one vault, an approval
//! also lets through, argument by argument. Shared by tcd (which stores and matches it)
//! and tcctl (which writes it from the human's flags).
//!
//! Every argument of the approved call is in the scope: the human widens some to a glob
//! (an argument naming files, matched against where each path really leads, relative to
//! the vault root) or to any value; every other one must stay exactly as approved. A call
//! with an argument the scope does not name is not covered.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A grant's life when the human gives none: 15 minutes.
pub const DEFAULT_SECONDS: u64 = 15 * 60;
/// The longest grant a gate allows when it says nothing (`max_grant_seconds`): 8 hours.
pub const DEFAULT_MAX_SECONDS: u64 = 8 * 3600;
/// The longest glob kept, in bytes.
pub const GLOB_MAX: usize = 1024;

/// What one argument of a covered call may be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ArgRule {
    /// Exactly this JSON value (absent is not a value).
    Exact(Value),
    /// Each path the argument names really leads under the vault root to a place this
    /// glob matches (`*` stays within one folder, `**` crosses folders).
    Glob(String),
    /// Any value, or none.
    Any,
}

/// Every argument's rule, by argument name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scope {
    pub args: BTreeMap<String, ArgRule>,
}

/// Why a scope cannot be given or does not cover a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("argument {0:?}: the glob is empty, longer than {GLOB_MAX} bytes, absolute or climbs out of the vault root (..)")]
    BadGlob(String),
    #[error("argument {arg:?}: {why}")]
    Glob { arg: String, why: String },
    #[error("the approved call has no argument {0:?}")]
    NoSuchArgument(String),
    #[error("argument {0:?} names no path tc resolved under the vault root, so no glob can be judged against it")]
    NotAPath(String),
    #[error(
        "argument {arg:?}: the approved call's own path {path:?} is outside the glob {glob:?}"
    )]
    OwnPathOutside {
        arg: String,
        path: String,
        glob: String,
    },
}

/// Where each path-naming argument of a call really leads, relative to the vault root
/// (`None` for an argument with a path that leads outside the root or cannot be known).
pub type RealPaths = BTreeMap<String, Option<Vec<String>>>;

impl Scope {
    /// The scope of the approved call `args` (an object; anything else has no arguments):
    /// each argument exact, except those in `widen` (argument → glob or any).
    pub fn of_call(
        args: &Value,
        widen: &BTreeMap<String, ArgRule>,
        paths: &RealPaths,
    ) -> Result<Scope, ScopeError> {
        let empty = serde_json::Map::new();
        let given = args.as_object().unwrap_or(&empty);
        for name in widen.keys() {
            if !given.contains_key(name) {
                return Err(ScopeError::NoSuchArgument(name.clone()));
            }
        }
        let mut scope = Scope::default();
        for (name, value) in given {
            let rule = widen
                .get(name)
                .cloned()
                .unwrap_or_else(|| ArgRule::Exact(value.clone()));
            scope.args.insert(name.clone(), rule);
        }
        scope.check_own(paths)?;
        Ok(scope)
    }

    /// The approved call itself is covered: each glob is well formed and matches the
    /// call's own real paths.
    fn check_own(&self, paths: &RealPaths) -> Result<(), ScopeError> {
        for (arg, rule) in &self.args {
            let ArgRule::Glob(g) = rule else { continue };
            let m = matcher(arg, g)?;
            let Some(Some(own)) = paths.get(arg) else {
                return Err(ScopeError::NotAPath(arg.clone()));
            };
            if own.is_empty() {
                return Err(ScopeError::NotAPath(arg.clone()));
            }
            if let Some(p) = own.iter().find(|p| !m.is_match(p.as_str())) {
                return Err(ScopeError::OwnPathOutside {
                    arg: arg.clone(),
                    path: p.clone(),
                    glob: g.clone(),
                });
            }
        }
        Ok(())
    }

    /// Whether the call `args`, whose path arguments really lead to `paths`, is covered.
    /// Fails closed: an argument the scope does not name, a glob over an argument with no
    /// resolved path (or one leading out of the root), a malformed glob.
    pub fn covers(&self, args: &Value, paths: &RealPaths) -> bool {
        let empty = serde_json::Map::new();
        let given = args.as_object().unwrap_or(&empty);
        if given.keys().any(|k| !self.args.contains_key(k)) {
            return false;
        }
        self.args.iter().all(|(arg, rule)| match rule {
            ArgRule::Any => true,
            ArgRule::Exact(v) => given.get(arg) == Some(v),
            ArgRule::Glob(g) => {
                let (Ok(m), Some(Some(real))) = (matcher(arg, g), paths.get(arg)) else {
                    return false;
                };
                given.contains_key(arg)
                    && !real.is_empty()
                    && real.iter().all(|p| m.is_match(p.as_str()))
            }
        })
    }

    /// One line per widened argument, for `tcctl grants` and the page ("path under
    /// notes/**", "content: any"); exact arguments are counted, not shown.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let mut exact = 0;
        for (arg, rule) in &self.args {
            match rule {
                ArgRule::Glob(g) => parts.push(format!("{arg} under {g}")),
                ArgRule::Any => parts.push(format!("{arg}: any")),
                ArgRule::Exact(_) => exact += 1,
            }
        }
        if exact > 0 {
            parts.push(format!(
                "{exact} other argument{} as approved",
                if exact == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            "this exact call".into()
        } else {
            parts.join("; ")
        }
    }
}

/// A glob over paths relative to the vault root; refused when it could match outside it.
fn matcher(arg: &str, glob: &str) -> Result<globset::GlobMatcher, ScopeError> {
    if glob.is_empty()
        || glob.len() > GLOB_MAX
        || glob.starts_with('/')
        || glob.split('/').any(|c| c == "..")
    {
        return Err(ScopeError::BadGlob(arg.to_string()));
    }
    globset::GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ScopeError::Glob {
            arg: arg.to_string(),
            why: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(arg: &str, p: &[&str]) -> RealPaths {
        let mut m = RealPaths::new();
        m.insert(arg.into(), Some(p.iter().map(|s| s.to_string()).collect()));
        m
    }

    fn notes_scope() -> Scope {
        let widen = BTreeMap::from([("path".to_string(), ArgRule::Glob("notes/**".into()))]);
        let args = json!({ "path": "notes/a.md", "content": "x" });
        Scope::of_call(&args, &widen, &paths("path", &["notes/a.md"])).unwrap()
    }

    #[test]
    fn a_glob_covers_paths_under_it_and_nothing_else() {
        let s = notes_scope();
        let call = |p: &str| json!({ "path": p, "content": "x" });
        assert!(s.covers(&call("notes/b.md"), &paths("path", &["notes/b.md"])));
        assert!(s.covers(&call("notes/d/e.md"), &paths("path", &["notes/d/e.md"])));
        // Judged where the path really leads, not as written.
        assert!(!s.covers(&call("notes/link"), &paths("path", &["private/x"])));
        assert!(!s.covers(&call("private/x"), &paths("path", &["private/x"])));
        assert!(!s.covers(&call("notes"), &paths("path", &["notes"])));
        // A path that leads out of the root, or was not resolved, is never covered.
        let mut out = RealPaths::new();
        out.insert("path".into(), None);
        assert!(!s.covers(&call("notes/up"), &out));
        assert!(!s.covers(&call("notes/b.md"), &RealPaths::new()));
    }

    #[test]
    fn other_arguments_stay_exact_and_unknown_ones_are_not_covered() {
        let s = notes_scope();
        let p = paths("path", &["notes/b.md"]);
        assert!(!s.covers(&json!({ "path": "notes/b.md", "content": "y" }), &p));
        assert!(!s.covers(&json!({ "path": "notes/b.md" }), &p));
        assert!(!s.covers(
            &json!({ "path": "notes/b.md", "content": "x", "mode": "append" }),
            &p
        ));
        assert!(!s.covers(&json!("notes/b.md"), &p));
    }

    #[test]
    fn any_covers_every_value_and_absence() {
        let widen = BTreeMap::from([
            ("path".to_string(), ArgRule::Glob("notes/*.md".into())),
            ("content".to_string(), ArgRule::Any),
        ]);
        let args = json!({ "path": "notes/a.md", "content": "x" });
        let s = Scope::of_call(&args, &widen, &paths("path", &["notes/a.md"])).unwrap();
        let p = paths("path", &["notes/b.md"]);
        assert!(s.covers(&json!({ "path": "notes/b.md", "content": [1, 2] }), &p));
        assert!(s.covers(&json!({ "path": "notes/b.md" }), &p));
        // `*` stays within one folder.
        let deep = paths("path", &["notes/d/b.md"]);
        assert!(!s.covers(&json!({ "path": "notes/d/b.md" }), &deep));
        assert_eq!(s.describe(), "content: any; path under notes/*.md");
    }

    #[test]
    fn a_scope_must_cover_its_own_call_with_well_formed_globs() {
        let args = json!({ "path": "private/a.md", "content": "x" });
        let own = paths("path", &["private/a.md"]);
        let g = |s: &str| BTreeMap::from([("path".to_string(), ArgRule::Glob(s.into()))]);
        assert!(matches!(
            Scope::of_call(&args, &g("notes/**"), &own),
            Err(ScopeError::OwnPathOutside { .. })
        ));
        for bad in ["", "/etc/**", "../**", "a/../../b", "[z-a]"] {
            assert!(Scope::of_call(&args, &g(bad), &own).is_err(), "{bad}");
        }
        assert!(matches!(
            Scope::of_call(&args, &g("**"), &RealPaths::new()),
            Err(ScopeError::NotAPath(_))
        ));
        let missing = BTreeMap::from([("mode".to_string(), ArgRule::Any)]);
        assert!(matches!(
            Scope::of_call(&args, &missing, &own),
            Err(ScopeError::NoSuchArgument(_))
        ));
    }

    #[test]
    fn a_scope_round_trips_through_its_stored_json() {
        let s = notes_scope();
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Scope>(&text).unwrap(), s);
        assert!(serde_json::from_str::<Scope>(r#"{"path":{"regex":".*"}}"#).is_err());
    }
}

#[cfg(test)]
mod attack_probe {
    //! Attacker's read (grants-attack branch): type confusion on exact arguments and
    //! path lists against a glob; these hold.
    use super::*;
    use serde_json::json;

    #[test]
    fn exact_arguments_do_not_coerce_and_every_listed_path_must_fit() {
        let none = RealPaths::new();
        let s = Scope::of_call(
            &json!({ "n": 1, "o": { "a": 1, "b": [2] } }),
            &BTreeMap::new(),
            &none,
        )
        .unwrap();
        for other in [json!(1.0), json!("1"), json!([1]), json!(true), json!(null)] {
            assert!(
                !s.covers(&json!({ "n": other, "o": { "a": 1, "b": [2] } }), &none),
                "{other}"
            );
        }
        // Key order inside a value is not a different value (JSON objects are unordered).
        assert!(s.covers(&json!({ "o": { "b": [2], "a": 1 }, "n": 1 }), &none));
        let w = BTreeMap::from([("path".to_string(), ArgRule::Glob("notes/**".into()))]);
        let own = RealPaths::from([("path".to_string(), Some(vec!["notes/a".to_string()]))]);
        let s = Scope::of_call(&json!({ "path": "notes/a" }), &w, &own).unwrap();
        let two = RealPaths::from([(
            "path".to_string(),
            Some(vec!["notes/a".to_string(), "other/b".to_string()]),
        )]);
        assert!(!s.covers(&json!({ "path": ["notes/a", "other/b"] }), &two));
        let empty = RealPaths::from([("path".to_string(), Some(vec![]))]);
        assert!(!s.covers(&json!({ "path": [] }), &empty));
        // A path-naming argument given as an object, number or null gets no real path
        // from the shim, so no glob covers it.
        for v in [json!({ "p": "notes/a" }), json!(5), json!(null)] {
            assert!(!s.covers(&json!({ "path": v }), &none), "{v}");
        }
    }
}
