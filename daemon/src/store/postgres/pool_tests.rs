//! The rules' pool on a real server (with `TC_TEST_POSTGRES_URL`): a connection the
//! server ended while idle, or whose rule panicked mid-transaction, is never leased again;
//! a connection can be driven from inside a runtime's worker too.

use std::time::{Duration, Instant};

use super::testing::schema_store;
use super::tx::PgTx;

fn url() -> Option<String> {
    std::env::var("TC_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// The backend pid of a leased connection.
fn pid(lease: &super::pool::Lease<'_>) -> i64 {
    let tx = PgTx::new(lease.conn(), false);
    let row = tx.one("SELECT pg_backend_pid()::BIGINT", &[]).unwrap();
    row.get(0)
}

#[test]
fn a_connection_the_server_ended_while_idle_is_replaced_not_leased() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = schema_store(&url, dir.path());
    let (a, b) = (s.client().unwrap(), s.client().unwrap());
    let (dead, other) = (pid(&a), pid(&b));
    let tx = PgTx::new(b.conn(), false);
    assert!(tx
        .one("SELECT pg_terminate_backend($1::INT)", &[&(dead as i32)])
        .unwrap()
        .get::<_, bool>(0));
    let start = Instant::now();
    while tx
        .one(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::INT",
            &[&(dead as i32)],
        )
        .unwrap()
        .get::<_, i64>(0)
        > 0
    {
        assert!(start.elapsed() < Duration::from_secs(10), "still running");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(b);
    drop(a); // idle, ended: the next lease must not be it
    let (x, y) = (s.client().unwrap(), s.client().unwrap());
    let pids = [pid(&x), pid(&y)];
    assert!(!pids.contains(&dead), "{pids:?} holds the ended {dead}");
    assert!(pids.contains(&other), "{pids:?}: the live one was not kept");
    drop((x, y));
    assert_eq!(s.scalar("SELECT 7::BIGINT").unwrap(), 7);
}

#[tokio::test]
async fn a_rule_run_on_a_runtime_worker_still_completes() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Inside this test's runtime: starting a connection's runtime here would panic, so the
    // store drives it on a thread of its own.
    let s = schema_store(&url, dir.path());
    assert_eq!(s.scalar("SELECT (41 + 1)::BIGINT").unwrap(), 42);
}

#[test]
fn a_connection_whose_rule_panicked_inside_a_transaction_is_never_leased_again() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = schema_store(&url, dir.path());
    s.exec_sql("CREATE TABLE half (v INT)").unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let lease = s.client().unwrap();
        let tx = PgTx::new(lease.conn(), true);
        tx.exec("INSERT INTO half VALUES (1)", &[]).unwrap();
        panic!("a rule's bug, inside BEGIN");
    }));
    assert!(panicked.is_err());
    // Handed back, it would be the next lease, and see (then commit) its own insert.
    for _ in 0..3 {
        assert_eq!(s.scalar("SELECT count(*) FROM half").unwrap(), 0);
    }
}
