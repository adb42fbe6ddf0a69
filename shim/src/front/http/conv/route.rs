//! Where the engine's client-bound messages go: an answer to its exchange, progress to
//! the request it reports on, list changes to listen streams, the rest to the newest.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use serde_json::Value;
use tokio::sync::mpsc;

use super::{Conv, Listener, Msg};
use crate::front::http::subscription;
use crate::wire::framing::Frame;
use crate::wire::ids::{self, IdKey};
use crate::wire::jsonrpc;
use crate::wire::outbox::{Direct, Known, Out, Receiver};

impl Conv {
    /// Where a message from the engine goes (see [`route`]).
    fn deliver(&self, line: Vec<u8>) {
        let env = envelope(&line);
        if let Envelope::Answer(k) = &env {
            return self.answer(k, line);
        }
        let mut r = self.routes();
        if let Envelope::ListChanged(m) = &env {
            if self.stateless.load(Ordering::Acquire) {
                // 2026-07-28: only on the listen streams that asked for it, nowhere else.
                fan_out(&mut r.listeners, m, &line);
                return;
            }
        }
        // Progress goes with the request it reports on; anything else to the newest.
        let own = match &env {
            Envelope::Progress(t) => r
                .waiters
                .values()
                .find(|w| w.tx.is_some() && w.progress.as_ref() == Some(t)),
            _ => None,
        };
        let open = || r.waiters.values().filter(|w| w.tx.is_some());
        let target = own
            .or_else(|| open().max_by_key(|w| w.seq))
            .and_then(|w| w.tx.clone());
        let sent = match target {
            Some(tx) if tx.capacity() > 1 => tx.try_send(Msg::Related(line)).is_ok(),
            Some(_) => {
                tracing::warn!(
                    "an HTTP client is not reading its answer's stream: dropping a server message"
                );
                false
            }
            None => match r.stream.as_ref().map(|s| s.try_send(line)) {
                Some(Ok(())) => true,
                Some(Err(_)) => {
                    tracing::warn!("an HTTP client is not reading its GET stream: closing it");
                    r.stream = None;
                    false
                }
                None => false,
            },
        };
        drop(r);
        if let (false, Envelope::Request(id)) = (sent, env) {
            // The server asked the client something and no stream can carry it: answer
            // for the client rather than leave the server waiting.
            let e = jsonrpc::error(
                &id,
                jsonrpc::INTERNAL_ERROR,
                "the client has no open stream for server requests (tc-shim HTTP front)",
            );
            self.shim
                .client_frame(Frame::Line(e.to_string().into_bytes()));
        }
    }
}

impl Conv {
    /// An answer goes to the exchange of its request, if one still waits.
    fn answer(&self, k: &IdKey, line: Vec<u8>) {
        let w = ids::take(&mut self.routes().waiters, k);
        match w.and_then(|w| w.tx) {
            // Related messages never take the last place: the answer always fits.
            Some(tx) => {
                let _ = tx.try_send(Msg::Final(line));
            }
            None => tracing::debug!("dropping an answer no HTTP exchange waits for"),
        }
        self.touch();
    }
}

impl Direct for Conv {
    /// An answer goes to its exchange from the engine's own send when nothing is queued
    /// ahead of it (one task hop less per call); everything else through [`route`].
    /// Under the outbox's lock: this takes the routes lock and never calls the engine.
    fn take(self: Arc<Self>, out: Out) -> Option<Out> {
        if out.ack.is_some() {
            return Some(out);
        }
        // Read here only when the engine did not say which request the line answers.
        let k = match out.known {
            Known::Answers(k) => k,
            _ => match envelope(&out.line) {
                Envelope::Answer(k) => k,
                _ => return Some(out),
            },
        };
        self.answer(&k, out.line);
        None
    }
}

/// Drains the engine's client queue into the exchanges; ends when the engine or the
/// conversation goes away.
pub(super) async fn route(conv: Weak<Conv>, mut rx: Receiver) {
    while let Some(Out { line, ack, .. }) = rx.recv().await {
        let Some(c) = conv.upgrade() else { break };
        c.shim.client_box().wrote(line.len());
        if line.is_empty() {
            if let Some(a) = ack {
                let _ = a.send(());
            }
            continue;
        }
        c.deliver(line);
    }
}

/// Sends a list-changed notification to each listen stream that asked for it, tagged;
/// a stream whose client stopped reading is closed.
fn fan_out(listeners: &mut Vec<Listener>, method: &str, line: &[u8]) {
    listeners.retain(|l| {
        if !l.filter.wants(method) {
            return !l.tx.is_closed();
        }
        let Some(tagged) = subscription::tag(line, &l.id) else {
            return true;
        };
        match l.tx.try_send(tagged) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    "an HTTP client is not reading its subscriptions/listen stream: closing it"
                );
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    });
}

enum Envelope {
    Answer(IdKey),
    Request(Value),
    /// `notifications/progress` for this `progressToken`.
    Progress(IdKey),
    /// `notifications/{tools,prompts,resources}/list_changed`.
    ListChanged(String),
    Other,
}

/// What routing needs of an engine message: answers by id, progress by token, requests
/// for the fallback.
fn envelope(line: &[u8]) -> Envelope {
    #[derive(serde::Deserialize)]
    struct E<'a> {
        #[serde(default)]
        id: Option<Value>,
        #[serde(default, borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_slice::<E>(line) {
        Ok(E {
            id: Some(id),
            method: None,
        }) => Envelope::Answer(IdKey::of(&id)),
        Ok(E {
            id: Some(id),
            method: Some(_),
        }) if !id.is_null() => Envelope::Request(id),
        Ok(E {
            id: None,
            method: Some(m),
        }) if m == "notifications/progress" => progress_token(line),
        Ok(E {
            id: None,
            method: Some(m),
        }) if subscription::is_list_changed(&m) => Envelope::ListChanged(m.into_owned()),
        _ => Envelope::Other,
    }
}

/// A progress notification's token (a second, small parse: progress is rare and short).
fn progress_token(line: &[u8]) -> Envelope {
    let v: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
    match crate::wire::value::at(&v, &["params", "progressToken"]) {
        Some(t) => Envelope::Progress(IdKey::of(t)),
        None => Envelope::Other,
    }
}
