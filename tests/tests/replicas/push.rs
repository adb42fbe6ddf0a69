//! Pushes across replicas: a request is pushed by the replica that raised it and by no
//! other, though every replica learns of it at once (LISTEN/NOTIFY).

use std::time::Duration;

use tc_core::codes::events;
use tc_tests::receiver::{Hit, Receiver};
use tc_tests::{binding, event_stream, h, next_event_of, raise_request};

use super::Replicas;

const WITHIN: Duration = Duration::from_secs(10);

/// A webhook target to `port` with a secret file of its own, as config text.
fn notify(dir: &std::path::Path, port: u16) -> String {
    let secret = dir.join("hook.key");
    std::fs::write(&secret, "replica-webhook-secret\n").unwrap();
    tc_tests::chmod(&secret, 0o600);
    format!(
        "\n[notify]\npage_url = \"https://tc.example/\"\n\n[[notify.webhook]]\nname = \"hook\"\n\
         url = \"http://127.0.0.1:{port}/\"\nsecret_file = \"{}\"\n",
        secret.display()
    )
}

/// The next push `r` got, without blocking the runtime's other tasks.
fn next(r: &Receiver) -> Hit {
    tokio::task::block_in_place(|| r.next())
}

fn id_of(hit: &Hit) -> String {
    hit.json()["request_id"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_replica_that_raised_a_request_pushes_it() {
    let Some(mut r) = Replicas::start(0) else {
        return;
    };
    let (ra, rb) = (Receiver::start(0, 200), Receiver::start(0, 200));
    for port in [ra.port, rb.port] {
        let mut d = r.prepared();
        let text = std::fs::read_to_string(&d.config).unwrap() + &notify(d.dir.path(), port);
        std::fs::write(&d.config, text).unwrap();
        d.start_again();
        r.daemons.push(d);
    }
    let clients = r.clients().await;
    let (mut a, mut b) = (clients[0].clone(), clients[1].clone());
    let mut on_a = event_stream(&mut a.clone(), true).await.expect("follow");
    let mut on_b = event_stream(&mut b.clone(), true).await.expect("follow");
    let fp = h("fp");

    let r1 = raise_request(&mut a, &binding("v", "t", "c", "one"), &fp, "s")
        .await
        .expect("raise on A");
    let first_a = next(&ra);
    assert_eq!(id_of(&first_a), r1.request_id);
    let link = format!("https://tc.example/requests/{}", r1.request_id);
    assert_eq!(
        first_a.json()["url"].as_str(),
        Some(link.as_str()),
        "under page_url"
    );
    // B has heard of r1 before it raises r2: had B pushed what it hears, r1 would be
    // in B's queue ahead of r2 (one sender, in order), and B's first push would be r1.
    let seen = next_event_of(&mut on_b, events::REQUESTED, WITHIN).await;
    assert!(seen.detail_json.contains(&r1.request_id), "{seen:?}");
    let r2 = raise_request(&mut b, &binding("v", "t", "c", "two"), &fp, "s")
        .await
        .expect("raise on B");
    let first_b = next(&rb);
    assert_eq!(id_of(&first_b), r2.request_id, "B pushed only its own");
    // The same from A's side.
    for want in [&r1.request_id, &r2.request_id] {
        let e = next_event_of(&mut on_a, events::REQUESTED, WITHIN).await;
        assert!(e.detail_json.contains(want.as_str()), "{e:?}");
    }
    let r3 = raise_request(&mut a, &binding("v", "t", "c", "three"), &fp, "s")
        .await
        .expect("raise on A");
    assert_eq!(id_of(&next(&ra)), r3.request_id, "A pushed only its own");
    assert_eq!((ra.count(), rb.count()), (2, 1));
}
