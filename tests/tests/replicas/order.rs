//! Events that commit out of id order: a follower (`--follow`, or a reader catching up
//! from its cursor after a reconnect) still sees each of them, once, in id order.
//!
//! Two transactions on two connections write an event each the way tcd does
//! (`tc_append_event`); the one with the lower id commits last. A reader that passed the
//! higher id before the lower one committed would never see the lower one.

use std::time::Duration;

use tc_proto::v1;
use tc_tests::{event_stream, Client};
use tokio_postgres::NoTls;

use super::Replicas;

/// How long the follower may take to deliver everything once all of it committed.
const WITHIN: Duration = Duration::from_secs(30);

/// A connection of the test's own to the ledger's database.
async fn connect(r: &Replicas) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::connect(&r.cluster.url_with_password(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    c
}

/// Writes one event of `kind` in `c`'s open transaction; returns its id.
async fn append(c: &tokio_postgres::Client, kind: &str) -> i64 {
    let row = c
        .query_one(
            "SELECT tc_append_event(0, $1, 'v', 't', 'c', '', '', '{}', NULL)",
            &[&kind],
        )
        .await
        .expect("tc_append_event");
    row.get(0)
}

/// One catch-up read: the events after `cursor` (no follow), as a reconnecting reader does.
async fn after(c: &mut Client, cursor: i64) -> Vec<v1::Event> {
    let s = c
        .list_events(v1::ListEventsRequest {
            after_id: cursor,
            limit: 0,
            follow: false,
        })
        .await
        .expect("list events")
        .into_inner();
    tc_tests::collect_events(s).await.expect("events")
}

/// The test events among `evs`, as (id, kind).
fn ours(evs: &[v1::Event]) -> Vec<(i64, String)> {
    evs.iter()
        .filter(|e| e.kind.starts_with("test."))
        .map(|e| (e.id, e.kind.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_after_a_higher_id_is_still_seen_once() {
    let Some(r) = Replicas::start(2) else { return };
    let clients = r.clients().await;
    let (mut a, mut b) = (clients[0].clone(), clients[1].clone());
    let mut follow = event_stream(&mut b, true).await.expect("follow");
    let (first, second) = (connect(&r).await, connect(&r).await);
    first.batch_execute("BEGIN").await.unwrap();
    let low = append(&first, "test.first").await;
    second.batch_execute("BEGIN").await.unwrap();
    let high = append(&second, "test.second").await;
    assert!(
        low < high,
        "the first writer has the lower id: {low} {high}"
    );
    second.batch_execute("COMMIT").await.unwrap();

    // The higher id is committed, the lower not yet: a reader now, then again from its
    // cursor once the lower one committed, must see both.
    let early = after(&mut a, 0).await;
    let cursor = early.last().map_or(0, |e| e.id);
    first.batch_execute("COMMIT").await.unwrap();
    let late = after(&mut a, cursor).await;
    let mut seen = ours(&early);
    seen.extend(ours(&late));
    assert_eq!(
        seen,
        vec![(low, "test.first".into()), (high, "test.second".into())],
        "read before the lower id committed: {:?}; after: {:?}",
        ours(&early),
        ours(&late)
    );

    // The follower on the other replica, woken by both commits, saw each once, in order.
    append(&second, "test.end").await; // autocommit
    let streamed = tokio::time::timeout(WITHIN, async {
        let mut out = Vec::new();
        loop {
            let e = follow.message().await.expect("stream").expect("event");
            let end = e.kind == "test.end";
            out.push(e);
            if end {
                return out;
            }
        }
    })
    .await
    .expect("the follower reaches the last event");
    let got = ours(&streamed);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(&got[..2], &seen[..], "{got:?}");
    let ids: Vec<i64> = streamed.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in id order, no doubles: {ids:?}"
    );
}
