//! Turning one file-naming argument into the paths the ACL judges: paths as given,
//! the path parts of git revisions, and what a git pathspec covers.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tc_core::config::ArgKind;

use super::resolve::{lexical, real_path};
use super::{gitspec, ArgSpec, Policy, PolicyError};

/// Most worktree entries a pathspec's folder is walked for before it is refused.
const MAX_COVERED: usize = 100_000;

impl Policy {
    fn unjudged(&self, arg: &str, why: impl ToString) -> PolicyError {
        PolicyError::Unjudged {
            arg: arg.into(),
            why: why.to_string(),
        }
    }

    /// The strings of one argument. Absent or null: none. Under an ACL, a value that is
    /// neither a string nor an array of strings is refused (it cannot be judged);
    /// without one, its non-string parts are ignored as before.
    pub(super) fn arg_values(&self, args: &Value, name: &str) -> Result<Vec<String>, PolicyError> {
        match args.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => match super::prejson::embedded(s) {
                super::prejson::Embedded::Unjudgeable(why) if self.has_acl => {
                    Err(self.unjudged(name, why))
                }
                _ => Ok(super::with_embedded(s)),
            },
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()),
            Some(_) if self.has_acl => Err(self.unjudged(
                name,
                "it names files but is not a string or an array of strings",
            )),
            Some(_) => Ok(super::arg_strings(args, name)),
        }
    }

    /// Adds the paths `spec`'s argument names to `out` (see [`ArgKind`]).
    pub(in crate::engine) fn judge_arg(
        &self,
        args: &Value,
        spec: &ArgSpec,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), PolicyError> {
        let name = spec.name.as_str();
        let values = self.arg_values(args, name)?;
        if matches!(spec.kind, ArgKind::Path | ArgKind::Tracked) {
            for raw in &values {
                let path = self.resolve(name, raw)?;
                // A whole-repository diff shows every tracked file that changed, and any
                // may have: every index entry is judged (an untracked file never shows).
                if spec.kind == ArgKind::Tracked && self.has_acl {
                    let tree = self.work_tree(name, path.clone())?;
                    self.covered_index(name, &tree, &tree, out)?;
                }
                out.push(path);
            }
            return Ok(());
        }
        // Revisions and pathspecs only matter to an ACL (git keeps them in the repository).
        if !self.has_acl || values.is_empty() {
            return Ok(());
        }
        let repo = self.repo_dir(args, spec)?;
        for raw in &values {
            if matches!(spec.kind, ArgKind::Revision | ArgKind::RevisionOrPathspec) {
                let parts = gitspec::revision_paths(raw).map_err(|w| self.unjudged(name, w))?;
                for p in parts {
                    out.push(self.under_repo(name, &repo, &p)?);
                }
            }
            if matches!(spec.kind, ArgKind::Pathspec | ArgKind::RevisionOrPathspec) {
                self.pathspec(name, &repo, raw, out)?;
            }
        }
        Ok(())
    }

    /// The repository a revision or pathspec is relative to: the `repo` argument's path,
    /// else the vault root.
    fn repo_dir(&self, args: &Value, spec: &ArgSpec) -> Result<PathBuf, PolicyError> {
        match spec
            .repo
            .as_deref()
            .and_then(|r| args.get(r).map(|v| (r, v)))
        {
            Some((r, Value::String(raw))) => {
                let repo = self.resolve(r, raw)?;
                self.work_tree(r, repo)
            }
            Some((r, v)) if !v.is_null() => Err(self.unjudged(r, "the repository is not a string")),
            _ => Ok(self.root.clone()),
        }
    }

    /// The folder git runs in for a repository argument: the folder itself, or, when it
    /// is a git dir (`<root>/.git`: GitPython opens one and works in its parent), its
    /// parent, so paths are judged where git reads them. A git dir that sets its work tree
    /// elsewhere (`core.worktree`) cannot be judged.
    fn work_tree(&self, name: &str, repo: PathBuf) -> Result<PathBuf, PolicyError> {
        let holds_git = repo.join(".git").symlink_metadata().is_ok();
        if holds_git || !repo.join("HEAD").is_file() {
            return Ok(repo);
        }
        let config = std::fs::read_to_string(repo.join("config")).unwrap_or_default();
        if config.to_ascii_lowercase().contains("worktree") {
            return Err(self.unjudged(
                name,
                "it names a git directory whose work tree is set elsewhere (core.worktree)",
            ));
        }
        let parent = repo.parent().and_then(Path::to_str);
        let Some(parent) = parent else {
            return Err(self.unjudged(name, "a git directory with no work tree above it"));
        };
        self.resolve(name, parent)
    }

    /// `rel` (relative to the repository, or absolute) as a path under the root.
    fn under_repo(&self, name: &str, repo: &Path, rel: &str) -> Result<PathBuf, PolicyError> {
        let joined = lexical(&repo.join(rel));
        let Some(s) = joined.to_str() else {
            return Err(self.unjudged(name, "not UTF-8"));
        };
        self.resolve(name, s)
    }

    /// A pathspec covers its path and everything under it: the path, and every entry of
    /// the worktree and the index under it that an ACL glob matches.
    fn pathspec(
        &self,
        name: &str,
        repo: &Path,
        raw: &str,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), PolicyError> {
        let p = gitspec::pathspec_path(raw).map_err(|w| self.unjudged(name, w))?;
        let path = self.under_repo(name, repo, &p)?;
        out.push(path.clone());
        // git does not follow a link named by a pathspec: a link is covered alone.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.is_dir() => return Ok(()),
            _ => {}
        }
        self.covered_worktree(name, &path, out)?;
        self.covered_index(name, repo, &path, out)
    }

    /// Whether an ACL glob matches `p` as written or where it leads.
    fn acl_hit(&self, p: &Path) -> bool {
        let real = real_path(p);
        let real_rel = real
            .as_deref()
            .and_then(|r| r.strip_prefix(&self.canon_root).ok());
        std::iter::once(self.relative(p))
            .chain(real_rel)
            .any(|rel| self.deny.0.is_match(rel) || self.read_only.0.is_match(rel))
    }

    fn covered_worktree(
        &self,
        name: &str,
        dir: &Path,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), PolicyError> {
        let mut stack = vec![dir.to_path_buf()];
        let mut seen = 0usize;
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue; // missing (a path only the index has) or unreadable to git too
            };
            for e in rd.flatten() {
                if e.file_name() == ".git" {
                    continue;
                }
                seen += 1;
                if seen > MAX_COVERED {
                    return Err(
                        self.unjudged(name, format!("it covers more than {MAX_COVERED} files"))
                    );
                }
                let p = e.path();
                if self.acl_hit(&p) {
                    out.push(p.clone());
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(p);
                }
            }
        }
        Ok(())
    }

    fn covered_index(
        &self,
        name: &str,
        repo: &Path,
        dir: &Path,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), PolicyError> {
        let snap = match crate::vault::gitindex::snapshot(repo) {
            Ok(s) => s,
            // Not a repository: git refuses the call itself.
            Err(crate::vault::gitindex::GitError::NotARepo(_)) => return Ok(()),
            Err(e) => return Err(self.unjudged(name, format!("the git index cannot be read: {e}"))),
        };
        let under = dir.strip_prefix(repo).unwrap_or(Path::new(""));
        for e in &snap.entries {
            let p = Path::new(&e.path);
            if p.starts_with(under) {
                let full = repo.join(p);
                if self.acl_hit(&full) {
                    out.push(full);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::engine::judge::policy::tests::policy;
    use crate::vault::gitindex::tests::git;

    fn git_def(props: Value) -> Value {
        json!({"inputSchema": {"properties": props}})
    }

    /// The ACL's verdict on a call: Ok, `deny`, or `unjudged`.
    fn verdict(p: &Policy, tool: &str, def: &Value, args: Value) -> &'static str {
        match p.resolve_all(tool, Some(def), &args, None) {
            Err(PolicyError::Unjudged { .. }) => "unjudged",
            Err(e) => panic!("{tool} {args}: {e}"),
            Ok(paths) => match p.check_acl(&paths, true) {
                Ok(()) => "ok",
                Err(PolicyError::Acl { .. }) => "deny",
                Err(e) => panic!("{e}"),
            },
        }
    }

    /// A root with `private/key.txt` and `src/a.txt`, and a policy denying `private/**`.
    fn acl_fixture() -> (tempfile::TempDir, PathBuf, Policy) {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("private")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("private/key.txt"), "k").unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
        (d, root, p)
    }

    /// Asserts the verdict on `tool` for each `(value, want)`, the value given as `arg`
    /// next to `repo_path`.
    fn assert_verdicts(p: &Policy, tool: &str, def: &Value, arg: &str, cases: &[(Value, &str)]) {
        let repo = p.root.display().to_string();
        for (value, want) in cases {
            let got = verdict(p, tool, def, json!({"repo_path": repo, arg: value}));
            assert_eq!(got, *want, "{tool} {value}");
        }
    }

    #[test]
    fn revisions_are_judged_under_an_acl() {
        let (_d, _root, p) = acl_fixture();
        let show =
            git_def(json!({"repo_path": {"type": "string"}, "revision": {"type": "string"}}));
        let cases = [
            ("HEAD:private/key.txt", "deny"),
            ("HEAD~1:./private/key.txt", "deny"),
            (":0:private/key.txt", "deny"),
            ("HEAD:private", "deny"),
            ("HEAD:src/a.txt", "ok"),
            ("HEAD", "ok"),
            ("HEAD:", "ok"),
            ("HEAD:../x", "unjudged"),
        ]
        .map(|(rev, want)| (json!(rev), want));
        assert_verdicts(&p, "git_show", &show, "revision", &cases);
    }

    #[test]
    fn pathspecs_are_judged_under_an_acl() {
        let (_d, _root, p) = acl_fixture();
        let add = git_def(
            json!({"repo_path": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}}}),
        );
        let cases = [
            (json!(["private/key.txt"]), "deny"),
            (json!(["src/a.txt", "src/../private/key.txt"]), "deny"),
            (json!(["."]), "deny"),
            (json!([":(top)private"]), "deny"),
            (json!(["*.txt"]), "unjudged"),
            (json!([":!src"]), "unjudged"),
            (json!(["src"]), "ok"),
            (json!(["src/a.txt"]), "ok"),
            (json!([{"path": "private/key.txt"}]), "unjudged"),
        ];
        assert_verdicts(&p, "git_add", &add, "files", &cases);
    }

    #[test]
    fn diff_targets_are_judged_under_an_acl() {
        let (_d, _root, p) = acl_fixture();
        let diff = git_def(json!({"repo_path": {"type": "string"}, "target": {"type": "string"}}));
        let cases = [
            ("private/key.txt", "deny"),
            ("HEAD:private", "deny"),
            (":/private", "deny"),
            ("HEAD~1..HEAD", "ok"),
            ("main", "ok"),
        ]
        .map(|(t, want)| (json!(t), want));
        assert_verdicts(&p, "git_diff", &diff, "target", &cases);
    }

    #[test]
    fn values_that_are_not_strings_are_unjudged_under_an_acl_only() {
        let (_d, root, p) = acl_fixture();
        // A path argument that is not a string cannot be judged.
        let fs = git_def(json!({"path": {"type": "string"}}));
        assert_eq!(
            verdict(&p, "read_file", &fs, json!({"path": 5})),
            "unjudged"
        );
        assert_eq!(verdict(&p, "read_file", &fs, json!({"path": null})), "ok");
        // Without an ACL, revisions and pathspecs are not looked at.
        let add = git_def(
            json!({"repo_path": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}}}),
        );
        let open = policy(&root, "");
        let repo = root.display().to_string();
        assert!(open
            .resolve_all(
                "git_add",
                Some(&add),
                &json!({"repo_path": repo, "files": ["*"]}),
                None
            )
            .is_ok());
    }

    /// `git_diff_staged` / `git_diff_unstaged` name no file but show every tracked file's
    /// changes: under an ACL they are judged by the index, refused while a denied file is
    /// tracked (staged or committed), allowed while denied files are only untracked.
    #[test]
    fn whole_repository_diffs_are_judged_by_every_tracked_file() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("private")).unwrap();
        std::fs::write(root.join("private/key.txt"), "k").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        git(&root, &["init", "-q"]);
        git(&root, &["add", "a.txt"]);
        let p = policy(&root, "[vaults.acl]\ndeny = [\"private/**\"]\n");
        let def = git_def(json!({"repo_path": {"type": "string"}, "context_lines": {}}));
        let args = json!({"repo_path": root.display().to_string()});
        for tool in ["git_diff_staged", "git_diff_unstaged"] {
            assert_eq!(
                verdict(&p, tool, &def, args.clone()),
                "ok",
                "{tool}: untracked"
            );
        }
        git(&root, &["add", "private/key.txt"]);
        for tool in ["git_diff_staged", "git_diff_unstaged"] {
            assert_eq!(
                verdict(&p, tool, &def, args.clone()),
                "deny",
                "{tool}: tracked"
            );
        }
        // Without an ACL the repository is only a path under the root.
        let open = policy(&root, "");
        let paths = open
            .resolve_all("git_diff_staged", Some(&def), &args, None)
            .unwrap();
        assert_eq!(paths, vec![root.clone()]);
    }
}
