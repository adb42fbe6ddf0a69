//! Request states and paging cursors sealed by the real `tcd`: consume once, tamper,
//! expiry, foreign caller, other request, secret rotation, `--ephemeral` restarts.

use std::time::Duration;

use tc_proto::v1;
use tc_tests::*;

fn b0() -> v1::Binding {
    binding("notes", "write_file", "stdio", "state args")
}

async fn seal(c: &mut Client, b: &v1::Binding, fp: &str) -> String {
    c.seal_state(v1::SealStateRequest {
        binding: Some(b.clone()),
        state_fp: fp.into(),
        inner: b"downstream state".to_vec(),
    })
    .await
    .expect("seal")
    .into_inner()
    .request_state
}

async fn open(
    c: &mut Client,
    blob: &str,
    b: &v1::Binding,
    consume: bool,
) -> Result<v1::OpenStateReply, tonic::Status> {
    c.open_state(v1::OpenStateRequest {
        request_state: blob.into(),
        binding: Some(b.clone()),
        consume,
        current_state_fp: String::new(),
    })
    .await
    .map(|r| r.into_inner())
}

/// A paging cursor for `b` at `position`, sealed by tcd.
async fn seal_cursor(c: &mut Client, b: &v1::Binding, position: &[u8]) -> String {
    c.seal_cursor(v1::SealCursorRequest {
        binding: Some(b.clone()),
        position: position.to_vec(),
    })
    .await
    .expect("seal cursor")
    .into_inner()
    .cursor
}

/// Flips one character in the middle of a blob.
fn tamper(blob: &str) -> String {
    let mut v: Vec<char> = blob.chars().collect();
    let i = v.len() / 2;
    v[i] = if v[i] == 'A' { 'B' } else { 'A' };
    v.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn request_state_seal_open_consume_and_refusals() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = b0();
    let fp = h("fp");
    let s = seal(&mut c, &b, &fp).await;
    let o = open(&mut c, &s, &b, false).await.expect("open");
    assert_eq!(o.state_fp, fp);
    assert_eq!(o.inner, b"downstream state");
    // Opening without consume does not spend it.
    open(&mut c, &s, &b, false).await.expect("open again");
    open(&mut c, &s, &b, true).await.expect("consume");
    refused(open(&mut c, &s, &b, true).await, Reason::Spent);

    let s = seal(&mut c, &b, &fp).await;
    refused(open(&mut c, &tamper(&s), &b, false).await, Reason::Invalid);
    refused(open(&mut c, "garbage", &b, false).await, Reason::Invalid);
    let foreign = v1::Binding {
        caller: "http:other".into(),
        ..b.clone()
    };
    refused(open(&mut c, &s, &foreign, false).await, Reason::Foreign);
    let other_args = v1::Binding {
        args_hash: h("other"),
        ..b.clone()
    };
    refused(
        open(&mut c, &s, &other_args, false).await,
        Reason::RequestMismatch,
    );
    let other_tool = v1::Binding {
        tool: "delete_file".into(),
        ..b.clone()
    };
    refused(
        open(&mut c, &s, &other_tool, false).await,
        Reason::RequestMismatch,
    );
    // The refusals did not consume it.
    open(&mut c, &s, &b, true)
        .await
        .expect("consume after refusals");
}

#[tokio::test(flavor = "multi_thread")]
async fn request_state_expires() {
    let (_d, mut c) = Daemon::with_ttl_and_client(1).await;
    let b = b0();
    let s = seal(&mut c, &b, &h("fp")).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    refused(open(&mut c, &s, &b, true).await, Reason::Expired);
}

#[tokio::test(flavor = "multi_thread")]
async fn rotate_secret_voids_states_cursors_and_tokens() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = b0();
    let fp = h("fp");
    let s = seal(&mut c, &b, &fp).await;
    let cur = seal_cursor(&mut c, &b, b"page 2").await;
    let token = raise_and_mint(&mut c, &b, &fp).await;
    let r = c
        .rotate_secret(v1::RotateSecretRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.voided_tokens, 1);
    refused(open(&mut c, &s, &b, false).await, Reason::Invalid);
    refused(
        c.open_cursor(v1::OpenCursorRequest {
            cursor: cur,
            binding: Some(b.clone()),
        })
        .await,
        Reason::Invalid,
    );
    refused(redeem(&mut c, &token, &b, &fp).await, Reason::Unknown);
    // New ones work under the new key, and survive a restart (the rotation persisted).
    let s2 = seal(&mut c, &b, &fp).await;
    drop(c);
    let mut d = d;
    d.restart();
    let mut c = d.client().await;
    open(&mut c, &s2, &b, true)
        .await
        .expect("new state after restart");
    refused(open(&mut c, &s, &b, false).await, Reason::Invalid);
}

#[tokio::test(flavor = "multi_thread")]
async fn states_survive_a_restart_and_stay_consumed() {
    let mut d = Daemon::start();
    let b = b0();
    let fp = h("fp");
    let (kept, used) = {
        let mut c = d.client().await;
        let kept = seal(&mut c, &b, &fp).await;
        let used = seal(&mut c, &b, &fp).await;
        open(&mut c, &used, &b, true).await.expect("consume");
        (kept, used)
    };
    d.restart();
    let mut c = d.client().await;
    refused(open(&mut c, &used, &b, true).await, Reason::Spent);
    open(&mut c, &kept, &b, true)
        .await
        .expect("survives restart");
}

#[tokio::test(flavor = "multi_thread")]
async fn ephemeral_restart_voids_states() {
    let mut d = Daemon::start_with(DaemonOpts {
        ephemeral: true,
        ..Default::default()
    });
    assert!(d.stderr().contains("per-process"), "{}", d.stderr());
    let b = b0();
    let s = {
        let mut c = d.client().await;
        let st = c.status(v1::StatusRequest {}).await.unwrap().into_inner();
        assert!(st.ephemeral);
        let s = seal(&mut c, &b, &h("fp")).await;
        open(&mut c, &s, &b, false).await.expect("same process");
        s
    };
    d.restart();
    let mut c = d.client().await;
    refused(open(&mut c, &s, &b, false).await, Reason::Invalid);
    // --ephemeral never writes a secret file.
    assert!(!d.cache_dir.join("server-secrets/server.key").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn cursor_seal_open_and_rejections_are_logged() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = b0();
    let cur = seal_cursor(&mut c, &b, b"offset=50").await;
    let open = |cursor: &str, b: &v1::Binding| v1::OpenCursorRequest {
        cursor: cursor.into(),
        binding: Some(b.clone()),
    };
    let p = c.open_cursor(open(&cur, &b)).await.unwrap().into_inner();
    assert_eq!(p.position, b"offset=50");
    // Cursors are not single use.
    c.open_cursor(open(&cur, &b)).await.expect("reopen");
    refused(
        c.open_cursor(open(&tamper(&cur), &b)).await,
        Reason::Invalid,
    );
    let foreign = v1::Binding {
        caller: "http:other".into(),
        ..b.clone()
    };
    refused(c.open_cursor(open(&cur, &foreign)).await, Reason::Foreign);
    let other = v1::Binding {
        args_hash: h("other"),
        ..b.clone()
    };
    refused(
        c.open_cursor(open(&cur, &other)).await,
        Reason::RequestMismatch,
    );
    // A state sealed for the same binding is not a cursor (separate keys).
    let s = seal(&mut c, &b, &h("fp")).await;
    refused(c.open_cursor(open(&s, &b)).await, Reason::Invalid);
    let rejected: Vec<String> = events(&mut c)
        .await
        .into_iter()
        .filter(|e| e.kind == "tc.cursor.rejected")
        .map(|e| e.detail_json)
        .collect();
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    for (r, want) in rejected
        .iter()
        .zip(["invalid", "foreign", "request_mismatch", "invalid"])
    {
        let v: serde_json::Value = serde_json::from_str(r).unwrap();
        assert_eq!(v["reason"], want, "{r}");
    }
}

/// 32 concurrent consumers (on separate connections) of one requestState: one wins.
#[tokio::test(flavor = "multi_thread")]
async fn request_state_consume_race_has_one_winner() {
    let (d, mut c) = Daemon::start_with_client().await;
    let b = b0();
    for _ in 0..5 {
        let s = seal(&mut c, &b, &h("fp")).await;
        let mut tasks = Vec::new();
        for _ in 0..32 {
            let mut c = d.client().await;
            let (s, b) = (s.clone(), b.clone());
            tasks.push(tokio::spawn(
                async move { open(&mut c, &s, &b, true).await },
            ));
        }
        let mut wins = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => wins += 1,
                Err(s) => assert_eq!(reason_of(&s), Some(Reason::Spent), "{s:?}"),
            }
        }
        assert_eq!(wins, 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn consuming_a_state_against_a_changed_target_is_replay_drift_and_spends_it() {
    let (_d, mut c) = Daemon::start_with_client().await;
    let b = b0();
    let s = seal(&mut c, &b, &h("fp")).await;
    let drifted = |fp: &str| v1::OpenStateRequest {
        request_state: s.clone(),
        binding: Some(b.clone()),
        consume: true,
        current_state_fp: fp.into(),
    };
    refused(
        c.open_state(drifted("not-a-hash"))
            .await
            .map(|r| r.into_inner()),
        Reason::BadArgument,
    );
    refused(
        c.open_state(drifted(&h("changed")))
            .await
            .map(|r| r.into_inner()),
        Reason::ReplayDrift,
    );
    // Spent by the drift: even the original fingerprint no longer opens it.
    refused(
        c.open_state(drifted(&h("fp")))
            .await
            .map(|r| r.into_inner()),
        Reason::Spent,
    );
    let s2 = seal(&mut c, &b, &h("fp")).await;
    let o = c
        .open_state(v1::OpenStateRequest {
            request_state: s2,
            binding: Some(b.clone()),
            consume: true,
            current_state_fp: h("fp"),
        })
        .await
        .expect("same fingerprint opens")
        .into_inner();
    assert_eq!(o.state_fp, h("fp"));
    let evs = events(&mut c).await;
    let drift: Vec<_> = evs.iter().filter(|e| e.kind == "replay_drift").collect();
    assert_eq!(drift.len(), 1, "{evs:?}");
    assert_eq!(drift[0].state_fp, h("changed"));
}
