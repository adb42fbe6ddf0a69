//! Grants on the page: the "Approve, and allow similar…" form a waiting request offers
//! (its arguments, file ones with a glob prefilled), the grant a page approval asks for,
//! the grants list (escaped) and Revoke.
//!
//! The ask is fixed when the passkey challenge is issued (`approve/start`), so the
//! assertion the human's authenticator makes is for that approval with that grant.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tc_core::display::escape;
use tc_core::grant::RealPaths;

use super::answer::{bad, ledger, Refusal};
use super::checks::acting;
use super::{Page, Viewer};
use crate::error::DaemonError;
use crate::grants::GrantAsk;
use crate::ledger::Ledger;
use crate::raised::Pending;

/// How much of an argument's value the form shows ("exactly as shown"; the whole call is
/// in the request's arguments above it).
const VALUE_SHOWN: usize = 120;

/// One argument of a waiting request, as the grant form offers it.
#[derive(Debug, Serialize, PartialEq)]
pub struct GrantArg {
    /// The argument's name as sent back in the ask (never shown).
    pub key: String,
    /// The name as shown (escaped).
    pub name: String,
    /// It names files tc resolved under the vault root: offered a glob.
    pub file: bool,
    /// Offered "any value": not for an argument that names a path, even one tc could not
    /// resolve under the root (that one stays exact).
    pub any: bool,
    /// The glob prefilled: the folder of the request's own path, then `/**` (escaped).
    pub glob: String,
    /// The value kept exact unless "any value" is ticked (compact JSON, escaped, cut).
    pub value: String,
}

/// What the grant form of a waiting request offers: `None` when its gate allows no grants
/// (or tcd's config has no such gate) or its arguments were not sent in full (no scope
/// can be written from them). The ledger judges the grant asked either way.
pub fn form(l: &Ledger, p: &Pending) -> Result<Option<Vec<GrantArg>>, DaemonError> {
    let b = &p.binding;
    let gate = l.grant_rules.get(&(b.vault.clone(), b.tool.clone()));
    if !gate.is_some_and(|g| g.allowed) {
        return Ok(None);
    }
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&p.args_json) else {
        return Ok(None);
    };
    let row = l.store.read(|c| Ok(c.raised_by_id(&p.request_id)?))?;
    let paths: RealPaths = row
        .and_then(|r| serde_json::from_str(&r.real_paths).ok())
        .unwrap_or_default();
    let gate_paths = gate.map(|g| g.path_args.as_slice()).unwrap_or_default();
    let offered = args
        .iter()
        .map(|(key, value)| {
            // The gate's own path arguments are files whatever a raise said of them (any
            // process of the human's uid may raise): a glob from the value as written.
            let own = if gate_paths.contains(key) {
                written_paths(value)
            } else {
                paths.get(key).cloned().flatten().unwrap_or_default()
            };
            let file = gate_paths.contains(key) || !own.is_empty();
            GrantArg {
                key: key.clone(),
                name: escape(key).into_owned(),
                file,
                any: !file && !paths.contains_key(key),
                glob: if own.is_empty() {
                    String::new()
                } else {
                    escape(&folder_glob(&own)).into_owned()
                },
                value: shown_value(value),
            }
        })
        .collect();
    Ok(Some(offered))
}

/// The relative paths an argument names as written (a string or strings); absolute ones
/// are left out (the human writes that glob themselves).
fn written_paths(v: &Value) -> Vec<String> {
    let all: Vec<&str> = match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    all.into_iter()
        .filter(|p| !p.is_empty() && !p.starts_with('/'))
        .map(|p| p.trim_start_matches("./").to_string())
        .collect()
}

fn shown_value(v: &Value) -> String {
    let text = v.to_string();
    let mut cut: String = text.chars().take(VALUE_SHOWN).collect();
    if cut.len() < text.len() {
        cut.push_str(&format!("… ({} bytes)", text.len()));
    }
    escape(&cut).into_owned()
}

/// The folder all of `paths` are in (relative to the vault root), glob-escaped, then
/// `/**`; `**` for the root itself.
pub fn folder_glob(paths: &[String]) -> String {
    let folders: Vec<Vec<&str>> = paths
        .iter()
        .map(|p| {
            let mut parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
            parts.pop();
            parts
        })
        .collect();
    let mut common: Vec<&str> = folders.first().cloned().unwrap_or_default();
    for f in &folders[1..] {
        let same = common.iter().zip(f).take_while(|(a, b)| a == b).count();
        common.truncate(same);
    }
    if common.is_empty() {
        return "**".into();
    }
    let mut glob: String = common.join("/").chars().flat_map(glob_escaped).collect();
    glob.push_str("/**");
    glob
}

/// One character of a literal folder name in a glob (`globset`, backslash escapes on).
fn glob_escaped(c: char) -> Vec<char> {
    match c {
        '*' | '?' | '[' | ']' | '{' | '}' | '\\' => vec!['\\', c],
        c => vec![c],
    }
}

/// The grant a page approval asks for: the form's choices.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    #[serde(default)]
    pub seconds: u64,
    #[serde(default)]
    pub uses: u32,
    /// File arguments, each to a glob.
    #[serde(default)]
    pub globs: HashMap<String, String>,
    /// Arguments that may take any value.
    #[serde(default)]
    pub any: Vec<String>,
}

impl GrantBody {
    /// The ask, checked for shape as `tcctl approve --grant`'s is.
    pub fn ask(self) -> Result<GrantAsk, Refusal> {
        let s = tc_proto::v1::GrantScope {
            seconds: self.seconds,
            uses: self.uses,
            globs: self.globs,
            any: self.any,
        };
        Ok(crate::grants::wire::ask_of(s)?)
    }
}

/// A grant as the page lists it (every text escaped).
#[derive(Debug, Serialize)]
pub struct GrantView {
    pub id: String,
    /// live, revoked, used up or expired.
    pub status: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    /// The scope in words ("path under notes/**; content: any").
    pub scope: String,
    pub given_at_ms: i64,
    pub expires_at_ms: i64,
    /// None: no use count.
    pub uses_left: Option<i64>,
    pub used: i64,
    pub last_used_at_ms: Option<i64>,
    pub request_id: String,
}

/// The grants `v` may see, live and recently ended, newest first (on the store thread).
pub fn list(l: &Ledger, v: Viewer) -> Result<Vec<GrantView>, DaemonError> {
    let guarded = l.mode() == tc_core::config::Mode::Guarded;
    let now = tc_core::now_ms();
    let rows = l.grants(Some(v.uid))?;
    Ok(rows
        .iter()
        .map(|g| {
            let caller = if guarded {
                tc_core::owner::unqualified(&g.caller)
            } else {
                &g.caller
            };
            let p = crate::grants::wire::to_proto(g, caller, now);
            GrantView {
                id: escape(&p.id).into_owned(),
                status: p.status,
                vault: escape(&p.vault).into_owned(),
                tool: escape(&p.tool).into_owned(),
                caller: escape(&p.caller).into_owned(),
                scope: escape(&p.scope).into_owned(),
                given_at_ms: p.given_at_ms,
                expires_at_ms: p.expires_at_ms,
                uses_left: g.uses_left,
                used: p.used,
                last_used_at_ms: g.last_used_at,
                request_id: escape(&p.request_id).into_owned(),
            }
        })
        .collect())
}

/// Revoke (a POST: session, CSRF, not read-only): the next call the grant would have
/// covered asks a human again. In guarded mode only a grant of the session's human.
pub async fn revoke(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
) -> Result<Response, Refusal> {
    let v = acting(&page, &h)?;
    if !crate::grants::is_grant_id(&id) {
        return Err(bad("not a grant id"));
    }
    let g = id.clone();
    ledger(&page, move |l| l.revoke_grant(&g, Some(v.uid))).await?;
    Ok(Json(json!({ "revoked": id })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_glob_offered_is_the_folder_of_the_calls_own_paths() {
        assert_eq!(folder_glob(&v(&["notes/a.md"])), "notes/**");
        assert_eq!(
            folder_glob(&v(&["notes/x/a.md", "notes/y/b.md"])),
            "notes/**"
        );
        assert_eq!(folder_glob(&v(&["a.md"])), "**");
        assert_eq!(folder_glob(&v(&["notes/a.md", "b.md"])), "**");
        // A folder named like a glob is matched literally.
        assert_eq!(folder_glob(&v(&["n*[1]/a.md"])), "n\\*\\[1\\]/**");
    }

    /// A ledger whose gate (`v`, `write`) allows grants or not, with `notes/a\u{202e}.md`
    /// raised (it really leads there); the form the page offers for it.
    fn offered(allowed: bool) -> Option<Vec<GrantArg>> {
        use crate::approvals::RaiseText;
        use crate::grant_rules::{GrantRule, GrantRules};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::for_test(dir.path());
        let rule = GrantRule {
            allowed,
            max_seconds: 3600,
            max_uses: None,
            path_args: vec!["path".into()],
        };
        let rules = GrantRules::from([(("v".to_string(), "write".to_string()), rule)]);
        let secret = crate::secret::Secret::ephemeral();
        let l = Ledger::new(store, secret, 300).with_grant_rules(rules);
        let args = json!({ "path": "notes/a\u{202e}.md", "content": "x", "to": "../x" });
        let b = crate::record::Binding {
            vault: "v".into(),
            tool: "write".into(),
            caller: "c".into(),
            args_hash: tc_core::hash::args_hash("write", &args),
        };
        let real = RealPaths::from([
            ("path".into(), Some(vec!["notes/a\u{202e}.md".into()])),
            ("to".into(), None),
        ]);
        let text = RaiseText {
            summary: "write",
            args_json: &args.to_string(),
            covers: "",
            preview: "",
            real_paths: Some(&real),
        };
        l.raise_request(&b, &"f".repeat(64), &text, Some(1000))
            .unwrap();
        let p = l.pending("").unwrap().pop().unwrap();
        form(&l, &p).unwrap()
    }

    #[test]
    fn the_form_offers_globs_for_files_any_for_non_paths_and_nothing_where_grants_are_off() {
        assert_eq!(offered(false), None);
        let args = offered(true).unwrap();
        let by = |k: &str| args.iter().find(|a| a.key == k).unwrap();
        assert_eq!(
            (by("path").file, by("path").glob.as_str()),
            (true, "notes/**")
        );
        assert_eq!(by("path").value, "\"notes/a⟨U+202E⟩.md\"");
        assert_eq!(
            (by("content").file, by("content").glob.as_str()),
            (false, "")
        );
        assert_eq!(by("content").value, "\"x\"");
        // A path tc could not resolve under the root: exact, never "any".
        let to = by("to");
        assert_eq!((to.file, to.any), (false, false));
        assert_eq!((by("content").any, by("path").any), (true, false));
    }

    /// ATTACK (grants-attack branch): was a HOLE (low), now fixed: the form decided from the raised row's `real_paths`
    /// which arguments are files (glob prefilled with their folder) and which may be
    /// "any value". A re-raise of the same waiting call keeps its id and replaces those
    /// paths, and in guarded mode anything of the human's uid may raise: the agent can
    /// make the page offer "any value" for the path of the human's request, or prefill
    /// `**`. Now `file`/`any` of the gate's path arguments come from the gate (tcd's
    /// config) and the glob is prefilled from the call's own value as written.
    #[test]
    fn a_re_raise_with_other_real_paths_does_not_change_what_the_form_offers() {
        use crate::approvals::RaiseText;
        use crate::grant_rules::{GrantRule, GrantRules};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::for_test(dir.path());
        let rule = GrantRule {
            allowed: true,
            max_seconds: 3600,
            max_uses: None,
            path_args: vec!["path".into()],
        };
        let rules = GrantRules::from([(("v".to_string(), "write".to_string()), rule)]);
        let l = Ledger::new(store, crate::secret::Secret::ephemeral(), 300).with_grant_rules(rules);
        let args = json!({ "path": "notes/deep/a.md", "content": "x" });
        let b = crate::record::Binding {
            vault: "v".into(),
            tool: "write".into(),
            caller: "c".into(),
            args_hash: tc_core::hash::args_hash("write", &args),
        };
        let raise = |real: &RealPaths| {
            let text = RaiseText {
                summary: "write",
                args_json: &args.to_string(),
                covers: "",
                preview: "",
                real_paths: Some(real),
            };
            l.raise_request(&b, &"f".repeat(64), &text, Some(1000))
                .unwrap()
                .request_id
        };
        let honest = RealPaths::from([("path".into(), Some(vec!["notes/deep/a.md".into()]))]);
        let id = raise(&honest);
        let before = form(&l, &l.pending("").unwrap().pop().unwrap())
            .unwrap()
            .unwrap();
        // The agent raises the same call again: no real path for `path` at all.
        assert_eq!(
            raise(&RealPaths::new()),
            id,
            "the waiting request keeps its id"
        );
        let after = form(&l, &l.pending("").unwrap().pop().unwrap())
            .unwrap()
            .unwrap();
        let path = |f: &[GrantArg]| {
            let a = f.iter().find(|a| a.key == "path").unwrap();
            (a.file, a.any, a.glob.clone())
        };
        assert_eq!(path(&before), (true, false, "notes/deep/**".to_string()));
        assert_eq!(
            path(&after),
            path(&before),
            "the page now offers \"any value\" for the request's path argument"
        );
    }

    #[test]
    fn values_are_escaped_and_cut() {
        assert_eq!(shown_value(&json!("a\u{202e}b")), "\"a⟨U+202E⟩b\"");
        let long = shown_value(&json!("x".repeat(500)));
        assert!(long.ends_with("… (502 bytes)"), "{long}");
        assert!(long.chars().count() < 150);
    }
}
