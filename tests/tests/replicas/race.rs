//! Single use across replicas: three tcd processes on one database, 32 concurrent
//! redeemers of the same token, request state and approval, spread over the three; exactly
//! one winner each, every loser refused `spent`, and every event accounted for.

use std::collections::BTreeMap;

use tc_core::codes::events;
use tc_proto::v1;
use tc_tests::{
    binding, h, raise_and_mint, raise_request, reason_of, redeem_approved, Client, Reason,
};
use tokio::task::JoinSet;

use super::Replicas;

/// Concurrent redeemers per race.
const RACERS: usize = 32;

fn rounds() -> usize {
    tc_tests::env_parse("TC_REPLICA_ROUNDS").unwrap_or(200)
}

/// Runs `RACERS` copies of `f` (one per client, round robin) at once; returns (winners,
/// refusals by reason).
async fn race<F, Fut>(clients: &[Client], f: F) -> (usize, BTreeMap<String, usize>)
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..RACERS {
        set.spawn(f(clients[i % clients.len()].clone()));
    }
    let (mut won, mut refused) = (0, BTreeMap::new());
    while let Some(r) = set.join_next().await {
        match r.expect("racer") {
            Ok(()) => won += 1,
            Err(s) => {
                let why = reason_of(&s).map_or_else(
                    || format!("{:?}: {}", s.code(), s.message()),
                    |r| r.as_str().to_string(),
                );
                *refused.entry(why).or_insert(0) += 1;
            }
        }
    }
    (won, refused)
}

fn only_spent(refused: &BTreeMap<String, usize>, what: &str, round: usize) {
    let want: BTreeMap<String, usize> = [(Reason::Spent.as_str().to_string(), RACERS - 1)].into();
    assert_eq!(
        refused, &want,
        "{what}, round {round}: every loser is refused as spent"
    );
}

async fn token_round(clients: &[Client], round: usize) {
    let b = binding("v", "t", "c", &format!("token-{round}"));
    let fp = h("fp");
    let mut minter = clients[round % clients.len()].clone();
    let token = raise_and_mint(&mut minter, &b, &fp).await;
    let (won, refused) = race(clients, |mut c| {
        let (token, b, fp) = (token.clone(), b.clone(), fp.clone());
        async move { tc_tests::redeem(&mut c, &token, &b, &fp).await.map(|_| ()) }
    })
    .await;
    assert_eq!(won, 1, "token, round {round}: winners ({refused:?})");
    only_spent(&refused, "token", round);
}

async fn state_round(clients: &[Client], round: usize) {
    let b = binding("v", "t", "c", &format!("state-{round}"));
    let mut sealer = clients[(round + 1) % clients.len()].clone();
    let state = sealer
        .seal_state(v1::SealStateRequest {
            binding: Some(b.clone()),
            state_fp: h("fp"),
            inner: b"inner".to_vec(),
        })
        .await
        .expect("seal")
        .into_inner()
        .request_state;
    let (won, refused) = race(clients, |mut c| {
        let (state, b) = (state.clone(), b.clone());
        async move {
            c.open_state(v1::OpenStateRequest {
                request_state: state,
                binding: Some(b),
                consume: true,
                current_state_fp: h("fp"),
            })
            .await
            .map(|_| ())
        }
    })
    .await;
    assert_eq!(
        won, 1,
        "request state, round {round}: winners ({refused:?})"
    );
    only_spent(&refused, "request state", round);
}

async fn approval_round(clients: &[Client], round: usize) {
    let b = binding("v", "t", "c", &format!("approval-{round}"));
    let fp = h("fp");
    let n = clients.len();
    let raised = raise_request(&mut clients[round % n].clone(), &b, &fp, "race")
        .await
        .expect("raise");
    // Approved on another replica than the one it was raised on.
    clients[(round + 1) % n]
        .clone()
        .approve(v1::ApproveRequest {
            request_id: raised.request_id,
            ..Default::default()
        })
        .await
        .expect("approve");
    let (won, refused) = race(clients, |mut c| {
        let (b, fp) = (b.clone(), fp.clone());
        async move { redeem_approved(&mut c, &b, &fp).await.map(drop) }
    })
    .await;
    assert_eq!(won, 1, "approval, round {round}: winners ({refused:?})");
    // Losers that read the approval before the winner's commit are refused `spent` by
    // the conditional update; those that read it after see no live approval.
    let bad: Vec<_> = refused
        .keys()
        .filter(|k| *k != Reason::Spent.as_str() && *k != Reason::NotApproved.as_str())
        .collect();
    assert!(bad.is_empty(), "approval, round {round}: {refused:?}");
}

/// Counts the events of each kind in the shared log, through a replica that did none of
/// the minting (what it lists is what PostgreSQL committed).
async fn kinds(c: &mut Client) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in tc_tests::events(c).await {
        *out.entry(e.kind).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_one_winner_per_token_state_and_approval() {
    let Some(r) = Replicas::start(3) else { return };
    let clients = r.clients().await;
    let n = rounds();
    for round in 0..n {
        token_round(&clients, round).await;
        state_round(&clients, round).await;
        approval_round(&clients, round).await;
    }
    let got = kinds(&mut clients[2].clone()).await;
    let count = |k: &str| got.get(k).copied().unwrap_or(0);
    assert_eq!(count(events::REQUESTED), 2 * n, "{got:?}");
    assert_eq!(count(events::MINTED), n, "{got:?}");
    assert_eq!(count(events::APPROVED), n, "{got:?}");
    assert_eq!(
        count(events::REDEEMED),
        2 * n,
        "one per token and approval: {got:?}"
    );
    // Spent request states are logged as refusals (rate limits are lifted here).
    assert_eq!(count(events::REFUSED), (RACERS - 1) * n, "{got:?}");
    // The database agrees: one spent row per token and approval, one used state per round.
    let spent = r
        .cluster
        .query("SELECT count(*) FROM tokens WHERE consumed_at IS NOT NULL");
    assert_eq!(spent, (2 * n).to_string());
    let states = r.cluster.query("SELECT count(*) FROM consumed_states");
    assert_eq!(states, n.to_string());
}
