//! The stdio front: the client is our stdin/stdout (one editor, one conversation); the
//! engine sits between it and whichever downstream the vault has.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::BufReader;
use tokio::sync::oneshot;

use crate::downstream::Downstream;
use crate::engine::{Options, Shim};
use crate::wire::framing::{read_frame, write_line, Frame, MAX_LINE};
use crate::wire::outbox::{Out, Receiver};

/// Serves the client on stdin/stdout until the conversation ends; returns the exit code
/// (the child's own, or 0 for a remote server).
pub async fn run(opts: Options, down: Downstream) -> anyhow::Result<i32> {
    let root = opts.policy.root.clone();
    let (shim, q) = Shim::start(opts);
    let mut attached = down.attach(&shim, q.to_child, &root)?;
    let client_writer = tokio::spawn(write_client(Arc::clone(&shim), q.to_client));
    let (eof_tx, eof_rx) = oneshot::channel::<()>();
    tokio::spawn(read_client(Arc::clone(&shim), eof_tx));
    let code = attached
        .ended(async {
            let _ = eof_rx.await;
        })
        .await?;
    // Calls already forwarded still owe the daemon their RecordConsumed.
    shim.finish().await;
    attached.close().await;
    let (tx, rx) = oneshot::channel();
    shim.client_box().send(Vec::new(), Some(tx));
    let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
    drop(client_writer);
    Ok(code)
}

/// Feeds our stdin to the engine until it closes, then closes the downstream's queue so
/// the downstream can finish.
async fn read_client(shim: Arc<Shim>, eof: oneshot::Sender<()>) {
    let mut r = BufReader::with_capacity(64 * 1024, client_input());
    loop {
        // A client that does not read its answers (or a downstream that does not read its
        // input) is not read from either: memory stays bounded.
        shim.client_box().room().await;
        shim.child_box().room().await;
        match read_frame(&mut r, MAX_LINE).await {
            Ok(Frame::Eof) | Err(_) => break,
            Ok(f) => shim.client_frame(f),
        }
    }
    shim.child_box().close();
    let _ = eof.send(());
}

/// Writes the engine's lines to our stdout; an empty line is a flush marker.
async fn write_client(shim: Arc<Shim>, mut rx: Receiver) {
    let mut out = client_output();
    while let Some(Out { line, ack, .. }) = rx.recv().await {
        if line.is_empty() {
            if let Some(a) = ack {
                let _ = a.send(());
            }
            continue;
        }
        let written = write_line(&mut out, &line).await;
        shim.client_box().wrote(line.len());
        if written.is_err() {
            break;
        }
    }
    shim.client_box().writer_gone();
}

/// Our stdin as an async reader. A pipe (what every editor gives us) is polled by the
/// reactor directly; anything else falls back to tokio's stdin, whose reads run on the
/// blocking pool and cost a thread hand-off per line.
fn client_input() -> Box<dyn tokio::io::AsyncRead + Unpin + Send> {
    use std::os::fd::AsFd;
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(tokio::net::unix::pipe::Receiver::from_file);
    match pipe {
        Ok(p) => Box::new(p),
        Err(_) => Box::new(tokio::io::stdin()),
    }
}

/// Our stdout as an async writer; a pipe directly, else tokio's stdout (see [`client_input`]).
fn client_output() -> Box<dyn tokio::io::AsyncWrite + Unpin + Send> {
    use std::os::fd::AsFd;
    let pipe = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(tokio::net::unix::pipe::Sender::from_file);
    match pipe {
        Ok(p) => Box::new(p),
        Err(_) => Box::new(tokio::io::stdout()),
    }
}
