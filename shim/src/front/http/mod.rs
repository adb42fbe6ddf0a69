//! The Streamable HTTP front (`tc-shim serve VAULT --http ADDR`): one endpoint, `/mcp`,
//! both eras, in front of the same gate engine the stdio front uses.
//!
//! Every request passes the front door (Host/Origin, no token in the query), then the
//! caller check; then a legacy session (by `MCP-Session-Id`, bound to its caller) or the
//! caller's stateless conversation carries it to the engine (`conv.rs`).

mod answer;
mod caller;
mod conv;
mod exchange;
mod guard;
mod listen;
mod modern;
mod sessions;
mod subscription;
mod workers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tc_core::config::{GovernorConfig, HttpFront, Paged};

use crate::daemon_client::Daemon;
use crate::downstream::Downstream;
use crate::engine::govern::governor::Governor;
use crate::engine::judge::policy::Policy;
use crate::engine::{Options, Shim};
use conv::Conv;
use sessions::Table;

/// Everything `serve` needs, gathered by `main`.
pub struct Setup {
    pub addr: SocketAddr,
    pub front: HttpFront,
    pub policy: Arc<Policy>,
    pub daemon: Arc<Daemon>,
    pub governor: GovernorConfig,
    pub paged: Vec<Paged>,
    pub prompt_ttl: Duration,
    /// The approval page's base URL, for 2026-07-28 callers that declare URL mode.
    pub page: Option<String>,
    pub downstream: Downstream,
    /// Threads serving connections (`workers.rs`), this one included.
    pub workers: usize,
}

/// The state every handler shares.
pub(crate) struct Front {
    guard: guard::Guard,
    verifier: tc_auth::Verifier,
    table: Arc<Table>,
    policy: Arc<Policy>,
    daemon: Arc<Daemon>,
    governor: GovernorConfig,
    paged: Vec<Paged>,
    prompt_ttl: Duration,
    page: Option<String>,
    downstream: Downstream,
    max_body: usize,
}

impl Front {
    /// Starts an engine and its downstream for one conversation of `caller`.
    fn open(&self, caller: &str) -> anyhow::Result<Arc<Conv>> {
        let (shim, q) = Shim::start(Options {
            policy: Arc::clone(&self.policy),
            daemon: Arc::clone(&self.daemon),
            caller: caller.to_string(),
            prompt_ttl: self.prompt_ttl,
            page: self.page.clone(),
            gov: Governor::new(&self.governor, &self.paged),
            server_requests: false,
            remote_downstream: matches!(self.downstream, Downstream::Remote(..)),
        });
        let attached = self
            .downstream
            .attach(&shim, q.to_child, &self.policy.root)?;
        let conv = Conv::new(shim, caller.into(), q.to_client, attached);
        // A downstream gone on its own (a child that exited, a server that forgot the
        // session: its id then reads 404 here, which is how a client learns to initialize
        // a new session) ends the conversation too.
        let weak = Arc::downgrade(&conv);
        conv.when_downstream_gone(Box::new(move || {
            if let Some(c) = weak.upgrade() {
                c.end_with_downstream();
            }
        }));
        Ok(conv)
    }
}

/// Serves until SIGINT/SIGTERM; returns the exit code.
pub async fn serve(s: Setup) -> anyhow::Result<i32> {
    let tcd: Arc<dyn tc_auth::TcdTokens> = Arc::clone(&s.daemon) as _;
    let verifier = tc_auth::Verifier::new(tc_auth::Setup {
        auth: &s.front.auth,
        bind: s.addr,
        path: "/mcp",
        tcd: Some(tcd),
    })
    .await?;
    // Bound now (the port is ours, and its address known to the front door) but not yet
    // listening: a client's connect is refused until every thread can serve it.
    let socket = bind(s.addr).with_context(|| format!("cannot listen on {}", s.addr))?;
    let addr = socket.local_addr()?;
    let remote = matches!(s.downstream, Downstream::Remote(..));
    let table = session_table(&s.front, remote);
    let app = routes(&verifier);
    let front = Arc::new(Front {
        guard: guard::Guard::new(addr, &s.front.allowed_hosts, &s.front.allowed_origins),
        verifier,
        table: Arc::clone(&table),
        policy: s.policy,
        daemon: s.daemon,
        governor: s.governor,
        paged: s.paged,
        prompt_ttl: s.prompt_ttl,
        page: s.page,
        downstream: s.downstream,
        max_body: s.front.max_body_bytes,
    });
    let app = app
        .layer(middleware::from_fn_with_state(
            Arc::clone(&front),
            front_door,
        ))
        .with_state(front);
    let threads = workers::start(addr, app, s.workers)
        .await
        .context("HTTP front")?;
    let listener = socket
        .listen(LISTEN_BACKLOG)
        .with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!(
        "tc-shim: serving over Streamable HTTP at http://{addr}/mcp (auth: {:?})",
        s.front.auth.mode
    );
    // On SIGINT/SIGTERM the conversations end first: a GET or listen stream a client
    // holds open, or a call waiting on its server, would otherwise hold the connection
    // the graceful shutdown waits for.
    let stop = {
        let table = Arc::clone(&table);
        async move {
            shutdown_signal().await;
            table.close_all();
        }
    };
    threads.serve(listener, stop).await.context("HTTP front")?;
    table.close_all();
    Ok(0)
}

/// The conversations' table, its caps as configured for this kind of downstream, its
/// idle sweeper started.
fn session_table(front: &HttpFront, remote: bool) -> Arc<Table> {
    let table = Arc::new(Table::new(
        front.session_cap(remote),
        front.caller_cap(remote),
        front.session_idle_seconds,
    ));
    table.start_sweeper(Duration::from_secs(front.session_idle_seconds.clamp(1, 30)));
    table
}

/// `/mcp` (GET, POST, DELETE), and the protected-resource metadata document at each of
/// its paths when the verifier has one.
fn routes(verifier: &tc_auth::Verifier) -> Router<Arc<Front>> {
    let mut app = Router::new().route(
        "/mcp",
        get(exchange::get_stream)
            .post(exchange::post)
            .delete(exchange::delete),
    );
    if let Some((paths, doc)) = verifier.metadata().map(|m| (m.paths(), m.document())) {
        for p in paths {
            let doc = doc.clone();
            app = app.route(&p, get(move || async move { axum::Json(doc) }));
        }
    }
    app
}

/// Pending connections the kernel holds for the accept loop (as `TcpListener::bind`).
const LISTEN_BACKLOG: u32 = 1024;

/// A TCP socket bound to `addr`, not listening yet; `SO_REUSEADDR` as
/// `TcpListener::bind` sets it (a restart need not wait out `TIME_WAIT`).
fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// Every route: a foreign `Host`/`Origin` (DNS rebinding) is 403.
async fn front_door(State(f): State<Arc<Front>>, req: Request, next: Next) -> Response {
    if let Err((s, m)) = f.guard.check(req.headers()) {
        return (s, m).into_response();
    }
    next.run(req).await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// An error answer with a status and a plain message.
pub(crate) fn plain(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into()).into_response()
}
