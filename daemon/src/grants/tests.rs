//! Unit tests of grants, on whichever store the suite runs on (SQLite, or PostgreSQL under
//! `tc-pg`): giving one with an approval, what it covers, use counts under concurrency,
//! revoke and expiry, and the gate's rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tc_core::grant::{ArgRule, RealPaths};
use tc_core::Reason;

use super::*;
use crate::approvals::{Proof, RaiseText};
use crate::factor::Approver;
use crate::grant_rules::GrantRules;
use crate::raised::Raised;
use crate::secret::Secret;
use crate::store::Store;

const ME: u32 = 1000;

fn ledger_with(rule: GrantRule) -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::for_test(dir.path());
    let rules = GrantRules::from([(("v".to_string(), "write".to_string()), rule)]);
    let l = Ledger::new(store, Secret::ephemeral(), 300).with_grant_rules(rules);
    (dir, l)
}

fn ledger() -> (tempfile::TempDir, Ledger) {
    ledger_with(GrantRule {
        allowed: true,
        max_seconds: tc_core::grant::DEFAULT_MAX_SECONDS,
        max_uses: None,
        path_args: vec!["path".into()],
    })
}

fn reason<T: std::fmt::Debug>(r: Result<T, DaemonError>) -> Reason {
    match r {
        Err(DaemonError::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A write_file call of `path` (which really leads to `real`) by `caller`.
struct Write {
    binding: Binding,
    args: String,
    real: RealPaths,
}

fn write_as(caller: &str, path: &str, real: &str) -> Write {
    let args: Value = json!({ "path": path, "content": "x" });
    let binding = Binding {
        vault: "v".into(),
        tool: "write".into(),
        caller: caller.into(),
        args_hash: tc_core::hash::args_hash("write", &args),
    };
    let real = RealPaths::from([("path".to_string(), Some(vec![real.to_string()]))]);
    Write {
        binding,
        args: args.to_string(),
        real,
    }
}

fn write(path: &str) -> Write {
    write_as("c", path, path)
}

fn raise_as(l: &Ledger, w: &Write, uid: u32) -> Raised {
    let text = RaiseText {
        summary: "write",
        args_json: &w.args,
        covers: "",
        preview: "",
        real_paths: Some(&w.real),
    };
    let fp = tc_core::hash::sha256_hex(w.args.as_bytes());
    l.raise_request(&w.binding, &fp, &text, Some(uid)).unwrap()
}

fn raise(l: &Ledger, w: &Write) -> Raised {
    raise_as(l, w, ME)
}

/// The shim's redeem right after its own raise a grant covered.
fn redeem(l: &Ledger, w: &Write) -> Result<String, DaemonError> {
    let fp = tc_core::hash::sha256_hex(w.args.as_bytes());
    l.redeem_granted(&w.binding, &fp)
}

fn notes(uses: u32) -> GrantAsk {
    GrantAsk {
        seconds: 600,
        uses,
        widen: BTreeMap::from([("path".to_string(), ArgRule::Glob("notes/**".into()))]),
    }
}

/// Approves `w`'s request with `ask`; the grant's id.
fn give(l: &Ledger, w: &Write, ask: &GrantAsk) -> Result<String, DaemonError> {
    let id = raise(l, w).request_id;
    let who = Approver {
        uid: ME,
        code: None,
    };
    let a = l.approve_granting(&id, Proof::Code(&who), Some(ask))?;
    Ok(a.grant_id.expect("a grant id"))
}

fn events(l: &Ledger, kind: &str) -> Vec<crate::record::EventRow> {
    let all = l.store.events_after(0, 10_000).unwrap();
    all.into_iter().filter(|e| e.kind == kind).collect()
}

#[test]
fn a_call_a_grant_covers_is_not_pushed() {
    let (_d, l) = ledger();
    let p = crate::push::Pusher::for_test();
    let l = l.with_push(Some(p.clone()));
    give(&l, &write("notes/a.md"), &notes(0)).unwrap();
    assert_eq!(
        p.queued(),
        1,
        "the request the grant was given on waited for a human"
    );
    let r = raise(&l, &write("notes/b.md"));
    assert!(r.grant_id.is_some() && r.fresh, "{r:?}");
    assert_eq!(p.queued(), 1, "covered: nobody needs to look");
    raise(&l, &write("elsewhere/c.md"));
    assert_eq!(p.queued(), 2, "not covered: pushed");
}

#[test]
fn a_grant_lets_similar_calls_through_and_logs_each_use_with_its_fingerprint() {
    let (_d, l) = ledger();
    let first = write("notes/a.md");
    let g = give(&l, &first, &notes(0)).unwrap();
    assert!(is_grant_id(&g), "{g}");
    redeem(&l, &first).expect("the approved call itself runs");
    for name in ["notes/b.md", "notes/deep/c.md"] {
        let w = write(name);
        let r = raise(&l, &w);
        assert_eq!(r.grant_id.as_deref(), Some(g.as_str()), "{name}");
        redeem(&l, &w).expect("a covered call runs");
        // Once: the approval the grant made is spent like any other.
        assert_eq!(reason(redeem(&l, &w)), Reason::NotApproved);
    }
    // Not covered: another folder, a path under notes/ that really leads elsewhere, other
    // content, another caller, another uid.
    assert_eq!(raise(&l, &write("private/x")).grant_id, None);
    assert_eq!(
        raise(&l, &write_as("c", "notes/link", "private/x")).grant_id,
        None
    );
    let mut other = write("notes/d.md");
    other.args = json!({ "path": "notes/d.md", "content": "y" }).to_string();
    other.binding.args_hash =
        tc_core::hash::args_hash("write", &serde_json::from_str(&other.args).unwrap());
    assert_eq!(raise(&l, &other).grant_id, None);
    assert_eq!(
        raise(&l, &write_as("c2", "notes/e.md", "notes/e.md")).grant_id,
        None
    );
    assert_eq!(raise_as(&l, &write("notes/f.md"), ME + 1).grant_id, None);
    let used = events(&l, tc_core::codes::events::GRANT_USED);
    assert_eq!(used.len(), 2, "{used:?}");
    assert_eq!(used[0].args_hash, write("notes/b.md").binding.args_hash);
    assert_eq!(used[0].state_fp.len(), 64);
    assert!(used[0].detail.contains(&g));
    assert_eq!(events(&l, tc_core::codes::events::GRANT_GIVEN).len(), 1);
}

#[test]
fn a_use_count_is_exact_when_racers_take_the_last_use() {
    let (_d, l) = ledger();
    let l = Arc::new(l);
    give(&l, &write("notes/a.md"), &notes(1)).unwrap();
    let racers: Vec<_> = (0..32)
        .map(|i| {
            let l = Arc::clone(&l);
            std::thread::spawn(move || raise(&l, &write(&format!("notes/r{i}.md"))).grant_id)
        })
        .collect();
    let granted = racers.into_iter().filter_map(|t| t.join().unwrap()).count();
    assert_eq!(granted, 1);
    let all = l.grants(None).unwrap();
    assert_eq!((all[0].used, all[0].uses_left), (1, Some(0)));
    assert_eq!(status(&all[0], tc_core::now_ms()), "used up");
}

/// A grant on notes/** and a call it approved (notes/b.md) that has not run yet.
fn granted_and_waiting() -> (tempfile::TempDir, Ledger, String, Write) {
    let (d, l) = ledger();
    let g = give(&l, &write("notes/a.md"), &notes(0)).unwrap();
    let waiting = write("notes/b.md");
    assert!(raise(&l, &waiting).grant_id.is_some());
    (d, l, g, waiting)
}

#[test]
fn a_revoke_refuses_the_next_call_and_one_already_approved() {
    let (_d, l, g, waiting) = granted_and_waiting();
    l.revoke_grant(&g, Some(ME)).unwrap();
    assert_eq!(reason(redeem(&l, &waiting)), Reason::Revoked);
    assert_eq!(raise(&l, &write("notes/c.md")).grant_id, None);
    assert_eq!(reason(l.revoke_grant(&g, Some(ME))), Reason::Spent);
    assert_eq!(
        reason(l.revoke_grant("g-2222222222", Some(ME))),
        Reason::Unknown
    );
    assert_eq!(events(&l, tc_core::codes::events::GRANT_REVOKED).len(), 1);
    assert_eq!(
        status(&l.grants(None).unwrap()[0], tc_core::now_ms()),
        "revoked"
    );
}

#[test]
fn an_expired_grant_covers_nothing_and_its_end_is_logged_once() {
    let (_d, l, g, waiting) = granted_and_waiting();
    // Its expiry passes (set in the row: no test waits on a clock).
    l.store
        .exec_sql("UPDATE grants SET expires_at = 1")
        .unwrap();
    assert_eq!(reason(redeem(&l, &waiting)), Reason::Revoked);
    assert_eq!(raise(&l, &write("notes/c.md")).grant_id, None);
    let now = tc_core::now_ms();
    for _ in 0..2 {
        l.store
            .write(|tx, evs| Ok(crate::approvals::sweep(tx, evs, now)))
            .unwrap();
    }
    let ended = events(&l, tc_core::codes::events::GRANT_ENDED);
    assert_eq!(ended.len(), 1);
    assert!(ended[0].detail.contains(&g) && ended[0].detail.contains("expired"));
}

#[test]
fn a_gate_that_forbids_or_caps_grants_refuses_and_approves_nothing() {
    let (_d, l) = ledger_with(GrantRule {
        allowed: false,
        max_seconds: 3600,
        max_uses: None,
        path_args: vec!["path".into()],
    });
    let w = write("notes/a.md");
    assert_eq!(reason(give(&l, &w, &notes(0))), Reason::GrantRefused);
    // Nothing was approved: the retry is still not approved.
    assert_eq!(reason(redeem(&l, &w)), Reason::NotApproved);
    let (_d, l) = ledger_with(GrantRule {
        allowed: true,
        max_seconds: 60,
        max_uses: Some(5),
        path_args: vec!["path".into()],
    });
    // A grant for `seconds` with `uses`, on notes/**.
    let asked = |seconds, uses| GrantAsk {
        seconds,
        ..notes(uses)
    };
    for (seconds, uses) in [(61, 1), (60, 6), (60, 0)] {
        let r = give(&l, &w, &asked(seconds, uses));
        assert_eq!(reason(r), Reason::GrantRefused, "{seconds} s, {uses} uses");
    }
    // The approved call must be inside its own grant.
    let outside = GrantAsk {
        seconds: 60,
        uses: 1,
        widen: BTreeMap::from([("path".to_string(), ArgRule::Glob("private/**".into()))]),
    };
    assert_eq!(reason(give(&l, &w, &outside)), Reason::GrantRefused);
    assert!(give(&l, &w, &asked(60, 5)).is_ok());
    // A tool the daemon's config has no gate for gets no grant.
    let (_d, l) = ledger();
    let mut other = write("notes/a.md");
    other.binding.tool = "other".into();
    other.binding.args_hash =
        tc_core::hash::args_hash("other", &serde_json::from_str(&other.args).unwrap());
    assert_eq!(reason(give(&l, &other, &notes(0))), Reason::GrantRefused);
}

#[test]
fn in_guarded_mode_a_grant_needs_the_factor_like_any_approval() {
    let (_d, l) = ledger();
    let l = l.with_mode(tc_core::config::Mode::Guarded);
    let w = write("notes/a.md");
    let id = raise(&l, &w).request_id;
    for code in [None, Some("000000".to_string())] {
        let who = Approver { uid: ME, code };
        let r = l.approve_granting(&id, Proof::Code(&who), Some(&notes(0)));
        assert!(
            matches!(
                reason(r),
                Reason::FactorRequired | Reason::FactorInvalid | Reason::NotEnrolled
            ),
            "refused for want of the factor"
        );
    }
    assert!(l.grants(None).unwrap().is_empty());
    assert_eq!(reason(redeem(&l, &w)), Reason::NotApproved);
}

/// A guarded-mode ledger where ME approved notes/a.md with a grant on notes/** (the
/// factor is `factor::check`'s to test; a passkey proof stands for it here).
fn guarded_grant() -> (tempfile::TempDir, Ledger, String) {
    let (d, l) = ledger();
    let l = l.with_mode(tc_core::config::Mode::Guarded);
    let id = raise(&l, &write("notes/a.md")).request_id;
    let proof = Proof::Passkey {
        owner: Some(ME),
        credential: "k",
    };
    let a = l.approve_granting(&id, proof, Some(&notes(0))).unwrap();
    (d, l, a.grant_id.unwrap())
}

#[test]
fn in_guarded_mode_a_human_sees_and_revokes_only_their_own_grants() {
    let (_d, l, g) = guarded_grant();
    assert_eq!(l.grants(Some(ME + 1)).unwrap().len(), 0);
    assert_eq!(l.grants(Some(ME)).unwrap().len(), 1);
    assert_eq!(l.grants(Some(0)).unwrap().len(), 1);
    assert_eq!(reason(l.revoke_grant(&g, Some(ME + 1))), Reason::Unknown);
    l.revoke_grant(&g, Some(ME)).unwrap();
}

/// ATTACK (grants-attack branch): HOLE. tcd cannot see the files, so it takes the raiser's
/// word for where each path leads (`real_paths`). In guarded mode any process of the
/// human's uid may Raise (the agent with the human's shell), so it can raise the very call
/// the model is about to make, with the same binding and state fingerprint, claiming its
/// path leads under the grant's glob. The grant then approves it, and the honest shim's
/// next identical call redeems that approval by binding (`held_approval` runs before the
/// shim raises with the real paths) and runs a call the human never granted.
#[test]
fn in_guarded_mode_a_raise_with_forged_real_paths_does_not_approve_the_shims_call() {
    let (_d, l, _) = guarded_grant();
    // The agent, straight to tcd's socket as the human's uid: a call of private/x.md
    // that it says really leads to notes/x.md.
    let forged = write_as("c", "private/x.md", "notes/x.md");
    let r = raise(&l, &forged);
    // What the shim does first with the model's identical call: redeem by binding, before
    // any raise of its own (with the real paths, which no grant covers).
    let fp = tc_core::hash::sha256_hex(forged.args.as_bytes());
    let honest_shim = l.redeem_approved(&forged.binding, &fp);
    assert!(
        honest_shim.is_err(),
        "the shim ran private/x.md under grant {:?}, which covers only notes/**: the \
         forged raise's approval was redeemed by the shim's honest call",
        r.grant_id
    );
    assert_eq!(reason(honest_shim), Reason::NotApproved);
    // The shim then raises the call with the paths it resolved: no grant covers it, and
    // the approval the forged raise got is gone with the row it replaced.
    let honest = write_as("c", "private/x.md", "private/x.md");
    assert!(raise(&l, &honest).grant_id.is_none());
    assert_eq!(reason(redeem(&l, &honest)), Reason::NotApproved);
}

/// ATTACK (grants-attack branch): HOLE (disk). Every other text a raised row keeps is
/// capped (`args_json` at 64 KiB, covers, preview), which with `MAX_RAISED` bounds what a
/// flood of raises writes; `real_paths` was stored whole: a call naming many paths (or
/// a raw Raise) stored megabytes per row.
#[test]
fn a_raised_rows_real_paths_are_capped_like_its_arguments() {
    let (_d, l) = ledger();
    let mut w = write("notes/a.md");
    let many: Vec<String> = (0..40_000).map(|i| format!("notes/{i:0>40}.md")).collect();
    w.real = RealPaths::from([("path".to_string(), Some(many))]);
    let id = raise(&l, &w).request_id;
    let row = l.store.read(|c| Ok(c.raised_by_id(&id)?)).unwrap().unwrap();
    assert!(
        row.real_paths.len() <= crate::approvals::ARGS_JSON_MAX,
        "{} bytes of real_paths stored",
        row.real_paths.len()
    );
}

/// The gate's own path arguments are widened only by a glob: "any value" for one is
/// refused (and nothing approved), whatever a raise said of where it leads.
#[test]
fn a_gate_path_argument_cannot_be_widened_to_any_value() {
    let (_d, l) = ledger();
    let w = write("notes/a.md");
    let any_path = GrantAsk {
        seconds: 60,
        uses: 0,
        widen: BTreeMap::from([("path".to_string(), ArgRule::Any)]),
    };
    assert_eq!(reason(give(&l, &w, &any_path)), Reason::GrantRefused);
    assert_eq!(reason(redeem(&l, &w)), Reason::NotApproved);
    assert!(l.grants(None).unwrap().is_empty());
}
