//! The horizon on a real server (with `TC_TEST_POSTGRES_URL`): an event whose transaction
//! is still open holds back every reader of the log and retention at its id, and once it
//! commits each reader sees it, once, in id order.

use std::time::{Duration, Instant};

use super::testing::schema_store;
use super::tx::PgTx;
use crate::record::NewEvent;
use crate::store::queries::EventQueries;

fn event() -> NewEvent {
    NewEvent {
        kind: "k",
        ..Default::default()
    }
}

/// Calls `read` until it returns `want`, each result a prefix of it (the server is shared
/// with the parallel tests: their open transactions hold the horizon back too, briefly).
fn settles(what: &str, want: &[i64], read: impl Fn() -> Vec<i64>) {
    let start = Instant::now();
    loop {
        let got = read();
        assert!(
            want.starts_with(&got),
            "{what}: {got:?} is not a prefix of {want:?}"
        );
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: stuck at {got:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_open_transaction_holds_readers_and_retention_at_its_id() {
    let Some(url) = std::env::var("TC_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        return; // SQLite has one writer: nothing commits out of order there
    };
    let dir = tempfile::tempdir().unwrap();
    let s = schema_store(&url, dir.path());
    // Reads return at once: this test holds the server's horizon while its transaction
    // is open, so that must be short.
    s.held.settle_for(0);
    let commit_one = || {
        s.write_logged(|_, evs| {
            evs.push(event());
            Ok(Ok(()))
        })
        .unwrap()
        .1
    };
    let before: Vec<i64> = (0..3).map(|_| commit_one()).collect();
    // A transaction writes its event and stays open; two commit after it, with higher ids.
    let open = s.client().unwrap();
    let tx = PgTx::new(open.conn(), true);
    let held = tx.insert_event(&event(), "{}", 0).unwrap();
    let after: Vec<i64> = (0..2).map(|_| commit_one()).collect();
    assert!(
        before[2] < held && held < after[0],
        "{before:?} {held} {after:?}"
    );

    let ids = |from: i64| -> Vec<i64> {
        let evs = s.read(|c| Ok(c.events_after(from, 100, None)?)).unwrap();
        evs.iter().map(|e| e.id).collect()
    };
    // Readers stop below the open transaction's id, though higher ids are committed.
    settles("readers", &before, || ids(0));
    // Retention's candidates too (the newest row is never one of them).
    settles("retention", &before, || {
        let oldest = s.write_logged(|c, _| Ok(Ok(c.oldest_events(100)?)));
        oldest.unwrap().0.unwrap().iter().map(|e| e.id).collect()
    });

    tx.batch("COMMIT").unwrap();
    // From the cursor a reader had: the late commit, then the rest, once each.
    let mut rest = vec![held];
    rest.extend(&after);
    settles("after the commit", &rest, || ids(before[2]));
    assert_eq!(ids(0).len(), 6);
}
