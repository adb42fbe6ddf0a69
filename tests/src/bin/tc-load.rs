//! Test helper process: runs a script of mixed daemon operations (raise, mint, redeem,
//! release, record-consumed, seal/open request state, append event) against `tcd`.
//!
//! `tc-load SOCKET SCRIPT`: every line of SCRIPT is `LANE OP ARGS…`; each lane runs on
//! its own connection, its operations in order, all lanes at once. Lines `LANE tok KEY
//! TOKEN`, `LANE rid KEY RID` and `LANE st KEY STATE` preload what earlier rounds learnt.
//! Operations (KEY names one call: args_hash = sha256(KEY), vault `load`, tool `write`):
//! `raise KEY`, `mint KEY`, `redeem KEY`, `release KEY`, `consume KEY`, `seal KEY`,
//! `open KEY` (consume), `event MARKER`. One line per finished operation on stdout:
//! `LANE SEQ ok [VALUE]` (a token, a redemption id, a state, an event id), `LANE SEQ err
//! REASON` for a refusal, `LANE SEQ fault CODE` for another error status, or `LANE SEQ
//! lost` when the connection broke (the daemon died): the lane stops there.

use std::collections::HashMap;
use std::io::Write;

use tc_proto::v1;
use tc_proto::v1::confirm_client::ConfirmClient;
use tonic::transport::Channel;

const VAULT: &str = "load";
const TOOL: &str = "write";
const CALLER: &str = "stdio";

/// The binding of the call named `key`.
fn binding(key: &str) -> v1::Binding {
    v1::Binding {
        vault: VAULT.into(),
        tool: TOOL.into(),
        caller: CALLER.into(),
        args_hash: tc_core::hash::sha256_hex(key.as_bytes()),
    }
}

/// The (never changing) target fingerprint every call is approved against.
fn fp() -> String {
    tc_core::hash::sha256_hex(b"load target")
}

#[derive(Default)]
struct Lane {
    ops: Vec<Vec<String>>,
    tokens: HashMap<String, String>,
    rids: HashMap<String, String>,
    states: HashMap<String, String>,
}

enum Outcome {
    Ok(String),
    Refused(String),
    Fault(String),
    Lost,
}

fn outcome<T>(r: Result<T, tonic::Status>, value: impl FnOnce(T) -> String) -> Outcome {
    match r {
        Ok(v) => Outcome::Ok(value(v)),
        Err(s) => match tc_proto::reason(&s) {
            Some(reason) => Outcome::Refused(reason.as_str().to_string()),
            // A killed daemon shows up as one of these on the client side.
            None if matches!(
                s.code(),
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
            ) =>
            {
                Outcome::Lost
            }
            None => Outcome::Fault(format!("{:?}", s.code())),
        },
    }
}

async fn run_op(c: &mut ConfirmClient<Channel>, lane: &mut Lane, op: &[String]) -> Outcome {
    let arg = |i: usize| op.get(i).cloned().unwrap_or_default();
    let key = arg(1);
    match op[0].as_str() {
        "raise" => outcome(
            c.raise(v1::RaiseRequest {
                binding: Some(binding(&key)),
                state_fp: fp(),
                summary: format!("load {key}"),
                ..Default::default()
            })
            .await,
            |_| String::new(),
        ),
        "mint" => {
            let o = outcome(
                c.mint(v1::MintRequest {
                    binding: Some(binding(&key)),
                    state_fp: Some(fp()),
                    ..Default::default()
                })
                .await,
                |r| r.into_inner().token,
            );
            if let Outcome::Ok(t) = &o {
                lane.tokens.insert(key, t.clone());
            }
            o
        }
        "redeem" => {
            let token = lane.tokens.get(&key).cloned().unwrap_or_default();
            let o = outcome(
                c.redeem(v1::RedeemRequest {
                    token,
                    binding: Some(binding(&key)),
                    current_state_fp: fp(),
                    ..Default::default()
                })
                .await,
                |r| r.into_inner().redemption_id,
            );
            if let Outcome::Ok(r) = &o {
                lane.rids.insert(key, r.clone());
            }
            o
        }
        "release" => outcome(
            c.release(v1::ReleaseRequest {
                redemption_id: lane.rids.get(&key).cloned().unwrap_or_default(),
                reason: "cancelled".into(),
            })
            .await,
            |_| String::new(),
        ),
        "consume" => outcome(
            c.record_consumed(v1::RecordConsumedRequest {
                binding: Some(binding(&key)),
                state_fp: fp(),
                route: "cli_token".into(),
                redemption_id: lane.rids.get(&key).cloned().unwrap_or_default(),
            })
            .await,
            |_| String::new(),
        ),
        "seal" => {
            let o = outcome(
                c.seal_state(v1::SealStateRequest {
                    binding: Some(binding(&key)),
                    state_fp: fp(),
                    inner: key.as_bytes().to_vec(),
                })
                .await,
                |r| r.into_inner().request_state,
            );
            if let Outcome::Ok(s) = &o {
                lane.states.insert(key, s.clone());
            }
            o
        }
        "open" => outcome(
            c.open_state(v1::OpenStateRequest {
                request_state: lane.states.get(&key).cloned().unwrap_or_default(),
                binding: Some(binding(&key)),
                consume: true,
                current_state_fp: fp(),
            })
            .await,
            |_| String::new(),
        ),
        "event" => outcome(
            c.append_event(v1::AppendEventRequest {
                kind: tc_core::codes::events::NOT_OBTAINED.into(),
                vault: VAULT.into(),
                tool: TOOL.into(),
                caller: CALLER.into(),
                args_hash: String::new(),
                state_fp: String::new(),
                detail_json: serde_json::json!({ "marker": key }).to_string(),
            })
            .await,
            |r| r.into_inner().id.to_string(),
        ),
        other => Outcome::Fault(format!("unknown-op:{other}")),
    }
}

fn emit(out: &std::sync::Mutex<std::io::Stdout>, line: String) {
    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
    // The test reads these as they come to decide when to kill the daemon.
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(a.len() == 2, "usage: tc-load SOCKET SCRIPT");
    let script = std::fs::read_to_string(&a[1])?;
    let mut lanes: HashMap<String, Lane> = HashMap::new();
    for line in script.lines() {
        let w: Vec<String> = line.split_whitespace().map(String::from).collect();
        if w.len() < 2 {
            continue;
        }
        let lane = lanes.entry(w[0].clone()).or_default();
        match (w[1].as_str(), w.get(2), w.get(3)) {
            ("tok", Some(k), Some(v)) => drop(lane.tokens.insert(k.clone(), v.clone())),
            ("rid", Some(k), Some(v)) => drop(lane.rids.insert(k.clone(), v.clone())),
            ("st", Some(k), Some(v)) => drop(lane.states.insert(k.clone(), v.clone())),
            _ => lane.ops.push(w[1..].to_vec()),
        }
    }
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for (name, mut lane) in lanes {
        let socket = a[0].clone();
        let out = out.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = match tc_proto::connect(&socket).await {
                Ok(ch) => ConfirmClient::new(ch),
                Err(_) => {
                    emit(&out, format!("{name} 0 lost"));
                    return;
                }
            };
            let ops = std::mem::take(&mut lane.ops);
            for (seq, op) in ops.iter().enumerate() {
                let line = match run_op(&mut c, &mut lane, op).await {
                    Outcome::Ok(v) if v.is_empty() => format!("{name} {seq} ok"),
                    Outcome::Ok(v) => format!("{name} {seq} ok {v}"),
                    Outcome::Refused(r) => format!("{name} {seq} err {r}"),
                    Outcome::Fault(f) => format!("{name} {seq} fault {f}"),
                    Outcome::Lost => {
                        emit(&out, format!("{name} {seq} lost"));
                        return;
                    }
                };
                emit(&out, line);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}
