//! Which arguments of a call name files, and how to read them: the vault's
//! `[[vaults.paths]]`, the built-in table for known servers, then the tool's schema.

use serde_json::Value;
use tc_core::config::{ArgKind, PathArgs, KNOWN_PATH_ARGS};

/// Argument names always read as paths (the rule before schemas were read).
pub const PATHLIKE: &[&str] = &[
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

/// Last words of a name (`repo_path`, `targetDir`, `input-files`) that make a string
/// property a path.
const PATH_SUFFIXES: &[&str] = &[
    "path",
    "paths",
    "file",
    "files",
    "dir",
    "dirs",
    "directory",
    "directories",
    "folder",
    "folders",
];

/// One argument that names files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgSpec {
    pub name: String,
    pub kind: ArgKind,
    /// The argument naming the repository revisions and pathspecs are relative to.
    pub repo: Option<String>,
}

/// Whether a JSON schema admits a string or an array of strings (or says nothing).
fn holds_strings(s: &Value) -> bool {
    let one = |t: &Value| match t.as_str() {
        Some("string") | Some("null") => true,
        Some("array") => s.get("items").is_none_or(holds_strings),
        _ => false,
    };
    match s.get("type") {
        Some(Value::Array(ts)) => ts.iter().any(one),
        Some(t) => one(t),
        None => ["anyOf", "oneOf"]
            .iter()
            .find_map(|k| s.get(*k).and_then(Value::as_array))
            .is_none_or(|alts| alts.iter().any(holds_strings)),
    }
}

/// Whether `text` has `word` as a whole word (ASCII letters around it do not count).
fn has_word(text: &str, word: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.match_indices(word).any(|(i, _)| {
        let before = t[..i].chars().next_back();
        let after = t[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphabetic())
            && !after.is_some_and(|c| c.is_ascii_alphabetic())
    })
}

/// The last word of a snake, kebab or camel case name, lowercased.
fn last_word(name: &str) -> String {
    let tail = name.rsplit(['_', '-']).next().unwrap_or(name);
    let start = tail
        .char_indices()
        .rev()
        .find(|(i, c)| *i > 0 && c.is_ascii_uppercase())
        .map_or(0, |(i, _)| i);
    tail[start..].to_ascii_lowercase()
}

/// How the schema rule reads a property: a revision, a path, or nothing.
fn by_schema(name: &str, schema: &Value) -> Option<ArgKind> {
    if !holds_strings(schema) {
        return None;
    }
    let n: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .collect();
    if n.contains("revision") {
        return Some(ArgKind::Revision);
    }
    let desc = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    let pathy = PATHLIKE.contains(&name)
        || PATH_SUFFIXES.contains(&last_word(name).as_str())
        || has_word(desc, "path")
        || has_word(desc, "paths");
    pathy.then_some(ArgKind::Path)
}

/// The arguments of `tool` that name files. First match wins per argument: a
/// `[[vaults.paths]]` declaration (`kind = "none"` removes one), the built-in table
/// ([`KNOWN_PATH_ARGS`], when the schema has the argument or is unknown), the schema
/// rule ([`by_schema`]), then [`PATHLIKE`].
pub fn discover(decls: &[PathArgs], tool: &str, def: Option<&Value>) -> Vec<ArgSpec> {
    let props = def
        .and_then(|d| d.get("inputSchema"))
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    let mut out: Vec<ArgSpec> = Vec::new();
    let add = |out: &mut Vec<ArgSpec>, name: &str, kind: ArgKind, repo: Option<&str>| {
        if !out.iter().any(|a| a.name == name) {
            out.push(ArgSpec {
                name: name.to_string(),
                kind,
                repo: repo.map(String::from),
            });
        }
    };
    for d in decls.iter().filter(|d| d.tool == tool) {
        for a in &d.args {
            add(&mut out, a, d.kind, d.repo.as_deref());
        }
    }
    for (t, a, kind, repo) in KNOWN_PATH_ARGS {
        if *t == tool && props.is_none_or(|p| p.contains_key(*a)) {
            add(&mut out, a, *kind, *repo);
        }
    }
    let repo_arg = props.and_then(|p| p.contains_key("repo_path").then_some("repo_path"));
    for (name, schema) in props.into_iter().flatten() {
        match by_schema(name, schema) {
            Some(ArgKind::Revision) => add(&mut out, name, ArgKind::Revision, repo_arg),
            Some(kind) => add(&mut out, name, kind, None),
            None => {}
        }
    }
    for name in PATHLIKE {
        add(&mut out, name, ArgKind::Path, None);
    }
    out.retain(|a| a.kind != ArgKind::None);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds(decls: &[PathArgs], tool: &str, def: &Value) -> Vec<(String, ArgKind)> {
        let mut v: Vec<_> = discover(decls, tool, Some(def))
            .into_iter()
            .filter(|a| {
                !PATHLIKE.contains(&a.name.as_str())
                    || def["inputSchema"]["properties"].get(&a.name).is_some()
            })
            .map(|a| (a.name, a.kind))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn schema_rule() {
        let def = json!({"inputSchema": {"properties": {
            "repo_path": {"type": "string"},
            "targetDir": {"type": "string"},
            "input_files": {"type": "array", "items": {"type": "string"}},
            "where": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "The path to write to."},
            "rev": {"type": "string"},
            "base_revision": {"type": "string"},
            "profile": {"type": "string"},
            "tail": {"type": "number", "description": "last N lines of the file path"},
            "message": {"type": "string", "description": "xpaths are not words"},
        }}});
        assert_eq!(
            kinds(&[], "t", &def),
            [
                ("base_revision".to_string(), ArgKind::Revision),
                ("input_files".into(), ArgKind::Path),
                ("repo_path".into(), ArgKind::Path),
                ("targetDir".into(), ArgKind::Path),
                ("where".into(), ArgKind::Path),
            ]
        );
        let a = discover(&[], "t", Some(&def));
        let rev = a.iter().find(|a| a.name == "base_revision").unwrap();
        assert_eq!(rev.repo.as_deref(), Some("repo_path"));
    }

    #[test]
    fn declarations_then_known_servers_then_schema() {
        let def = json!({"inputSchema": {"properties": {
            "repo_path": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}}}}});
        assert_eq!(
            kinds(&[], "git_add", &def),
            [
                ("files".to_string(), ArgKind::Pathspec),
                ("repo_path".into(), ArgKind::Path)
            ]
        );
        // Another server's tool of the same name without the argument: no table entry.
        let other = json!({"inputSchema": {"properties": {"paths": {"type": "string"}}}});
        assert!(!discover(&[], "git_add", Some(&other))
            .iter()
            .any(|a| a.name == "files"));
        let decl = PathArgs {
            tool: "git_add".into(),
            args: vec!["files".into(), "repo_path".into()],
            kind: ArgKind::None,
            repo: None,
        };
        assert!(kinds(&[decl], "git_add", &def).is_empty());
        // Unknown schema (no tools/list yet): the table still applies.
        assert!(discover(&[], "git_show", None)
            .iter()
            .any(|a| a.name == "revision" && a.kind == ArgKind::Revision));
    }
}
