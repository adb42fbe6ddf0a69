//! Pushes (`[notify]`): when this replica raises a request a human must answer, every
//! target gets a message naming it and linking its page, sent from a queue of its own.
//!
//! - [`Pusher`]: the targets, built from the config at start (token and secret files
//!   read and checked then); its [`Push::offer`] is what a raise calls, and never waits.
//! - `send`: each target's sender: retries with capped exponential backoff, and the
//!   outcome as counters and, when a push is given up, a `tc.push.failed` event.
//!
//! Only the ledger's raise offers a push, and only the replica that ran the raise runs
//! it: the commits of other replicas of a PostgreSQL ledger reach this one as a commit
//! signal (the page's feed, `--follow`) and never as a raise, so no push is doubled.

pub mod files;
pub mod ntfy;
pub mod queue;
mod send;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use tc_core::config::{ApprovalsConfig, Config, NotifyConfig};

use crate::ledger::Ledger;
use crate::raised::{Push, Raised};
use crate::record::Binding;
use crate::store::Store;
pub use files::FileError;
use queue::Queue;

/// What one push says: the request's names and link, never its arguments, preview,
/// state or any token. `args_hash` is kept only for the `tc.push.failed` event.
#[derive(Debug, Clone)]
pub struct Notice {
    pub request_id: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub link: String,
    pub raised_at_ms: i64,
    pub expires_at_ms: i64,
    /// Names this push on every attempt (the webhook's `X-Tc-Delivery`), so a receiver
    /// that saw an attempt whose answer was lost can drop the retry.
    pub delivery: String,
    args_hash: String,
}

#[cfg(test)]
impl Pusher {
    /// A pusher with one webhook target that nothing sends from (unit tests read its
    /// queue), linking under `https://tc.example`.
    pub(crate) fn for_test() -> Arc<Pusher> {
        let kind = Kind::Webhook(webhook::Webhook {
            url: "http://127.0.0.1:9/".into(),
            secret: b"s".to_vec(),
        });
        let notify = NotifyConfig {
            page_url: Some("https://tc.example".into()),
            ..Default::default()
        };
        Arc::new(Pusher {
            targets: vec![Target::new("hook", kind, 8)],
            notify,
            approvals: ApprovalsConfig::default(),
        })
    }

    /// Pushes waiting in the (first) target's queue.
    pub(crate) fn queued(&self) -> usize {
        self.targets[0].queue.waiting()
    }
}

#[cfg(test)]
impl Notice {
    pub(crate) fn sample() -> Notice {
        Notice {
            request_id: "abcdefgh".into(),
            vault: "fs".into(),
            tool: "write_file".into(),
            caller: "claude".into(),
            link: "http://localhost:7777/requests/abcdefgh".into(),
            raised_at_ms: 1,
            expires_at_ms: 2,
            delivery: "d".into(),
            args_hash: "0".repeat(64),
        }
    }
}

/// How a target is reached.
#[derive(Debug)]
enum Kind {
    Ntfy(ntfy::Ntfy),
    Webhook(webhook::Webhook),
}

/// One target: its name (in logs, events, metrics), how to reach it, and its queue.
struct Target {
    name: String,
    kind: Kind,
    queue: Queue<Notice>,
}

/// One attempt's result.
#[derive(Debug)]
pub enum Attempt {
    Sent,
    /// Worth trying again (no answer, a time-out, 408, 429, 5xx): why, in words.
    Retry(String),
    /// Another attempt would get the same answer (another 4xx): why.
    GiveUp(String),
}

impl Attempt {
    /// Classifies a response without reading its body; an error is told by its kind,
    /// never by its text (which can quote the URL).
    fn of(r: Result<reqwest::Response, reqwest::Error>) -> Attempt {
        match r {
            Ok(resp) if resp.status().is_success() => Attempt::Sent,
            Ok(resp) => {
                let s = resp.status();
                let why = format!("answered {}", s.as_u16());
                if s.is_server_error() || s.as_u16() == 408 || s.as_u16() == 429 {
                    Attempt::Retry(why)
                } else {
                    Attempt::GiveUp(why)
                }
            }
            Err(e) if e.is_timeout() => Attempt::Retry("timed out".into()),
            Err(e) if e.is_connect() => Attempt::Retry("could not connect".into()),
            Err(_) => Attempt::Retry("the request failed".into()),
        }
    }
}

/// Every target and what links point at.
pub struct Pusher {
    targets: Vec<Arc<Target>>,
    notify: NotifyConfig,
    approvals: ApprovalsConfig,
}

impl Pusher {
    /// The `[notify]` targets (None when there are none), their files read and checked.
    pub fn from_config(cfg: &Config) -> Result<Option<Pusher>, FileError> {
        let n = &cfg.notify;
        if !n.is_on() {
            return Ok(None);
        }
        let mut targets = Vec::new();
        for t in &n.ntfy {
            let key = format!("notify.ntfy {:?} token_file", t.name);
            let token = match &t.token_file {
                Some(f) => Some(files::read_private(&key, f)?),
                None => None,
            };
            let kind = Kind::Ntfy(ntfy::Ntfy {
                url: t.url.clone(),
                topic: t.topic.clone(),
                token,
                priority: t.priority,
            });
            targets.push(Target::new(&t.name, kind, n.queue));
        }
        for t in &n.webhook {
            let key = format!("notify.webhook {:?} secret_file", t.name);
            let secret = files::read_private(&key, &t.secret_file)?;
            let kind = Kind::Webhook(webhook::Webhook {
                url: t.url.clone(),
                secret: secret.into_bytes(),
            });
            targets.push(Target::new(&t.name, kind, n.queue));
        }
        Ok(Some(Pusher {
            targets,
            notify: n.clone(),
            approvals: cfg.approvals.clone(),
        }))
    }

    /// The targets, as the start-up line names them (`ntfy "phone", webhook "hook"`).
    pub fn describe(&self) -> String {
        let each = self.targets.iter().map(|t| match t.kind {
            Kind::Ntfy(_) => format!("ntfy {:?}", t.name),
            Kind::Webhook(_) => format!("webhook {:?}", t.name),
        });
        each.collect::<Vec<_>>().join(", ")
    }

    /// Starts one sender per target; they run until aborted (at shutdown, with whatever
    /// is still queued: a push is a nudge, the request itself is in the ledger).
    pub fn spawn(self: &Arc<Self>, ledger: Arc<Ledger>) -> Vec<tokio::task::JoinHandle<()>> {
        let retry = send::Retry {
            attempts: self.notify.attempts,
            first: Duration::from_millis(self.notify.backoff_ms),
            max: Duration::from_millis(self.notify.backoff_max_ms),
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(self.notify.timeout_ms))
            // A redirect could carry the token or the signed body to another host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("tcd/", env!("CARGO_PKG_VERSION")))
            .build();
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "push: cannot build the HTTP client; pushes are off");
                return Vec::new();
            }
        };
        self.targets
            .iter()
            .map(|t| {
                let run = send::run(t.clone(), client.clone(), retry, ledger.clone());
                tokio::spawn(run)
            })
            .collect()
    }
}

impl Push for Pusher {
    /// Queues a push of the request `r` just raised for `b` on every target. Never waits
    /// (the ledger calls this): a full queue drops its oldest push, counted per target.
    fn offer(&self, store: &Store, b: &Binding, r: &Raised) {
        let n = Notice {
            request_id: r.request_id.clone(),
            vault: b.vault.clone(),
            tool: b.tool.clone(),
            caller: b.caller.clone(),
            link: (self.notify)
                .request_url(&self.approvals, &r.request_id)
                .unwrap_or_default(),
            raised_at_ms: r.raised_at_ms,
            expires_at_ms: r.expires_at_ms,
            delivery: crate::random::b64(12),
            args_hash: b.args_hash.clone(),
        };
        for t in &self.targets {
            if t.queue.offer(n.clone()) {
                store.bump(send::counter("tc_push_dropped_total", &t.name), 1);
                tracing::warn!(
                    target_name = %t.name,
                    "push queue full: the oldest waiting push was dropped"
                );
            }
        }
    }
}

impl Target {
    fn new(name: &str, kind: Kind, cap: usize) -> Arc<Target> {
        Arc::new(Target {
            name: name.to_string(),
            kind,
            queue: Queue::new(cap),
        })
    }

    async fn attempt(&self, client: &reqwest::Client, n: &Notice) -> Attempt {
        match &self.kind {
            Kind::Ntfy(t) => t.send(client, n).await,
            Kind::Webhook(t) => t.send(client, n).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(args: char) -> Binding {
        Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "c".into(),
            args_hash: args.to_string().repeat(64),
        }
    }

    #[test]
    fn a_full_queue_never_refuses_a_raise_and_counts_what_it_dropped() {
        let (_dir, l) = crate::ledger::scratch();
        let p = Pusher::for_test();
        let l = l.with_push(Some(p.clone()));
        let fp = "f".repeat(64);
        for c in ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'] {
            l.raise(&call(c), &fp, "s")
                .expect("raised whatever the queue holds");
        }
        assert_eq!(p.queued(), 8);
        let dropped = l
            .store
            .counters()
            .into_iter()
            .find(|(n, ..)| n == "tc_push_dropped_total");
        assert_eq!(
            dropped,
            Some(("tc_push_dropped_total".into(), "target=\"hook\"".into(), 2))
        );
    }

    #[test]
    fn a_raise_is_pushed_once_however_often_the_agent_retries_it() {
        let (_dir, l) = crate::ledger::scratch();
        let p = Pusher::for_test();
        let l = l.with_push(Some(p.clone()));
        let fp = "f".repeat(64);
        let queued = || p.queued();
        l.raise(&call('a'), &fp, "s").unwrap();
        assert_eq!(queued(), 1);
        l.raise(&call('a'), &fp, "s").unwrap();
        assert_eq!(queued(), 1, "the same request, still pending: not news");
        l.raise(&call('b'), &fp, "s").unwrap();
        assert_eq!(queued(), 2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let n = rt.block_on(p.targets[0].queue.take());
        assert_eq!(
            n.link,
            format!("https://tc.example/requests/{}", n.request_id)
        );
        assert_eq!((n.tool.as_str(), n.vault.as_str()), ("t", "v"));
    }
}
