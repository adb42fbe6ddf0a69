//! Confirmation targets → `state_fp`: a SHA-256 over what a confirmation is about,
//! for every confirmation-target kind (probe results are fetched by the proxy).

pub mod cache;
pub mod fs;
mod stream;
#[cfg(test)]
mod tests;
mod walk;

use serde_json::{json, Value};
use tc_core::config::Targets;
use tc_core::hash::{canonical_json, sha256_hex};

use crate::engine::forward::internal::InternalError;
use crate::engine::judge::policy::{arg_strings, Policy, PolicyError};

/// Why a gate's targets could not be fingerprinted (nothing runs without them).
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// The probe tool's call to the downstream failed.
    #[error(transparent)]
    Probe(#[from] InternalError),
    #[error(transparent)]
    Local(#[from] TargetError),
    #[error("the gate declares no targets")]
    NoTargets,
}

/// Errors computing a fingerprint.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Git(#[from] crate::vault::gitindex::GitError),
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("argument {0:?} is missing or not a string")]
    MissingArg(String),
    #[error("argument {0:?} is empty: a `matching` target needs a value to look for")]
    EmptyArg(String),
    #[error("bad glob: {0}")]
    Glob(#[from] globset::Error),
    #[error(
        "target too large: more than {0} files, links and folders under it \
         (the vault's max_target_files)"
    )]
    TooMany(usize),
}

pub use crate::vault::names::lossless;

/// The fingerprint of `targets = "none"`: SHA-256 of the empty string.
pub fn none_fp() -> String {
    sha256_hex(b"")
}

fn fp_of(kind: &str, doc: Value) -> String {
    sha256_hex(canonical_json(&json!({ "kind": kind, "state": doc })).as_bytes())
}

fn one_arg(args: &Value, name: &str) -> Result<String, TargetError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| TargetError::MissingArg(name.into()))
}

/// Computes the fingerprint of every kind except `probe` (see [`probe_arguments`]),
/// logging (at debug) what it cost.
pub fn local_fp(policy: &Policy, targets: &Targets, args: &Value) -> Result<String, TargetError> {
    let start = std::time::Instant::now();
    let mut counts = walk::Counts::default();
    let fp = compute(policy, targets, args, &mut counts)?;
    tracing::debug!(
        entries = counts.entries,
        read = counts.read,
        cached = policy.fp_cache.len(),
        elapsed_us = start.elapsed().as_micros() as u64,
        "state fingerprint"
    );
    Ok(fp)
}

fn compute(
    policy: &Policy,
    targets: &Targets,
    args: &Value,
    counts: &mut walk::Counts,
) -> Result<String, TargetError> {
    match targets {
        Targets::None => Ok(none_fp()),
        Targets::Paths(names) => paths_fp(policy, names, args),
        Targets::Tree { root, glob } => tree_fp(policy, root, glob, args, counts),
        Targets::Matching { root, contains } => matching_fp(policy, root, contains, args, counts),
        Targets::Git(arg) => git_fp(policy, arg.as_deref(), args, counts),
        Targets::Probe { .. } => unreachable_probe(),
    }
}

/// `paths`: each path argument's state (every element of an array), as a document.
fn paths_fp(policy: &Policy, names: &[String], args: &Value) -> Result<String, TargetError> {
    let mut items = Vec::new();
    for name in names {
        for raw in arg_strings(args, name) {
            let p = policy.resolve(name, &raw)?;
            let mut item = json!({
                "arg": name,
                "path": policy.relative(&p).display().to_string(),
                "state": fs::path_state(&policy.fp_cache, &p)?,
            });
            with_links(&mut item, policy, &p, false)?;
            items.push(item);
        }
    }
    Ok(fp_of("paths", Value::Array(items)))
}

/// `tree`: every entry under the folder argument whose path matches the glob, streamed.
fn tree_fp(
    policy: &Policy,
    root: &str,
    glob: &str,
    args: &Value,
    counts: &mut walk::Counts,
) -> Result<String, TargetError> {
    let dir = policy.resolve(root, &one_arg(args, root)?)?;
    let set = globset::GlobBuilder::new(glob)
        .literal_separator(false)
        .build()?
        .compile_matcher();
    let keep = |rel: &std::path::Path| set.is_match(rel);
    let w = walk::Walk {
        cache: &policy.fp_cache,
        limit: policy.max_target_files,
        keep: &keep,
        needle: None,
        keep_link: &keep,
    };
    // {"files": [...], "glob": …, "links"?: […]}: keys in canonical order.
    let mut fp = stream::Fp::new("tree");
    fp.open_array(false, "files");
    *counts = w.run(&dir, &mut |rel, v| fp.pair(rel, v))?;
    fp.raw("]");
    fp.key_value(true, "glob", &json!(glob));
    finish_walked(fp, policy, &dir)
}

/// `matching`: every file under the folder argument containing the value argument, and
/// every link under it, streamed.
fn matching_fp(
    policy: &Policy,
    root: &str,
    contains: &str,
    args: &Value,
    counts: &mut walk::Counts,
) -> Result<String, TargetError> {
    let dir = policy.resolve(root, &one_arg(args, root)?)?;
    let needle = one_arg(args, contains)?;
    // An empty value would match nothing below (and "everything" is not what the
    // caller meant): refuse rather than bind an approval to no files at all.
    if needle.is_empty() {
        return Err(TargetError::EmptyArg(contains.to_string()));
    }
    // Whether a link's target contains the value cannot be known without
    // following it, so every link under the root is part of the state.
    let all = |_: &std::path::Path| true;
    let w = walk::Walk {
        cache: &policy.fp_cache,
        limit: policy.max_target_files,
        keep: &all,
        needle: Some(needle.as_bytes()),
        keep_link: &all,
    };
    let mut fp = stream::Fp::new("matching");
    fp.key_value(false, "contains", &json!(needle));
    fp.open_array(true, "files");
    *counts = w.run(&dir, &mut |rel, v| fp.pair(rel, v))?;
    fp.raw("]");
    finish_walked(fp, policy, &dir)
}

/// `git`: HEAD and the staged entries of the repository argument (or the root).
fn git_fp(
    policy: &Policy,
    arg: Option<&str>,
    args: &Value,
    counts: &mut walk::Counts,
) -> Result<String, TargetError> {
    let repo = match arg {
        Some(a) => policy.resolve(a, &one_arg(args, a)?)?,
        None => policy.root.clone(),
    };
    let snap = crate::vault::gitindex::snapshot(&repo)?;
    // {"head": …, "index": [[path, mode, oid, stage], …], "links"?: […]}
    let mut fp = stream::Fp::new("git");
    fp.key_value(false, "head", &json!(snap.head));
    fp.open_array(true, "index");
    for e in &snap.entries {
        fp.element();
        fp.raw("[");
        fp.string(&e.path);
        fp.raw(&format!(",{},", e.mode));
        fp.string(&e.oid);
        fp.raw(&format!(",{}]", e.stage));
    }
    fp.raw("]");
    counts.entries = snap.entries.len();
    finish_walked(fp, policy, &repo)
}

/// Ends a streamed state with its `links`, the last key of each (after `files`,
/// `glob`, `contains`, `head` and `index`); a state with none has no `links` key.
fn finish_walked(
    mut fp: stream::Fp,
    policy: &Policy,
    dir: &std::path::Path,
) -> Result<String, TargetError> {
    let links = fs::link_chain(policy.base_of(dir), dir, true)?;
    if !links.is_empty() {
        fp.key_value(true, "links", &Value::Array(links));
    }
    Ok(fp.finish())
}

/// Adds `links` (the links on the way to `p` under the root, see [`fs::link_chain`]) to
/// a state document when there are any; a state with none keeps its old fingerprint.
fn with_links(
    doc: &mut Value,
    policy: &Policy,
    p: &std::path::Path,
    with_last: bool,
) -> Result<(), TargetError> {
    let links = fs::link_chain(policy.base_of(p), p, with_last)?;
    if !links.is_empty() {
        doc["links"] = Value::Array(links);
    }
    Ok(())
}

fn unreachable_probe() -> Result<String, TargetError> {
    Err(TargetError::MissingArg(
        "probe targets are computed by the proxy".into(),
    ))
}

/// Templates probe arguments: a string `"$name"` becomes the call's argument `name`.
pub fn probe_arguments(template: &Value, args: &Value) -> Value {
    match template {
        Value::String(s) => match s.strip_prefix('$') {
            Some(name) if !name.is_empty() => args.get(name).cloned().unwrap_or(Value::Null),
            _ => template.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(|v| probe_arguments(v, args)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), probe_arguments(v, args)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The fingerprint of a probe's result (its content, structured content and error flag).
pub fn probe_fp(tool: &str, probe_args: &Value, result: &Value) -> String {
    fp_of(
        "probe",
        json!({
            "tool": tool,
            "arguments": probe_args,
            "content": result.get("content"),
            "structuredContent": result.get("structuredContent"),
            "isError": result.get("isError"),
        }),
    )
}
