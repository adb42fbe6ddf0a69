//! The audit log over gRPC: list (with after_id and limit) and follow, in commit order.

use std::time::Duration;

use tc_proto::v1;
use tc_tests::*;

#[tokio::test(flavor = "multi_thread")]
async fn events_list_and_follow_in_order() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let mut follow = event_stream(&mut c, true).await.unwrap();
    let b = binding("notes", "write_file", "stdio", "events");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let r = redeem(&mut c, &token, &b, &fp).await.unwrap();
    record_consumed(&mut c, &b, &fp, &r).await.unwrap();
    let want = [
        "tc.elicit.requested",
        "tc.elicit.minted",
        "tc.elicit.redeemed",
        "tc.elicit.consumed",
    ];
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let e = tokio::time::timeout(Duration::from_secs(5), follow.message())
            .await
            .expect("followed event in time")
            .unwrap()
            .expect("stream open");
        got.push(e);
    }
    let kinds: Vec<&str> = got.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, want);
    assert!(got.windows(2).all(|w| w[0].id < w[1].id), "ids increase");
    for e in &got {
        assert_eq!(
            (&*e.vault, &*e.tool, &*e.caller, &*e.args_hash),
            (&*b.vault, &*b.tool, &*b.caller, &*b.args_hash)
        );
        assert!(e.at_ms > 0);
        assert!(!e.detail_json.contains(&token), "no token in the log");
    }
    assert!(got[2].detail_json.contains(&r));

    // A later commit reaches the open follow stream too.
    c.append_event(v1::AppendEventRequest {
        kind: "tc.elicit.declined".into(),
        vault: "notes".into(),
        detail_json: "{}".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), follow.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.kind, "tc.elicit.declined");

    // The listing agrees with the stream; after_id and limit page it.
    let all = events(&mut c).await;
    assert_eq!(all.len(), 5);
    assert_eq!(all[..4], got[..]);
    let mut s = c
        .list_events(v1::ListEventsRequest {
            after_id: all[1].id,
            limit: 2,
            follow: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut page = Vec::new();
    while let Some(e) = s.message().await.unwrap() {
        page.push(e);
    }
    assert_eq!(page, all[2..4]);
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_may_append_only_client_kinds() {
    let (_d, mut c) = Daemon::start_with_client().await;
    for kind in ["tc.elicit.redeemed", "tc.auth.denied", "anything"] {
        refused(
            c.append_event(v1::AppendEventRequest {
                kind: kind.into(),
                ..Default::default()
            })
            .await,
            Reason::BadArgument,
        );
    }
    assert!(events(&mut c).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_counters_reflect_the_ledger() {
    let (d, mut c) = Daemon::with_ttl_and_client(77).await;
    let b = binding("notes", "write_file", "stdio", "status");
    let _token = raise_and_mint(&mut c, &b, &h("fp")).await;
    let st = c.status(v1::StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(st.elicit_ttl_seconds, 77);
    assert_eq!(st.pending_requests, 1);
    assert_eq!(st.live_tokens, 1);
    assert_eq!(st.events, 2);
    assert_eq!(st.cache_dir, d.cache_dir.display().to_string());
    let counters = counters(&mut c).await;
    assert!(!counters.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn counters_are_rebuilt_from_the_event_log_after_a_restart() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let b = binding("notes", "write_file", "stdio", "counted");
    raise_and_mint(&mut c, &b, &h("fp")).await;
    let value = |cs: &[v1::Counter], labels: &str| {
        cs.iter()
            .find(|x| x.name == "tc_events_total" && x.labels == labels)
            .map(|x| x.value)
    };
    let before = counters(&mut c).await;
    assert_eq!(value(&before, "kind=\"tc.elicit.minted\""), Some(1));
    drop(c);
    d.restart();
    let mut c = d.client().await;
    let after = counters(&mut c).await;
    assert_eq!(value(&after, "kind=\"tc.elicit.requested\""), Some(1));
    assert_eq!(value(&after, "kind=\"tc.elicit.minted\""), Some(1));
}
