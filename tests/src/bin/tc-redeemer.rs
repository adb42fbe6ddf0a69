//! Test helper process: races redeems of tokens read from stdin, or probes `Status`.
//!
//! `tc-redeemer race SOCKET VAULT TOOL CALLER ARGS_HASH FP N`: opens N connections,
//! prints `ready`, then for each token line on stdin fires N concurrent redeems and
//! prints `ok=<wins> <reason>...`.
//! `tc-redeemer status SOCKET`: prints `ok` or `err <grpc code> <message>`.

use std::io::BufRead;

use tc_proto::v1;
use tc_proto::v1::confirm_client::ConfirmClient;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.first().map(String::as_str) {
        Some("status") => {
            let ch = match tc_proto::connect(&a[1]).await {
                Ok(c) => c,
                Err(e) => {
                    println!("connect-error {e}");
                    return;
                }
            };
            match ConfirmClient::new(ch).status(v1::StatusRequest {}).await {
                Ok(_) => println!("ok"),
                Err(s) => println!("err {:?} {}", s.code(), s.message()),
            }
        }
        Some("race") => race(&a[1..]).await,
        _ => {
            eprintln!("usage: tc-redeemer race|status ...");
            std::process::exit(2);
        }
    }
}

async fn race(a: &[String]) {
    let socket = a[0].clone();
    let b = v1::Binding {
        vault: a[1].clone(),
        tool: a[2].clone(),
        caller: a[3].clone(),
        args_hash: a[4].clone(),
    };
    let fp = a[5].clone();
    let n: usize = a[6].parse().expect("N");
    let mut clients = Vec::new();
    for _ in 0..n {
        let ch = tc_proto::connect(&socket).await.expect("connect");
        clients.push(ConfirmClient::new(ch));
    }
    println!("ready");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(token) = rx.recv().await {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(n));
        let mut tasks = Vec::new();
        for c in &clients {
            let mut c = c.clone();
            let req = v1::RedeemRequest {
                token: token.clone(),
                binding: Some(b.clone()),
                current_state_fp: fp.clone(),
                ..Default::default()
            };
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                c.redeem(req).await
            }));
        }
        let mut ok = 0;
        let mut reasons = Vec::new();
        for t in tasks {
            match t.await.expect("task") {
                Ok(_) => ok += 1,
                Err(s) => reasons.push(
                    tc_proto::reason(&s)
                        .map(|r| r.as_str().to_string())
                        .unwrap_or_else(|| format!("{:?}:{}", s.code(), s.message())),
                ),
            }
        }
        println!("ok={ok} {}", reasons.join(" "));
    }
}
