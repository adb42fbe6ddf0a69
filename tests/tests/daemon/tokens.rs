//! Tokens over gRPC against the real `tcd`: mint, pins, expiry, release, bindings,
//! replay drift, and single use under a race across several client processes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use tc_proto::v1;
use tc_tests::*;

const V: &str = "notes";
const T: &str = "write_file";
const C: &str = "stdio";

fn mint_req(b: &v1::Binding, pin: Option<&str>) -> v1::MintRequest {
    v1::MintRequest {
        binding: Some(b.clone()),
        state_fp: pin.map(str::to_string),
        ..Default::default()
    }
}

/// Raises the request the tests here mint for (its summary is what a human would see).
async fn raise(c: &mut Client, b: &v1::Binding, fp: &str) {
    raise_summarised(c, b, fp, "write notes/a.md").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mint_refused_without_a_raised_request() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "never raised");
    refused(c.mint(mint_req(&b, None)).await, Reason::NoRaisedRequest);
    // Raised for another caller or vault does not count either.
    raise(&mut c, &b, &h("fp")).await;
    let mut other = b.clone();
    other.caller = "http:someone".into();
    refused(
        c.mint(mint_req(&other, None)).await,
        Reason::NoRaisedRequest,
    );
    let mut other = b.clone();
    other.vault = "elsewhere".into();
    refused(
        c.mint(mint_req(&other, None)).await,
        Reason::NoRaisedRequest,
    );
    // A raised request for another tool with the same hash is a binding mismatch.
    let mut other = b.clone();
    other.tool = "delete_file".into();
    refused(
        c.mint(mint_req(&other, None)).await,
        Reason::BindingMismatch,
    );
    c.mint(mint_req(&b, None))
        .await
        .expect("mint for the raised call");
}

#[tokio::test(flavor = "multi_thread")]
async fn state_fp_pin_refuses_replaced_and_unknown_fingerprints() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "pinned");
    let (a, bb) = (h("state A"), h("state B"));
    raise(&mut c, &b, &a).await;
    raise(&mut c, &b, &bb).await;
    refused(
        c.mint(mint_req(&b, Some(&a))).await,
        Reason::StateFpMismatch,
    );
    refused(
        c.mint(mint_req(&b, Some(&h("never stored")))).await,
        Reason::StateFpMismatch,
    );
    let m = c
        .mint(mint_req(&b, Some(&bb)))
        .await
        .expect("pin B")
        .into_inner();
    assert_eq!(m.state_fp, bb);
    // The token is bound to B: redeeming at B works.
    redeem(&mut c, &m.token, &b, &bb)
        .await
        .expect("redeem at B");
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_token_refused() {
    let (_d, mut c) = Daemon::with_ttl_and_client(1).await;
    let b = binding(V, T, C, "expiring");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Expired);
    // The raised request has expired too: nothing to mint for.
    refused(c.mint(mint_req(&b, None)).await, Reason::NoRaisedRequest);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_and_garbage_tokens_refused() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "x");
    let fp = h("fp");
    refused(redeem(&mut c, "garbage", &b, &fp).await, Reason::Unknown);
    refused(
        redeem(
            &mut c,
            "tct_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            &b,
            &fp,
        )
        .await,
        Reason::Unknown,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn release_once_and_only_for_a_redemption() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "release me");
    let fp = h("fp");
    let rel = |id: &str| v1::ReleaseRequest {
        redemption_id: id.into(),
        reason: "acl".into(),
    };
    refused(c.release(rel("no-such-redemption")).await, Reason::Unknown);
    refused(c.release(rel("")).await, Reason::Unknown);

    let token = raise_and_mint(&mut c, &b, &fp).await;
    let r1 = redeem(&mut c, &token, &b, &fp).await.expect("redeem");
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Spent);
    c.release(rel(&r1)).await.expect("release");
    refused(c.release(rel(&r1)).await, Reason::Spent);
    // After release the same token redeems again, with a new redemption.
    let r2 = redeem(&mut c, &token, &b, &fp).await.expect("redeem again");
    assert_ne!(r1, r2);
    // The old redemption stays released: releasing it again must not free the token.
    refused(c.release(rel(&r1)).await, Reason::Spent);
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Spent);
    // Once the handler ran, the redemption is final.
    record_consumed(&mut c, &b, &fp, &r2)
        .await
        .expect("consumed");
    refused(c.release(rel(&r2)).await, Reason::Spent);
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Spent);
    // Recording the same redemption twice is refused.
    refused(record_consumed(&mut c, &b, &fp, &r2).await, Reason::Spent);
    let kinds: Vec<String> = events(&mut c).await.into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "hitl_released").count(),
        1,
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn release_restores_the_original_expiry() {
    let (_d, mut c) = Daemon::with_ttl_and_client(2).await;
    let b = binding(V, T, C, "expiry kept");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let r = redeem(&mut c, &token, &b, &fp).await.expect("redeem");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    c.release(v1::ReleaseRequest {
        redemption_id: r,
        reason: "cancelled".into(),
    })
    .await
    .expect("release");
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Expired);
}

#[tokio::test(flavor = "multi_thread")]
async fn binding_mismatch_on_each_field_leaves_the_token_usable() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "bound");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let variants = [
        v1::Binding {
            vault: "other-vault".into(),
            ..b.clone()
        },
        v1::Binding {
            tool: "delete_file".into(),
            ..b.clone()
        },
        v1::Binding {
            caller: "http:mallory".into(),
            ..b.clone()
        },
        v1::Binding {
            args_hash: h("other args"),
            ..b.clone()
        },
    ];
    for w in &variants {
        let s = refused(
            redeem(&mut c, &token, w, &fp).await,
            Reason::BindingMismatch,
        );
        assert_eq!(s.code(), tonic::Code::FailedPrecondition);
    }
    redeem(&mut c, &token, &b, &fp)
        .await
        .expect("still usable for the right call");
    let refusals = count_events(&mut c, "tc.elicit.refused").await;
    assert_eq!(refusals, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_drift_spends_the_token() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "drift");
    let fp = h("approved");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let s = refused(
        redeem(&mut c, &token, &b, &h("changed")).await,
        Reason::ReplayDrift,
    );
    assert_eq!(s.code(), tonic::Code::Aborted);
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Spent);
    assert!(events(&mut c)
        .await
        .iter()
        .any(|e| e.kind == "replay_drift" && e.state_fp == h("changed")));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_arguments_refused() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let mut b = binding(V, T, C, "x");
    b.args_hash = "ABC".into();
    refused(
        c.raise(v1::RaiseRequest {
            binding: Some(b.clone()),
            state_fp: h("fp"),
            summary: String::new(),
            ..Default::default()
        })
        .await,
        Reason::BadArgument,
    );
    let b = binding("", T, C, "x");
    refused(c.mint(mint_req(&b, None)).await, Reason::BadArgument);
}

/// 4 processes × 8 concurrent redeemers race for each token; exactly one wins, 20 rounds.
#[tokio::test(flavor = "multi_thread")]
async fn single_use_under_a_race_across_processes() {
    const PROCS: usize = 4;
    const PER: usize = 8;
    const ROUNDS: usize = 20;
    let (d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "race");
    let fp = h("fp");
    let mut kids = Vec::new();
    for _ in 0..PROCS {
        let mut k = Command::new(env!("CARGO_BIN_EXE_tc-redeemer"))
            .arg("race")
            .arg(&d.socket)
            .args([&b.vault, &b.tool, &b.caller, &b.args_hash, &fp])
            .arg(PER.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn redeemer");
        let stdin = k.stdin.take().unwrap();
        let mut out = BufReader::new(k.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        kids.push((k, stdin, out));
    }
    for round in 0..ROUNDS {
        let token = raise_and_mint(&mut c, &b, &fp).await;
        for (_, stdin, _) in kids.iter_mut() {
            send_line(stdin, &token);
        }
        let mut wins = 0;
        for (_, _, out) in kids.iter_mut() {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let ok: usize = parts
                .next()
                .and_then(|p| p.strip_prefix("ok="))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad line {line:?}"));
            wins += ok;
            for r in parts {
                assert_eq!(r, "spent", "round {round}: losers must see spent: {line}");
            }
        }
        assert_eq!(wins, 1, "round {round}: exactly one redeemer wins");
    }
    for (mut k, stdin, _) in kids {
        drop(stdin);
        assert!(k.wait().unwrap().success());
    }
    let redeemed = count_events(&mut c, "tc.elicit.redeemed").await;
    assert_eq!(redeemed, ROUNDS);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_run_spends_every_token_minted_for_that_call() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "minted twice");
    let fp = h("fp");
    let first = raise_and_mint(&mut c, &b, &fp).await;
    // The operator ran `tcctl elicit` a second time for the same blocked call.
    let second = c
        .mint(mint_req(&b, None))
        .await
        .expect("second mint")
        .into_inner()
        .token;
    let r = redeem(&mut c, &first, &b, &fp).await.expect("redeem first");
    record_consumed(&mut c, &b, &fp, &r)
        .await
        .expect("consumed");
    // The call ran once; the sibling token must not let it run again.
    refused(redeem(&mut c, &second, &b, &fp).await, Reason::Spent);
}

#[tokio::test(flavor = "multi_thread")]
async fn record_consumed_refuses_a_redemption_of_another_call() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = binding(V, T, C, "the real call");
    let other = binding(V, T, C, "another call");
    let fp = h("fp");
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let r = redeem(&mut c, &token, &b, &fp).await.expect("redeem");
    refused(
        c.record_consumed(v1::RecordConsumedRequest {
            binding: Some(other),
            state_fp: fp.clone(),
            route: "cli_token".into(),
            redemption_id: r.clone(),
        })
        .await,
        Reason::Spent,
    );
    // Still releasable: nothing was recorded as run.
    c.release(v1::ReleaseRequest {
        redemption_id: r,
        reason: "acl".into(),
    })
    .await
    .expect("release");
    redeem(&mut c, &token, &b, &fp)
        .await
        .expect("token is back");
}
