//! The horizon on a real server (with `TC_TEST_POSTGRES_URL`): an event whose transaction
//! is still open holds back every reader of the log and retention at its id, and once it
//! commits each reader sees it, once, in id order.

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
    let tx = PgTx::new(&open, s.handle(), true);
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
    assert_eq!(ids(0), before);
    // Retention's candidates too (the newest row is never one of them).
    let oldest = s
        .write_logged(|c, _| Ok(Ok(c.oldest_events(100)?)))
        .unwrap()
        .0
        .unwrap();
    assert_eq!(oldest.iter().map(|e| e.id).collect::<Vec<_>>(), before);

    tx.batch("COMMIT").unwrap();
    // From the cursor a reader had: the late commit, then the rest, once each.
    let mut rest = vec![held];
    rest.extend(&after);
    assert_eq!(ids(before[2]), rest);
    assert_eq!(ids(0).len(), 6);
}
