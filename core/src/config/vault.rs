//! `[[vaults]]`: one downstream MCP server, its root, and what its arguments name
//! (`[[vaults.paged]]`, `[[vaults.paths]]`, `[vaults.acl]`).

use std::path::PathBuf;

use serde::Deserialize;

use super::{Bearer, Gate, Headers, HttpFront};

/// Default `max_target_files`: the entries (files, links, folders) a `tree` or
/// `matching` target walks before it is refused. The walk streams (memory holds one
/// folder's listing and a batch of files), so the bound is on time and on the stat
/// cache (at most twice this many entries, ~100 bytes each): a million-note vault
/// fits, a runaway `root = "/"` does not.
pub const DEFAULT_MAX_TARGET_FILES: usize = 1_000_000;

/// `[[vaults]]`: one downstream MCP server with a root folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    pub id: String,
    /// Required, except for a vault with a `url` (empty: no local root; see
    /// [`VaultConfig::has_root`]).
    #[serde(default)]
    pub root: PathBuf,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub legacy_elicitation_shim: bool,
    #[serde(default)]
    pub lean: bool,
    #[serde(default)]
    pub gates: Vec<Gate>,
    #[serde(default)]
    pub paged: Vec<Paged>,
    #[serde(default)]
    pub acl: Acl,
    /// `[[vaults.paths]]`: what the arguments that name files are (beyond schema discovery).
    #[serde(default)]
    pub paths: Vec<PathArgs>,
    /// Most entries a `tree`/`matching` target walks (and the stat cache's size).
    #[serde(default = "default_max_target_files")]
    pub max_target_files: usize,
    /// A remote Streamable HTTP server (`https://…/mcp`) instead of `command`.
    #[serde(default)]
    pub url: Option<String>,
    /// `[vaults.headers]`: static headers sent to the remote server.
    #[serde(default)]
    pub headers: Headers,
    /// `[vaults.bearer]`: the remote server's bearer token (a file or an env variable).
    #[serde(default)]
    pub bearer: Option<Bearer>,
    /// PEM certificates trusted for the `https` url besides the public (webpki) roots: a
    /// private CA. An absolute path.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `[vaults.http]`: serve this vault over Streamable HTTP.
    #[serde(default)]
    pub http: Option<HttpFront>,
}

fn default_max_target_files() -> usize {
    DEFAULT_MAX_TARGET_FILES
}

impl VaultConfig {
    /// Whether the vault has a local root (only a `url` vault may have none): path
    /// arguments, the ACL and path-based gates need one.
    pub fn has_root(&self) -> bool {
        !self.root.as_os_str().is_empty()
    }
}

/// `[[vaults.paged]]`: a batch-read tool the governor pages instead of refusing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paged {
    pub tool: String,
    /// The array argument holding the items.
    pub items: String,
}

/// How the shim reads an argument that names files (`[[vaults.paths]] kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// A filesystem path (or an array of them) under the vault root.
    Path,
    /// A git revision: every `<rev>:<path>`, `:<path>`, `:<n>:<path>` part is a path.
    Revision,
    /// A git pathspec (or an array): a path and everything under it; magic and globs
    /// other than `:(top)` / `:(literal)` / `:/` are refused under an ACL.
    Pathspec,
    /// Read as a revision by git if it is one, else as a pathspec (`git diff <target>`):
    /// judged as both.
    RevisionOrPathspec,
    /// A repository the tool reads whole: what every tracked file holds now (`git diff`,
    /// `git diff --cached` with no path). Judged as the folder and, under an ACL, every
    /// entry of its index.
    Tracked,
    /// Not a path, whatever its name or schema says (overrides discovery).
    None,
}

/// `[[vaults.paths]]`: declares which arguments of a tool name files, and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    pub tool: String,
    pub args: Vec<String>,
    pub kind: ArgKind,
    /// The argument naming the repository that revisions and pathspecs are relative
    /// to (default: the vault root).
    #[serde(default)]
    pub repo: Option<String>,
}

/// Arguments of the real servers tc is tested with that name files but that schema
/// discovery cannot classify: `(tool, argument, kind, repository argument)`. The shim
/// applies them when the tool's schema has the argument and the config declares
/// nothing for it; `tcctl policy init` writes them out.
pub const KNOWN_PATH_ARGS: &[(&str, &str, ArgKind, Option<&str>)] = &[
    // mcp-server-git: `repo.rev_parse(revision)` (GitPython).
    ("git_show", "revision", ArgKind::Revision, Some("repo_path")),
    // `git diff <target>`: a revision if it resolves, else a pathspec.
    (
        "git_diff",
        "target",
        ArgKind::RevisionOrPathspec,
        Some("repo_path"),
    ),
    // `git diff --cached` / `git diff` with no path: every tracked file's changes.
    ("git_diff_staged", "repo_path", ArgKind::Tracked, None),
    ("git_diff_unstaged", "repo_path", ArgKind::Tracked, None),
    // `git add -- <files>`.
    ("git_add", "files", ArgKind::Pathspec, Some("repo_path")),
    // `rev_parse(branch_name)` then `git checkout <branch_name>`.
    (
        "git_checkout",
        "branch_name",
        ArgKind::Revision,
        Some("repo_path"),
    ),
    // `git branch --contains <rev>` / `--no-contains <rev>`: a revision, and git's
    // refusal of a blob (`:private/key.txt`) prints its object name.
    (
        "git_branch",
        "contains",
        ArgKind::Revision,
        Some("repo_path"),
    ),
    (
        "git_branch",
        "not_contains",
        ArgKind::Revision,
        Some("repo_path"),
    ),
];

/// `[vaults.acl]`: globs relative to the vault root.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acl {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub read_only: Vec<String>,
}
