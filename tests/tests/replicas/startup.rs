//! Start-up and a lost database: three replicas migrating one fresh database at once, a
//! database newer than the binary refused, and PostgreSQL down: gated calls fail closed
//! naming the store, and work again once it is back (no restart of tcd).

use std::time::Duration;

use tc_proto::v1;
use tc_tests::{binding, h, raise_and_mint};

use super::Replicas;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_migrate_one_fresh_database_at_once() {
    let Some(r) = Replicas::start(0) else { return };
    let ds: Vec<_> = (0..3).map(|_| r.prepared()).collect();
    // All three spawned before any is waited for: they race for the migration lock.
    let logs: Vec<_> = ds
        .iter()
        .map(|d| d.dir.path().join("race.stderr"))
        .collect();
    let mut children: Vec<_> = ds
        .iter()
        .zip(&logs)
        .map(|(d, log)| {
            let err = std::fs::File::create(log).unwrap();
            d.command().stderr(err).spawn().expect("spawn tcd")
        })
        .collect();
    let read = |p: &std::path::PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !logs.iter().all(|l| read(l).contains("tcd ready")) {
        for c in &mut children {
            assert!(
                c.try_wait().unwrap().is_none(),
                "a replica exited: {:#?}",
                logs.iter().map(read).collect::<Vec<_>>()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replicas did not come up"
        );
        // Polls the logs: the state waited for is each replica's "ready" line.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let logs: Vec<String> = logs.iter().map(read).collect();
    let migrated = logs
        .iter()
        .filter(|l| l.contains("postgresql schema migrated"))
        .count();
    assert_eq!(migrated, 1, "exactly one replica migrated:\n{logs:#?}");
    let version = r.cluster.query("SELECT version FROM tc_schema");
    assert_eq!(version, tc_tests::postgres::SCHEMA_VERSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_newer_than_the_binary_is_refused() {
    let Some(r) = Replicas::start(1) else { return };
    r.cluster.query("UPDATE tc_schema SET version = 99");
    let mut d = r.prepared();
    let (st, err) = d.start_refused();
    assert!(!st.success());
    assert!(
        err.contains("schema is version 99, newer than this tcd understands"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_down_gated_calls_fail_closed_and_recover_when_it_is_back() {
    let Some(r) = Replicas::start(1) else { return };
    let mut c = r.daemons[0].client().await;
    let fp = h("fp");
    let up = binding("v", "t", "c", "before");
    let token = raise_and_mint(&mut c, &up, &fp).await;
    r.cluster.stop("fast");
    let down = tc_tests::redeem(&mut c, &token, &up, &fp).await;
    let err = down.expect_err("a redeem with the database down");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("store is unreachable"), "{err:?}");
    r.cluster.start_again();
    // tcd reconnects by itself: the same token, never spent, redeems once.
    let mut outcome = None;
    for _ in 0..200 {
        match tc_tests::redeem(&mut c, &token, &up, &fp).await {
            Ok(id) => {
                outcome = Some(id);
                break;
            }
            Err(e) if e.code() == tonic::Code::Unavailable => {
                // Polls until the pool has a live connection again.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(outcome.is_some(), "tcd did not reconnect");
    let again = tc_tests::redeem(&mut c, &token, &up, &fp).await;
    assert!(again.is_err(), "spent once");
    let st = c
        .status(v1::StatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert!(st.store.contains("1 replica(s)"), "{}", st.store);
}
