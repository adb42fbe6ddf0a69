//! A receiver of pushes for the tests: an HTTP server (axum) on a free loopback port,
//! on a runtime of its own, that records each request and fails the first N of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// One request a receiver got, and what it answered.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub answered: u16,
}

impl Hit {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

struct Shared {
    /// Answer `fail_with` to the first `fail_first` requests, then 200.
    fail_first: usize,
    fail_with: u16,
    seen: AtomicUsize,
    hits: Mutex<Vec<Hit>>,
    tx: Mutex<mpsc::Sender<Hit>>,
}

/// An HTTP receiver on a free loopback port, answering `fail_with` to the first
/// `fail_first` requests and 200 to the rest.
pub struct Receiver {
    pub port: u16,
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Hit>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn answer(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let n = s.seen.fetch_add(1, Ordering::SeqCst);
    let status = if n < s.fail_first { s.fail_with } else { 200 };
    let hit = Hit {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: body.to_vec(),
        answered: status,
    };
    s.hits.lock().unwrap().push(hit.clone());
    let _ = s.tx.lock().unwrap().send(hit);
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    pub fn start(fail_first: usize, fail_with: u16) -> Receiver {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            fail_first,
            fail_with,
            seen: AtomicUsize::new(0),
            hits: Mutex::new(Vec::new()),
            tx: Mutex::new(tx),
        });
        // A thread of its own: a test may be async itself (a runtime cannot be started,
        // nor dropped, inside another).
        let (port_tx, port_rx) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let _ = port_tx.send(listener.local_addr().unwrap().port());
                let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                    let _ = stopped.await;
                });
                let _ = serve.await;
            });
        });
        let port = port_rx
            .recv_timeout(WAIT)
            .expect("the receiver is listening");
        Receiver {
            port,
            shared,
            rx,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The next request it got (waits up to 30 s).
    pub fn next(&self) -> Hit {
        self.rx
            .recv_timeout(WAIT)
            .expect("a push reached the receiver")
    }

    /// Requests got so far.
    pub fn count(&self) -> usize {
        self.shared.hits.lock().unwrap().len()
    }
}
