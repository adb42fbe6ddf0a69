//! The page's live feed (server-sent events): the whole state (requests, grants, history)
//! each time something commits (a grant given, used or revoked too), and every few
//! seconds so expiries show; ends at shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Serialize;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;

use super::grants::{self, GrantView};
use super::history::{self, HistoryRow};
use super::view::RequestView;
use super::{passkeys, Page, Viewer};
use crate::error::DaemonError;

/// How often the state is re-sent without a commit (expiries are not commits).
const TICK: Duration = Duration::from_secs(5);

/// Everything the page shows.
#[derive(Debug, Serialize)]
pub struct State {
    pub mode: &'static str,
    /// The session's uid, and whether it may only look (root in guarded mode).
    pub uid: u32,
    pub read_only: bool,
    pub passkeys: u32,
    pub now_ms: i64,
    pub requests: Vec<RequestView>,
    /// Grants live and recently ended that the viewer may see (their own in guarded mode).
    pub grants: Vec<GrantView>,
    pub history: Vec<HistoryRow>,
}

/// The state now as `v` may see it (their own requests and history, unless they see
/// all), read on the store thread.
pub async fn snapshot(page: &Page, v: Viewer) -> Result<State, DaemonError> {
    let l = page.ledger.clone();
    let owner = (!v.all).then_some(v.uid);
    page.ledger
        .store
        .call(move || {
            let mut requests = Vec::new();
            for p in l.pending("")? {
                if owner.is_some() && p.raised_by_uid != owner {
                    continue;
                }
                let mut view = RequestView::new(&p);
                if p.status == "pending" && !v.read_only {
                    view.grant = grants::form(&l, &p)?;
                }
                requests.push(view);
            }
            Ok(State {
                mode: l.mode().as_str(),
                uid: v.uid,
                read_only: v.read_only,
                passkeys: passkeys::count(&l, v.uid)?,
                now_ms: tc_core::now_ms(),
                requests,
                grants: grants::list(&l, v)?,
                history: history::recent(&l, owner)?,
            })
        })
        .await
}

/// The SSE response: a task sends the state into a small channel until the page goes
/// away or tcd drains.
pub fn feed(page: Arc<Page>, v: Viewer) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let mut committed = page.ledger.store.subscribe();
        let mut tick = tokio::time::interval(TICK);
        let draining = page.draining.flipped();
        tokio::pin!(draining);
        loop {
            let ev = match snapshot(&page, v).await {
                Ok(s) => Event::default().event("state").json_data(&s).ok(),
                Err(e) => {
                    tracing::warn!(error = %e, "approval page: reading the state failed");
                    None
                }
            };
            if let Some(ev) = ev {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                _ = &mut draining => return,
                _ = tx.closed() => return,
                _ = committed.recv() => {}
                _ = tick.tick() => {}
            }
        }
    });
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::default())
}
