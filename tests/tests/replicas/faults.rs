//! Faults during the races: one replica SIGKILLed and restarted in a loop, and PostgreSQL
//! itself restarted (immediate stop: a crash) twice, while 32 racers over three replicas
//! race for each token, request state (consume) and approval (approve-by-request redeem).
//! Replies may fail (a killed replica, a dead connection), but nothing is spent twice, and
//! every spend and every refusal a racer was told has its one committed event.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tc_core::codes::events;
use tc_proto::v1;
use tc_tests::postgres::Cluster;
use tc_tests::{binding, h, reason_of, redeem_approved, Client, Daemon, Reason};
use tokio::task::JoinSet;

use super::Replicas;

/// Concurrent racers per race.
const RACERS: usize = 32;

fn rounds() -> usize {
    tc_tests::env_parse("TC_FAULT_ROUNDS").unwrap_or(40)
}

/// What the racers of one race heard back: told to run, refused as a loser (`spent`, or
/// for an approval `not_approved` once the winner's commit is visible), or no answer
/// (the replica died, the connection broke, the store was down: an outcome unknown).
#[derive(Debug, Default, Clone, Copy)]
struct Heard {
    ran: usize,
    spent: usize,
    not_approved: usize,
    lost: usize,
}

/// `f` again until it answers Ok, while the store and the killed replica come back (any
/// error is retried: setup steps are safe to repeat); panics after 30 s.
async fn retrying<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    for _ in 0..600 {
        match f().await {
            Ok(v) => return v,
            // Polled: nothing announces that the database accepts again.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("{what}: no success for 30 s");
}

/// Runs `RACERS` copies of `f` over `clients` (round robin) at once, crash-restarting
/// PostgreSQL in the middle when `restart` is given.
async fn race<F, Fut, T>(clients: &[Client], restart: Option<&Cluster>, f: F) -> Heard
where
    F: Fn(Client) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>> + Send + 'static,
    T: Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..RACERS {
        set.spawn(f(clients[i % clients.len()].clone()));
    }
    if let Some(cluster) = restart {
        tokio::task::block_in_place(|| cluster.restart());
    }
    let mut heard = Heard::default();
    while let Some(r) = set.join_next().await {
        match r.expect("racer") {
            Ok(_) => heard.ran += 1,
            Err(s) => match reason_of(&s) {
                Some(Reason::Spent) => heard.spent += 1,
                Some(Reason::NotApproved) => heard.not_approved += 1,
                Some(other) => panic!("a racer was refused {other:?}: {s:?}"),
                None => heard.lost += 1,
            },
        }
    }
    assert!(
        heard.ran <= 1,
        "{heard:?}: more than one racer was told to run"
    );
    heard
}

/// One round: the racers' clients, the replica its setup goes through (one that is not
/// killed), and the cluster to crash-restart mid-race, if this round does.
struct Round<'a> {
    clients: &'a [Client],
    setup: Client,
    pg: Option<&'a Cluster>,
}

impl Round<'_> {
    /// A token for `b`, raised and minted; the racers redeem it.
    async fn token(&self, b: &v1::Binding) -> Heard {
        let fp = h("fp");
        let token = retrying("mint", || {
            let (mut c, b, fp) = (self.setup.clone(), b.clone(), fp.clone());
            async move {
                tc_tests::raise_request(&mut c, &b, &fp, "faults").await?;
                let mint = v1::MintRequest {
                    binding: Some(b),
                    ..Default::default()
                };
                Ok(c.mint(mint).await?.into_inner().token)
            }
        })
        .await;
        race(self.clients, self.pg, |mut c| {
            let (token, b, fp) = (token.clone(), b.clone(), fp.clone());
            async move { tc_tests::redeem(&mut c, &token, &b, &fp).await }
        })
        .await
    }

    /// A request state for `b`, sealed; the racers consume it.
    async fn state(&self, b: &v1::Binding) -> Heard {
        let seal = v1::SealStateRequest {
            binding: Some(b.clone()),
            state_fp: h("fp"),
            inner: b"inner".to_vec(),
        };
        let sealed = retrying("seal", || {
            let (mut c, seal) = (self.setup.clone(), seal.clone());
            async move { c.seal_state(seal).await }
        })
        .await;
        let state = sealed.into_inner().request_state;
        race(self.clients, self.pg, |mut c| {
            let open = v1::OpenStateRequest {
                request_state: state.clone(),
                binding: Some(b.clone()),
                consume: true,
                current_state_fp: h("fp"),
            };
            async move { c.open_state(open).await }
        })
        .await
    }

    /// A request for `b`, raised and approved (an approval whose reply was lost reads
    /// `spent` on the retry: approved already); the racers redeem it.
    async fn approval(&self, b: &v1::Binding) -> Heard {
        let fp = h("fp");
        let raise = || {
            let (mut c, b, fp) = (self.setup.clone(), b.clone(), fp.clone());
            async move { tc_tests::raise_request(&mut c, &b, &fp, "faults").await }
        };
        let id = retrying("raise", raise).await.request_id;
        let approve = || {
            let (mut c, request_id) = (self.setup.clone(), id.clone());
            async move {
                let r = c.approve(v1::ApproveRequest {
                    request_id,
                    ..Default::default()
                });
                match r.await {
                    Err(s) if reason_of(&s) == Some(Reason::Spent) => Ok(()),
                    r => r.map(drop),
                }
            }
        };
        retrying("approve", approve).await;
        race(self.clients, self.pg, |mut c| {
            let (b, fp) = (b.clone(), fp.clone());
            async move { redeem_approved(&mut c, &b, &fp).await }
        })
        .await
    }
}

/// Kills `victim` with SIGKILL every 150 ms and starts it again, until `stop`; returns
/// the number of kills and the replica.
fn kill_loop(
    mut victim: Daemon,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, Daemon)> {
    std::thread::spawn(move || {
        let mut kills = 0;
        while !stop.load(Ordering::Relaxed) {
            // Paces the loop (each kill lands in whatever the replica is doing).
            std::thread::sleep(Duration::from_millis(150));
            victim.kill9();
            kills += 1;
            // A start may meet PostgreSQL down (a restart): try again.
            while std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| victim.start_again()))
                .is_err()
            {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        (kills, victim)
    })
}

/// The race of each kind a round ran, by its binding's `args_hash`.
#[derive(Default)]
struct Done {
    tokens: BTreeMap<String, Heard>,
    states: BTreeMap<String, Heard>,
    approvals: BTreeMap<String, Heard>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_and_a_postgres_restart_never_spend_twice_nor_lose_an_event() {
    let Some(mut r) = Replicas::start(3) else {
        return;
    };
    let clients = r.clients().await;
    let stop = Arc::new(AtomicBool::new(false));
    let kills = kill_loop(r.daemons.pop().expect("third replica"), stop.clone());
    let n = rounds();
    let mut done = Done::default();
    for round in 0..n {
        let this = Round {
            clients: &clients,
            // Set up through the replicas that are not killed; the races use all three.
            setup: clients[round % 2].clone(),
            pg: (round == n / 3 || round == 2 * n / 3).then_some(&r.cluster),
        };
        let call = |kind: &str| binding("v", "t", "c", &format!("{kind}-{round}"));
        let (t, s, a) = (call("token"), call("state"), call("approval"));
        done.tokens
            .insert(t.args_hash.clone(), this.token(&t).await);
        done.states
            .insert(s.args_hash.clone(), this.state(&s).await);
        let heard = this.approval(&a).await;
        done.approvals.insert(a.args_hash, heard);
    }
    stop.store(true, Ordering::Relaxed);
    let (kills, _victim) = kills.join().expect("kill loop");
    assert!(kills >= 3, "the loop killed the replica {kills} times");
    let sum = |m: &BTreeMap<String, Heard>| {
        m.values().fold(Heard::default(), |a, h| Heard {
            ran: a.ran + h.ran,
            spent: a.spent + h.spent,
            not_approved: a.not_approved + h.not_approved,
            lost: a.lost + h.lost,
        })
    };
    eprintln!(
        "{n} rounds, {kills} kills: tokens {:?}, states {:?}, approvals {:?}",
        sum(&done.tokens),
        sum(&done.states),
        sum(&done.approvals)
    );
    spends_match_events(&r.cluster, &done);
    states_match_events(&r.cluster, &done);
    let told = done.tokens.values().chain(done.approvals.values());
    let told = told.filter(|h| h.ran == 1).count();
    assert!(
        told >= n,
        "most races have a winner that heard back ({told} of {})",
        2 * n
    );
}

/// `kind`'s events grouped by args_hash, as PostgreSQL committed them (`filter`: more of
/// the WHERE clause).
fn logged(cluster: &Cluster, kind: &str, filter: &str) -> BTreeMap<String, usize> {
    let rows = cluster.query(&format!(
        "SELECT args_hash, count(*) FROM events WHERE kind = '{kind}' {filter} GROUP BY args_hash"
    ));
    parse_counts(&rows)
}

fn parse_counts(rows: &str) -> BTreeMap<String, usize> {
    rows.lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(a, n)| (a.to_string(), n.parse().unwrap()))
        .collect()
}

/// Tokens and approvals: each spent row has exactly its one `redeemed` event (same
/// commit), none is spent twice, a racer told to run has a committed spend behind it, and
/// each approval was given once.
fn spends_match_events(cluster: &Cluster, done: &Done) {
    let spent = parse_counts(&cluster.query(
        "SELECT args_hash, count(*) FROM tokens WHERE consumed_at IS NOT NULL GROUP BY args_hash",
    ));
    let redeemed = logged(cluster, events::REDEEMED, "");
    assert_eq!(
        spent, redeemed,
        "every spent token has exactly its redeemed event"
    );
    for (args, heard) in done.tokens.iter().chain(&done.approvals) {
        let n = redeemed.get(args).copied().unwrap_or(0);
        assert!(n <= 1, "{args}: spent {n} times");
        assert!(heard.ran <= n, "{args}: {heard:?} with no committed spend");
        // A loser told `spent` lost to a committed winner.
        assert!(heard.spent == 0 || n == 1, "{args}: {heard:?}, no spend");
    }
    let approved = logged(cluster, events::APPROVED, "");
    for args in done.approvals.keys() {
        assert_eq!(approved.get(args), Some(&1), "{args}: approved once");
    }
}

/// Request states: one consumed row per state at most (its nonce is the key), a racer
/// told `spent` has its refusal event (committed before the reply), and no more refusals
/// are logged than there were losers.
fn states_match_events(cluster: &Cluster, done: &Done) {
    let refused = logged(
        cluster,
        events::REFUSED,
        "AND detail LIKE '%\"what\":\"request_state\"%'",
    );
    let mut decided = 0;
    for (args, heard) in &done.states {
        let n = refused.get(args).copied().unwrap_or(0);
        assert!(heard.spent <= n, "{args}: {heard:?}, {n} refusals logged");
        assert!(
            n < RACERS,
            "{args}: {n} refusals logged, more than the losers"
        );
        decided += usize::from(heard.ran + heard.spent + n > 0);
    }
    let consumed: usize = cluster
        .query("SELECT count(*) FROM consumed_states")
        .parse()
        .unwrap();
    // Every state that anyone heard decided was consumed, and none twice.
    assert!(
        (decided..=done.states.len()).contains(&consumed),
        "{consumed} consumed states, {decided} decided of {}",
        done.states.len()
    );
}
