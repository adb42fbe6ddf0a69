//! Downstreams other than a child process: a remote MCP server over Streamable HTTP
//! (`url` in the vault), behind the stdio front.

pub mod client;
pub mod http;
mod remote;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use tokio::io::BufReader;
use tokio::sync::oneshot;

pub use remote::Remote;

use crate::framing::{read_frame, Frame, MAX_LINE};
use crate::gate::{Options, Shim};

/// Runs the stdio front in front of the remote server until the client closes stdin;
/// returns the exit code.
pub async fn run_remote(opts: Options, remote: Remote) -> anyhow::Result<i32> {
    let (shim, q) = Shim::start(opts);
    let conn = http::Conn::new(remote, Arc::clone(&shim))?;
    let writer = {
        let conn = Arc::clone(&conn);
        tokio::spawn(async move { conn.write(q.to_child).await })
    };
    let client_writer = tokio::spawn(crate::stdio::write_client(Arc::clone(&shim), q.to_client));
    let mut r = BufReader::with_capacity(64 * 1024, crate::stdio::client_input());
    loop {
        // As on stdio: a client that does not read its answers is not read from.
        shim.client_box().room().await;
        shim.child_box().room().await;
        match read_frame(&mut r, MAX_LINE).await {
            Ok(Frame::Eof) | Err(_) => break,
            Ok(f) => shim.client_frame(f),
        }
    }
    // The client is done: what it sent is still posted, answers in flight get a while.
    shim.child_box().close();
    let _ = writer.await;
    if tokio::time::timeout(Duration::from_secs(10), conn.settled())
        .await
        .is_err()
    {
        tracing::warn!("answers from the remote MCP server still pending 10s after the client closed; dropping them");
        conn.abort_all();
    }
    shim.finish().await;
    conn.close().await;
    let (tx, rx) = oneshot::channel();
    shim.client_box().send(Vec::new(), Some(tx));
    let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
    drop(client_writer);
    Ok(0)
}
