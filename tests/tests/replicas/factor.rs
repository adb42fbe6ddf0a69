//! The TOTP factor across replicas: three guarded tcd processes (root as the one human, run
//! by root) on one database, spoken to over their real sockets.
//!
//! Enrolled on A and confirmed on B; ten wrong codes spread over the three lock the factor
//! on all of them; root unlocks on C; a code approves on A and is `factor_replayed` on B.

use std::time::{Duration, Instant};

use tc_core::codes::events;
use tc_proto::v1;
use tc_tests::pty::{away_from_a_step_edge, base32_decode, step_now, totp, wrong_code};
use tc_tests::{binding, h, raise_request, reason_of, redeem_approved, Client, Reason};

use super::Replicas;

/// The `[guarded]` table of every replica: root is the human and runs tcd.
const GUARDED: &str = "\n[guarded]\nhumans = [\"root\"]\ndaemon_user = \"root\"\n";

/// Approves request `id` through `c` with `code`; the refusal's reason, if refused.
async fn approve(c: &mut Client, id: &str, code: &str) -> Option<Reason> {
    let r = c
        .approve(v1::ApproveRequest {
            request_id: id.into(),
            factor: Some(v1::Factor { totp: code.into() }),
            ..Default::default()
        })
        .await;
    r.err()
        .map(|s| reason_of(&s).unwrap_or_else(|| panic!("{s:?}")))
}

/// [`approve`], waiting out the delay a wrong code set (a try inside it is refused
/// `factor_delay` unevaluated, and uncounted); gives up after 10 s.
async fn approve_after_delay(c: &mut Client, id: &str, code: &str) -> Option<Reason> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match approve(c, id, code).await {
            Some(Reason::FactorDelay) if Instant::now() < deadline => {
                // The delay is at most 1 s; polled, as nothing announces its end.
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            other => return other,
        }
    }
}

/// Enrolls root through `a` and confirms through `b` with step T−1's code (so step T is
/// fresh for the first approval); the secret.
async fn enrolled(a: &mut Client, b: &mut Client) -> Vec<u8> {
    let e = a
        .enroll_factor(v1::EnrollFactorRequest {
            user: "root".into(),
        })
        .await
        .expect("enroll on A")
        .into_inner();
    let secret = base32_decode(&e.secret_base32);
    away_from_a_step_edge();
    b.confirm_factor(v1::ConfirmFactorRequest {
        user: "root".into(),
        factor: Some(v1::Factor {
            totp: totp(&secret, step_now() - 1),
        }),
    })
    .await
    .expect("confirm on B");
    secret
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_used_on_one_replica_is_replayed_on_another_and_wrong_codes_lock_all() {
    let Some(r) = Replicas::start_with(3, "mode = \"guarded\"\n", GUARDED) else {
        return;
    };
    let mut c = r.clients().await;
    let (mut a, mut b) = (c[0].clone(), c[1].clone());
    let secret = enrolled(&mut a, &mut b).await;
    let call = binding("v", "write_file", "stdio", "{\"path\":\"notes.md\"}");
    let fp = h("state");
    let id = raise_request(&mut a, &call, &fp, "write notes.md")
        .await
        .expect("raise")
        .request_id;
    // Ten wrong codes, round robin over the three replicas: the tenth locks.
    let mut got = Vec::new();
    for i in 0..10 {
        got.push(approve_after_delay(&mut c[i % 3], &id, &wrong_code(&secret, i as u32)).await);
    }
    let mut want = vec![Some(Reason::FactorInvalid); 9];
    want.push(Some(Reason::FactorLocked));
    assert_eq!(got, want);
    // Locked everywhere: even a right code (the next step's, unused) is refused on each.
    let next = totp(&secret, step_now() + 1);
    for (i, c) in c.iter_mut().enumerate() {
        let why = approve(c, &id, &next).await;
        assert_eq!(why, Some(Reason::FactorLocked), "replica {i}");
    }
    let o = r.daemons[2].tcctl(&["unlock", "--user", "root"]);
    assert!(o.status.success(), "{o:?}");
    // The code of this step approves on A, once; on B it is a replay.
    away_from_a_step_edge();
    let code = totp(&secret, step_now());
    assert_eq!(approve(&mut a, &id, &code).await, None, "approve on A");
    let again = raise_request(&mut b, &binding("v", "t", "stdio", "other"), &fp, "other")
        .await
        .expect("raise")
        .request_id;
    assert_eq!(
        approve(&mut b, &again, &code).await,
        Some(Reason::FactorReplayed),
        "the same code on B"
    );
    // A's approval is real and single use; the log (read on C) counts what was done.
    let redeem = redeem_approved(&mut c[2], &call, &fp).await;
    redeem.expect("redeem on C");
    let spent = redeem_approved(&mut c[1], &call, &fp).await;
    let spent = spent.expect_err("redeemed twice");
    assert_eq!(reason_of(&spent), Some(Reason::NotApproved), "{spent:?}");
    let log = tc_tests::events(&mut c[2]).await;
    let n = |k: &str| log.iter().filter(|e| e.kind == k).count();
    assert_eq!(n(events::FACTOR_ENROLLED), 2, "generated, then confirmed");
    assert_eq!(
        n(events::FACTOR_FAILED),
        11,
        "ten wrong codes and one replay"
    );
    assert_eq!(n(events::FACTOR_LOCKED), 1);
    assert_eq!(n(events::FACTOR_UNLOCKED), 1);
    assert_eq!(n(events::FACTOR_REPLAYED), 1);
    assert_eq!(n(events::APPROVED), 1);
}
