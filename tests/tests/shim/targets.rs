//! End to end: Python `mcp` client → real tc-shim → real server-filesystem, real tcd,
//! approvals through the real `tcctl elicit`: the `tree` and `matching` targets.
//!
//! server-filesystem's only tool that takes a folder and changes the disk is `move_file`
//! (moving a whole folder), so both targets gate it with `root = "source"`:
//! - `tree = { root = "source", glob = "*.md" }`: the notes under the moved folder
//!   (`*` crosses `/`, so nested ones too); other files are not part of the approval.
//! - `matching = { root = "source", contains = "source" }`: the files under the moved
//!   folder that mention the folder's own path (the links the move breaks).

use tc_tests::shim as support;

use std::path::Path;

use serde_json::{json, Value};
use support::*;

/// One scene: a `move_file` of `src` to `archive` gated by `target`, through a Python
/// client and a real tc-shim, with `files` written under the root first.
struct Move {
    env: Env,
    c: PyClient,
    args: Value,
    src: &'static str,
}

impl Move {
    fn start(target: &str, src: &'static str, files: &[(&str, &str)]) -> Self {
        let mut env = Env::with(&Vault::filesystem("fs").gate("move_file", target));
        env.start_tcd();
        for (rel, content) in files {
            write(&env.root, rel, content);
        }
        let c = PyClient::start(&env.shim_argv("fs"));
        let args = json!({"source": src, "destination": "archive"});
        Move { env, c, args, src }
    }

    fn tree(files: &[(&str, &str)]) -> Self {
        Self::start(
            r#"{ tree = { root = "source", glob = "*.md" } }"#,
            "inbox",
            files,
        )
    }

    fn matching(files: &[(&str, &str)]) -> Self {
        Self::start(
            r#"{ matching = { root = "source", contains = "source" } }"#,
            "projects",
            files,
        )
    }

    fn write(&self, rel: &str, content: &str) {
        write(&self.env.root, rel, content);
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.env.root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// Nothing moved: the source is still there and the destination is not.
    fn assert_unmoved(&self, why: &str) {
        let dst = self.args["destination"].as_str().unwrap();
        assert!(self.env.root.join(self.src).is_dir(), "{why}");
        assert!(!self.env.root.join(dst).exists(), "{why}");
    }

    /// A gated call without a token: refused for a human, with nothing moved.
    fn raise(&mut self) -> Value {
        let r = self.c.call("move_file", self.args.clone());
        assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
        assert_eq!(sc(&r)["details"]["tool"], "move_file", "{r}");
        self.assert_unmoved("a refused call moves nothing");
        r
    }

    /// Raised and approved through the real `tcctl elicit`: the refusal and its token.
    fn approve(&mut self) -> (Value, String) {
        let r = self.raise();
        let token = tcctl_elicit(&self.env, &r);
        (r, token)
    }

    /// The token again, expected to be refused as `spent`, nothing moved.
    fn assert_spent(&mut self, token: &str) {
        let r = self.c.call("move_file", with_token(&self.args, token));
        assert_eq!(code(&r).as_deref(), Some("invalid_input"), "{r}");
        assert_eq!(sc(&r)["details"]["reason"], "spent", "{r}");
        self.assert_unmoved("a spent token moves nothing");
    }

    /// A call with a token the target drifted from: refused, nothing moved, and the token
    /// is spent (its second use is refused as `spent`, still moving nothing).
    fn assert_drift_spends(&mut self, token: &str) {
        let r = self.c.call("move_file", with_token(&self.args, token));
        assert_eq!(code(&r).as_deref(), Some("replay_drift"), "{r}");
        self.assert_unmoved("nothing may move on drift");
        self.assert_spent(token);
    }

    /// The approved call runs: the source is gone.
    fn assert_moves(&mut self, token: &str) {
        let r = self.c.call("move_file", with_token(&self.args, token));
        assert_eq!(code(&r), None, "{r}");
        assert!(!self.env.root.join(self.src).exists());
    }

    /// After a successful move, the same token again: `spent`, and the re-created source
    /// folder stays where it is (the destination was cleared, so a forwarded call would
    /// move it).
    fn assert_used_once(&mut self, token: &str) {
        let dst = self.args["destination"].as_str().unwrap();
        std::fs::rename(self.env.root.join(dst), self.env.root.join("done")).unwrap();
        self.write(&format!("{}/again.md", self.src), "again");
        self.assert_spent(token);
    }

    /// The ledger saw `drifts` replay drifts and one consumed approval.
    fn assert_events(&self, drifts: usize) {
        let kinds = event_kinds(&self.env.socket);
        assert_eq!(count(&kinds, "tc.elicit.consumed"), 1, "{kinds:?}");
        assert_eq!(count(&kinds, "replay_drift"), drifts, "{kinds:?}");
    }
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// The `state_fp` an `elicit_required` refusal reports.
fn fp(r: &Value) -> String {
    sc(r)["details"]["state_fp"].as_str().unwrap().to_string()
}

/// Approved once: `edits` (files the target does not bind) change and appear between
/// approval and redemption, not drift; the move runs, `archived` is what the destination
/// then holds, and the token is then spent.
fn assert_unbound_edits_run(mut m: Move, edits: &[(&str, &str)], archived: &[(&str, &str)]) {
    let (_, token) = m.approve();
    for (rel, content) in edits {
        m.write(rel, content);
    }
    m.assert_moves(&token);
    for (rel, content) in archived {
        assert_eq!(m.read(rel), *content);
    }
    m.assert_used_once(&token);
    m.assert_events(0);
}

/// Each of `changes` (a file the target binds, written between approval and redemption)
/// is drift: the token is spent, nothing moves and the changed file stays; each fresh call
/// raises a fresh request bound to the new state. Approved against the final state, the
/// move runs and the destination holds `archived`.
fn assert_bound_changes_drift(mut m: Move, changes: &[(&str, &str)], archived: &[(&str, &str)]) {
    let mut last: Option<Value> = None;
    for (rel, content) in changes {
        let (raised, token) = m.approve();
        if let Some(last) = &last {
            assert_ne!(fp(&raised), fp(last));
        }
        m.write(rel, content);
        m.assert_drift_spends(&token);
        assert_eq!(m.read(rel), *content);
        last = Some(raised);
    }
    let (raised, token) = m.approve();
    assert_ne!(fp(&raised), fp(last.as_ref().unwrap()));
    m.assert_moves(&token);
    for (rel, content) in archived {
        assert_eq!(m.read(rel), *content);
    }
    m.assert_events(changes.len());
}

#[test]
fn shim_targets_tree_approved_once_and_other_files_are_not_bound() {
    let m = Move::tree(&[
        ("inbox/a.md", "alpha"),
        ("inbox/sub/c.md", "see"),
        ("inbox/b.txt", "bee"),
    ]);
    // Files the glob does not match change and appear: not drift, the move runs.
    assert_unbound_edits_run(
        m,
        &[
            ("inbox/b.txt", "bee, edited"),
            ("inbox/sub/new.txt", "unrelated"),
        ],
        &[
            ("archive/a.md", "alpha"),
            ("archive/sub/c.md", "see"),
            ("archive/b.txt", "bee, edited"),
        ],
    );
}

#[test]
fn shim_targets_tree_a_replaced_or_added_match_is_drift() {
    let m = Move::tree(&[
        ("inbox/a.md", "alpha"),
        ("inbox/sub/c.md", "see"),
        ("inbox/b.txt", "bee"),
    ]);
    assert_bound_changes_drift(
        m,
        &[
            // A matching (nested) file is replaced between raise and redeem.
            ("inbox/sub/c.md", "see, replaced"),
            // A matching file is added between raise and redeem.
            ("inbox/added.md", "new note"),
        ],
        &[
            ("archive/added.md", "new note"),
            ("archive/sub/c.md", "see, replaced"),
        ],
    );
}

#[test]
fn shim_targets_matching_approved_once_and_unrelated_files_are_not_bound() {
    let m = Move::matching(&[
        ("projects/index.md", "see projects/plan.md"),
        ("projects/plan.md", "the plan"),
        ("projects/sub/todo.txt", "todo"),
    ]);
    // Files without the string change and appear: not drift, the move runs.
    assert_unbound_edits_run(
        m,
        &[
            ("projects/plan.md", "the plan, v2"),
            ("projects/sub/todo.txt", "todo, done"),
            ("projects/other.md", "nothing to see"),
        ],
        &[
            ("archive/index.md", "see projects/plan.md"),
            ("archive/plan.md", "the plan, v2"),
            ("archive/other.md", "nothing to see"),
        ],
    );
}

#[test]
fn shim_targets_matching_a_changed_match_or_a_file_gaining_the_string_is_drift() {
    let m = Move::matching(&[
        ("projects/index.md", "see projects/plan.md"),
        ("projects/plan.md", "the plan"),
    ]);
    assert_bound_changes_drift(
        m,
        &[
            // A file that contains the string changes (and still contains it).
            (
                "projects/index.md",
                "see projects/plan.md and projects/x.md",
            ),
            // A file that did not contain it gains it.
            ("projects/plan.md", "the plan, see projects/index.md"),
            // A NEW file containing it appears.
            ("projects/sub/new.md", "links to projects/plan.md"),
        ],
        &[("archive/sub/new.md", "links to projects/plan.md")],
    );
}
