//! Live across replicas: a request raised through replica A reaches `events --follow` on
//! replica B at once (LISTEN/NOTIFY), and an approval given on B lets the retry through A
//! run once.

use std::time::Duration;

use tc_core::codes::events;
use tc_proto::v1;
use tc_tests::{binding, event_stream, h, next_event_of, raise_request, redeem_approved, Reason};

use super::Replicas;

/// How long a follower may take to see another replica's commit.
const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_on_one_replica_reaches_follow_on_another_and_its_approval_runs_once() {
    let Some(r) = Replicas::start(2) else { return };
    let clients = r.clients().await;
    let (mut a, mut b) = (clients[0].clone(), clients[1].clone());
    let mut follow = event_stream(&mut b, true).await.expect("follow");
    let call = binding("v", "t", "c", "live");
    let fp = h("fp");
    let raised = raise_request(&mut a, &call, &fp, "live")
        .await
        .expect("raise");
    // B's follow stream shows A's raise.
    let seen = next_event_of(&mut follow, events::REQUESTED, WITHIN).await;
    assert!(seen.detail_json.contains(&raised.request_id), "{seen:?}");
    // B's pending list has it too, and B approves it.
    let pending = b
        .list_pending(v1::ListPendingRequest::default())
        .await
        .expect("pending")
        .into_inner();
    assert!(format!("{pending:?}").contains(&raised.request_id));
    b.approve(v1::ApproveRequest {
        request_id: raised.request_id.clone(),
        ..Default::default()
    })
    .await
    .expect("approve on B");
    redeem_approved(&mut a, &call, &fp)
        .await
        .expect("the retry through A runs");
    let again = redeem_approved(&mut a, &call, &fp).await;
    assert_eq!(
        again.as_ref().err().and_then(tc_tests::reason_of),
        Some(Reason::NotApproved),
        "{again:?}"
    );
    // B's stream shows A's redemption.
    let redeemed = next_event_of(&mut follow, events::REDEEMED, WITHIN).await;
    assert_eq!(redeemed.args_hash, call.args_hash);
}
