//! Unit tests of approve by request, decline and expiry on a real store.

use super::*;
use crate::secret::Secret;
use crate::store::Store;

fn reason<T: std::fmt::Debug>(r: Result<T, DaemonError>) -> Reason {
    match r {
        Err(DaemonError::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::for_test(dir.path());
    (dir, Ledger::new(store, Secret::ephemeral(), 300))
}

/// The arguments of call `n`, as the shim sends them.
fn args_of(n: u8) -> String {
    format!(r#"{{"path":"f{n}"}}"#)
}

fn call(n: u8) -> Binding {
    let args: serde_json::Value = serde_json::from_str(&args_of(n)).unwrap();
    Binding {
        vault: "v".into(),
        tool: "t".into(),
        caller: "c".into(),
        args_hash: tc_core::hash::args_hash("t", &args),
    }
}

/// Which `call(n)` a binding is (the tests' calls are few).
fn args_for(b: &Binding) -> String {
    let n = (0..=u8::MAX)
        .find(|&n| call(n).args_hash == b.args_hash)
        .expect("a binding made by call(n)");
    args_of(n)
}

fn fp(s: &str) -> String {
    tc_core::hash::sha256_hex(s.as_bytes())
}

fn raise(l: &Ledger, b: &Binding, state: &str) -> Raised {
    let args = args_for(b);
    let text = RaiseText {
        summary: "t {..}",
        args_json: &args,
        covers: "the paths",
        preview: "",
        real_paths: None,
    };
    l.raise_request(b, &fp(state), &text, Some(1000)).unwrap()
}

fn me() -> Approver {
    Approver {
        uid: 1000,
        code: None,
    }
}

fn kinds(l: &Ledger) -> Vec<String> {
    l.store
        .events_after(0, 1000)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[test]
fn ids_are_short_unambiguous_and_kept_while_the_same_request_waits() {
    let (_d, l) = ledger();
    let a = raise(&l, &call(1), "s1");
    assert!(is_request_id(&a.request_id), "{}", a.request_id);
    assert!(!a.request_id.contains(['0', '1', 'o', 'l', 'i']));
    // The agent retrying the same call before anyone answered: same id.
    assert_eq!(raise(&l, &call(1), "s1").request_id, a.request_id);
    // The target changed: a new id, so an approval of the old one cannot land on it.
    let b = raise(&l, &call(1), "s2");
    assert_ne!(b.request_id, a.request_id);
    assert_eq!(reason(l.approve(&a.request_id, &me())), Reason::Unknown);
    assert_ne!(raise(&l, &call(2), "s1").request_id, b.request_id);
    let p = l.pending("").unwrap();
    assert_eq!(p.len(), 2);
    assert!(p
        .iter()
        .all(|p| p.status == PENDING && p.raised_by_uid == Some(1000)));
    assert!(p
        .iter()
        .all(|p| p.args_json == args_for(&p.binding) && p.covers == "the paths"));
    // Garbage and injection attempts are refused before the database.
    assert_eq!(reason(l.approve("'; DROP", &me())), Reason::Unknown);
}

#[test]
fn an_approval_runs_the_identical_call_once() {
    let (_d, l) = ledger();
    let r = raise(&l, &call(1), "s");
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::NotApproved
    );
    let a = l.approve(&r.request_id, &me()).unwrap();
    assert_eq!(a.binding, call(1));
    assert_eq!(a.state_fp, fp("s"));
    assert_eq!(l.pending("").unwrap()[0].status, APPROVED);
    assert!(!l.pending("").unwrap()[0].minted);
    // Approving twice is refused (the first still stands).
    assert_eq!(reason(l.approve(&r.request_id, &me())), Reason::Spent);
    // Another call (other arguments) holds nothing.
    assert_eq!(
        reason(l.redeem_approved(&call(2), &fp("s"))),
        Reason::NotApproved
    );
    // Another caller holds nothing.
    let other = Binding {
        caller: "x".into(),
        ..call(1)
    };
    assert_eq!(
        reason(l.redeem_approved(&other, &fp("s"))),
        Reason::NotApproved
    );
    let red = l.redeem_approved(&call(1), &fp("s")).unwrap();
    // In flight: not a second time.
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::NotApproved
    );
    // Nothing ran (ACL): released, and the same approval redeems again.
    l.release(&red, "acl").unwrap();
    let red = l.redeem_approved(&call(1), &fp("s")).unwrap();
    l.consumed(&call(1), &fp("s"), "approved_request", &red)
        .unwrap();
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::NotApproved
    );
    let k = kinds(&l);
    assert!(k.contains(&events::APPROVED.to_string()), "{k:?}");
}

#[test]
fn a_drifted_target_spends_the_approval_and_the_retry_asks_afresh() {
    let (_d, l) = ledger();
    let r = raise(&l, &call(1), "s");
    l.approve(&r.request_id, &me()).unwrap();
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("changed"))),
        Reason::ReplayDrift
    );
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::NotApproved
    );
    // A fresh raise gets a fresh id.
    assert_ne!(raise(&l, &call(1), "s").request_id, r.request_id);
}

#[test]
fn a_decline_stands_and_cannot_become_an_approval() {
    let (_d, l) = ledger();
    let r = raise(&l, &call(1), "s");
    l.decline(&r.request_id, "not that file", Some(1000))
        .unwrap();
    match l.redeem_approved(&call(1), &fp("s")) {
        Err(DaemonError::Refused { reason, message }) => {
            assert_eq!(reason, Reason::Declined);
            assert!(message.contains("not that file"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(reason(l.approve(&r.request_id, &me())), Reason::Declined);
    assert_eq!(
        reason(l.mint(&call(1), None, &Default::default())),
        Reason::Declined
    );
    // Raising it again does not reset it to pending.
    let text = RaiseText::default();
    assert_eq!(
        reason(l.raise_request(&call(1), &fp("s"), &text, None)),
        Reason::Declined
    );
    assert_eq!(l.pending("").unwrap()[0].status, DECLINED);
    assert_eq!(l.pending("").unwrap()[0].reason, "not that file");
    // An approval not yet used can be withdrawn by a decline.
    let r2 = raise(&l, &call(2), "s");
    l.approve(&r2.request_id, &me()).unwrap();
    l.decline(&r2.request_id, "", None).unwrap();
    assert_eq!(
        reason(l.redeem_approved(&call(2), &fp("s"))),
        Reason::Declined
    );
}

#[test]
fn an_unanswered_request_reads_as_expired_once_then_asks_afresh() {
    let (_d, mut l) = ledger();
    l.ttl_ms = 0;
    let r = raise(&l, &call(1), "s");
    assert_eq!(reason(l.approve(&r.request_id, &me())), Reason::Expired);
    assert_eq!(reason(l.decline(&r.request_id, "", None)), Reason::Expired);
    assert_eq!(l.pending("").unwrap()[0].status, EXPIRED);
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::Expired
    );
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::NotApproved
    );
    let expired = kinds(&l).iter().filter(|k| *k == events::EXPIRED).count();
    assert_eq!(expired, 1);
    // Unretried ones are logged by garbage collection, an hour on.
    raise(&l, &call(2), "s");
    l.gc().unwrap();
    assert_eq!(l.pending("").unwrap().len(), 1, "kept for the hour");
    let later = now_ms() + EXPIRED_KEPT_MS + 1000;
    l.store.write(|tx, evs| Ok(sweep(tx, evs, later))).unwrap();
    let expired = kinds(&l).iter().filter(|k| *k == events::EXPIRED).count();
    assert_eq!(expired, 2);
}

#[test]
fn guarded_mode_approves_nothing_without_the_factor_of_the_raiser() {
    let (_d, l) = ledger();
    let l = l.with_mode(tc_core::config::Mode::Guarded);
    let r = raise(&l, &call(1), "s");
    let stranger = Approver {
        uid: 1001,
        code: Some("123456".into()),
    };
    // Another human's request is answered as one that does not exist.
    assert_eq!(reason(l.approve(&r.request_id, &stranger)), Reason::Unknown);
    assert_eq!(
        reason(l.approve_with(
            &r.request_id,
            Proof::Passkey {
                owner: Some(1001),
                credential: "c"
            }
        )),
        Reason::Unknown
    );
    assert_eq!(
        reason(l.decline(&r.request_id, "", Some(1001))),
        Reason::Unknown
    );
    // The factor check (`factor.rs`) decides; without a code it refuses.
    let refused = reason(l.approve(&r.request_id, &me()));
    assert_eq!(refused, Reason::FactorRequired);
    assert_eq!(
        reason(l.redeem_approved(&call(1), &fp("s"))),
        Reason::NotApproved
    );
    assert_eq!(l.pending("").unwrap()[0].status, PENDING);
}

/// The shim's preview is kept with the request (the latest raise's), cut when too long.
#[test]
fn the_preview_is_stored_with_the_request_and_capped() {
    let (_d, l) = ledger();
    let b = call(1);
    let diff = "--- a.md\n+++ a.md (after the write)\n@@ -1 +1 @@\n-old\n+new\n";
    let text = RaiseText {
        preview: diff,
        ..Default::default()
    };
    let id = l
        .raise_request(&b, &fp("s"), &text, Some(1000))
        .unwrap()
        .request_id;
    let p = l.pending("").unwrap();
    assert_eq!(
        (p[0].request_id.as_str(), p[0].preview.as_str()),
        (id.as_str(), diff)
    );
    let long = "+x\n".repeat(tc_core::preview::TEXT_MAX);
    let text = RaiseText {
        preview: &long,
        ..Default::default()
    };
    l.raise_request(&b, &fp("s"), &text, Some(1000)).unwrap();
    let p = l.pending("").unwrap();
    assert!(p[0].preview.len() < tc_core::preview::TEXT_MAX + 100);
    assert!(p[0]
        .preview
        .ends_with(&format!("(preview cut: {} bytes in all)", long.len())));
    // A raise without one (a gate with no preview, an older shim) clears it.
    l.raise_request(&b, &fp("s"), &RaiseText::default(), Some(1000))
        .unwrap();
    assert_eq!(l.pending("").unwrap()[0].preview, "");
}

/// Whatever can reach the socket (in guarded mode, an agent with the human's shell) must
/// not show the approver one call and have another approved: the arguments shown must
/// hash to the binding.
#[test]
fn the_arguments_shown_must_be_the_ones_the_approval_binds() {
    let (_d, l) = ledger();
    let harmless = args_of(2);
    let text = RaiseText {
        summary: "t {path: f2}",
        args_json: &harmless,
        covers: "",
        preview: "",
        real_paths: None,
    };
    // Call 1's hash, call 2's arguments: refused, nothing raised.
    assert_eq!(
        reason(l.raise_request(&call(1), &fp("s"), &text, Some(1000))),
        Reason::BadArgument
    );
    let garbage = RaiseText {
        args_json: "{not json",
        ..text
    };
    assert_eq!(
        reason(l.raise_request(&call(2), &fp("s"), &garbage, Some(1000))),
        Reason::BadArgument
    );
    assert!(l.pending("").unwrap().is_empty());
    // The same arguments under their own hash, and "not shown", are raised.
    l.raise_request(&call(2), &fp("s"), &text, Some(1000))
        .unwrap();
    let none = RaiseText {
        args_json: "",
        ..text
    };
    l.raise_request(&call(3), &fp("s"), &none, Some(1000))
        .unwrap();
    assert_eq!(l.pending("").unwrap().len(), 2);
}

/// A raise under caller `i` of the same call: a new row per caller.
fn raise_as(l: &Ledger, i: i64) -> Result<Raised, DaemonError> {
    let b = Binding {
        caller: format!("c{i}"),
        ..call(1)
    };
    let text = RaiseText {
        summary: "t {..}",
        args_json: &args_of(1),
        covers: "",
        preview: "",
        real_paths: None,
    };
    l.raise_request(&b, &fp("s"), &text, Some(1000))
}

/// Raises under many caller names each pass their own rate limit: only the total keeps
/// a flood from filling the disk. At the cap a new request is refused, a known one is
/// still re-raised, and expired rows make room at once.
#[test]
fn raised_requests_are_capped_in_total_whatever_the_caller_names() {
    let (_d, l) = ledger();
    for i in 0..MAX_RAISED {
        raise_as(&l, i).unwrap();
    }
    assert_eq!(reason(raise_as(&l, MAX_RAISED)), Reason::RateLimited);
    let again = raise_as(&l, 7).unwrap();
    assert_eq!(again.request_id, raise_as(&l, 7).unwrap().request_id);
    let n: i64 = l.store.scalar("SELECT count(*) FROM raised").unwrap();
    assert_eq!(n, MAX_RAISED);

    // Requests that expire at once: the cap sweeps them instead of refusing.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::for_test(dir.path());
    let l = Ledger::new(store, Secret::ephemeral(), 0);
    for i in 0..=MAX_RAISED + 5 {
        raise_as(&l, i).unwrap();
    }
    let n: i64 = l.store.scalar("SELECT count(*) FROM raised").unwrap();
    assert!(n <= MAX_RAISED, "{n}");
}

/// Call outcomes have a bucket of their own: a stream of them (approved work, or a
/// client appending them at will) is dropped and counted past the rate, and never uses
/// up the rate a caller's raises and declines are refused by.
#[test]
fn call_outcomes_are_limited_apart_from_raises_and_never_refused() {
    let (_d, l) = ledger();
    let l = l.with_limits(crate::limits::Limits::new(60, 3));
    let outcome = || crate::record::NewEvent {
        vault: "v".into(),
        tool: "t".into(),
        caller: "c1".into(),
        detail: serde_json::json!({"outcome": "executed"}),
        ..Default::default()
    };
    for _ in 0..10 {
        l.append_client_event(events::CALL_OUTCOME, outcome())
            .expect("an outcome is never refused");
    }
    let kinds = |k: &str| -> i64 {
        l.store
            .scalar(&format!("SELECT count(*) FROM events WHERE kind = '{k}'"))
            .unwrap()
    };
    assert_eq!(kinds(events::CALL_OUTCOME), 3, "the burst, then dropped");
    // The caller's own bucket is whole: three raises pass, the fourth is limited.
    for _ in 0..3 {
        raise_as(&l, 1).unwrap();
    }
    assert_eq!(reason(raise_as(&l, 1)), Reason::RateLimited);
}
