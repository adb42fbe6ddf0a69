//! Faults during the race: one replica SIGKILLed and restarted in a loop, and PostgreSQL
//! itself restarted (immediate stop: a crash) twice, while 32 redeemers race for each
//! token over three replicas. Replies may fail (a killed replica, a dead connection), but
//! no token is spent twice and every spend has exactly its one event.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tc_core::codes::events;
use tc_proto::v1;
use tc_tests::{binding, h, Client};
use tokio::task::JoinSet;

use super::Replicas;

fn rounds() -> usize {
    tc_tests::env_parse("TC_FAULT_ROUNDS").unwrap_or(60)
}

/// Raise and mint through `c`, retrying while the store is coming back.
async fn mint(c: &mut Client, b: &v1::Binding, fp: &str) -> String {
    for _ in 0..600 {
        let raised = tc_tests::raise_request(c, b, fp, "faults").await;
        if raised.is_ok() {
            let minted = c
                .mint(v1::MintRequest {
                    binding: Some(b.clone()),
                    ..Default::default()
                })
                .await;
            if let Ok(m) = minted {
                return m.into_inner().token;
            }
        }
        // Waits for the database to accept again (polled: nothing else announces it).
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("could not mint for 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_and_a_postgres_restart_never_spend_a_token_twice_nor_lose_its_event() {
    let Some(mut r) = Replicas::start(3) else {
        return;
    };
    let clients = r.clients().await;
    let mut victim = r.daemons.pop().expect("third replica");
    let stop = Arc::new(AtomicBool::new(false));
    let kills = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut kills = 0;
            while !stop.load(Ordering::Relaxed) {
                // Paces the loop (each kill lands in whatever the replica is doing).
                std::thread::sleep(Duration::from_millis(150));
                victim.kill9();
                kills += 1;
                // A start may meet PostgreSQL down (a restart below): try again.
                while std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    victim.start_again()
                }))
                .is_err()
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            (kills, victim)
        })
    };
    let n = rounds();
    let fp = h("fp");
    let mut replies: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..n {
        let b = binding("v", "t", "c", &format!("fault-{round}"));
        let token = mint(&mut clients[round % 2].clone(), &b, &fp).await;
        let mut set = JoinSet::new();
        for i in 0..32 {
            let (mut c, token, b, fp) =
                (clients[i % 3].clone(), token.clone(), b.clone(), fp.clone());
            set.spawn(async move { tc_tests::redeem(&mut c, &token, &b, &fp).await.is_ok() });
        }
        if round == n / 3 || round == 2 * n / 3 {
            tokio::task::block_in_place(|| r.cluster.restart());
        }
        let mut won = 0;
        while let Some(ok) = set.join_next().await {
            won += usize::from(ok.expect("racer"));
        }
        assert!(won <= 1, "round {round}: {won} redeemers were told to run");
        replies.insert(b.args_hash.clone(), won);
    }
    stop.store(true, Ordering::Relaxed);
    let (kills, _victim) = kills.join().expect("kill loop");
    assert!(kills >= 3, "the loop killed the replica {kills} times");
    // The database: each spend has its one event, in the same commit.
    let spent = r.cluster.query(
        "SELECT args_hash, count(*) FROM tokens WHERE consumed_at IS NOT NULL GROUP BY args_hash",
    );
    let logged = r.cluster.query(&format!(
        "SELECT args_hash, count(*) FROM events WHERE kind = '{}' GROUP BY args_hash",
        events::REDEEMED
    ));
    let parse = |t: &str| -> BTreeMap<String, usize> {
        t.lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(a, n)| (a.to_string(), n.parse().unwrap()))
            .collect()
    };
    let (spent, logged) = (parse(&spent), parse(&logged));
    assert_eq!(
        spent, logged,
        "every spent token has exactly its redeemed event"
    );
    for (args, won) in &replies {
        let events = logged.get(args).copied().unwrap_or(0);
        assert!(events <= 1, "{args}: spent {events} times");
        assert!(
            *won <= events,
            "{args}: a redeemer ran with no committed spend"
        );
    }
    let told = replies.values().sum::<usize>();
    assert!(
        told >= n / 2,
        "most rounds have a winner that heard back ({told} of {n})"
    );
}
