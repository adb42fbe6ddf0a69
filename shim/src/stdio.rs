//! The stdio front and the stdio downstream: the client is our stdin/stdout, the
//! downstream a child process spoken to over its stdin/stdout; the engine sits between.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::BufReader;
use tokio::process::Command;
use tokio::sync::oneshot;

use crate::framing::{read_down, read_frame, write_line, Frame, MAX_LINE};
use crate::gate::{Options, Shim};
use crate::outbox::{Out, Receiver};

/// Runs the proxy until the downstream exits; returns the exit code to use.
pub async fn run(opts: Options, command: Vec<String>) -> anyhow::Result<i32> {
    let root = opts.policy.root.clone();
    let mut child = spawn_child(&command, &root)?;
    let (Some(child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take()) else {
        anyhow::bail!("downstream stdio pipes missing");
    };
    let (shim, q) = Shim::start(opts);
    tokio::spawn(write_child(Arc::clone(&shim), q.to_child, child_in));
    let client_writer = tokio::spawn(write_client(Arc::clone(&shim), q.to_client));
    // Reader from the client (our stdin).
    let (eof_tx, eof_rx) = oneshot::channel::<()>();
    {
        let shim = Arc::clone(&shim);
        tokio::spawn(async move {
            let mut r = BufReader::with_capacity(64 * 1024, client_input());
            loop {
                // A client that does not read its answers (or a downstream that does not
                // read its input) is not read from either: memory stays bounded.
                shim.client_box().room().await;
                shim.child_box().room().await;
                match read_frame(&mut r, MAX_LINE).await {
                    Ok(Frame::Eof) | Err(_) => break,
                    Ok(f) => shim.client_frame(f),
                }
            }
            // Client went away: close the downstream's stdin so it can exit.
            shim.child_box().close();
            let _ = eof_tx.send(());
        });
    }
    let child_reader = tokio::spawn(read_child(Arc::clone(&shim), child_out));

    let status = tokio::select! {
        s = child.wait() => s?,
        _ = async { let _ = eof_rx.await; tokio::time::sleep(Duration::from_secs(10)).await } => {
            tracing::warn!("downstream did not exit 10s after the client closed stdin; killing it");
            let _ = child.start_kill();
            child.wait().await?
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), child_reader).await;
    // Calls already forwarded still owe the daemon their RecordConsumed.
    shim.finish().await;
    let (tx, rx) = oneshot::channel();
    shim.client_box().send(Vec::new(), Some(tx));
    let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
    drop(client_writer);
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Starts the downstream with piped stdin/stdout, in the vault root when there is one.
pub fn spawn_child(
    command: &[String],
    root: &std::path::Path,
) -> anyhow::Result<tokio::process::Child> {
    let (prog, rest) = command.split_first().ok_or_else(|| {
        anyhow::anyhow!(
            "no downstream command: give vault.command in the config or `-- <command…>`"
        )
    })?;
    let mut cmd = Command::new(prog);
    cmd.args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if root.is_dir() {
        cmd.current_dir(root);
    }
    cmd.spawn()
        .map_err(|e| anyhow::anyhow!("cannot start downstream {prog:?}: {e}"))
}

/// Writes the engine's lines to the downstream's stdin.
pub async fn write_child(
    shim: Arc<Shim>,
    mut rx: Receiver,
    mut child_in: tokio::process::ChildStdin,
) {
    while let Some(Out { line, ack, .. }) = rx.recv().await {
        let written = write_line(&mut child_in, &line).await;
        shim.child_box().wrote(line.len());
        if let Err(e) = written {
            tracing::warn!("writing to the downstream failed: {e}");
            break;
        }
        if let Some(a) = ack {
            let _ = a.send(());
        }
    }
    shim.child_box().writer_gone();
}

/// Feeds the downstream's stdout to the engine until it closes.
pub async fn read_child(shim: Arc<Shim>, child_out: tokio::process::ChildStdout) {
    widen_pipe(&child_out);
    let mut r = BufReader::with_capacity(DOWN_READ, child_out);
    // Governor: what may be buffered depends on who waits; longer lines are scanned.
    let mut limit = || shim.down_line_limit();
    loop {
        shim.client_box().room().await;
        match read_down(&mut r, &mut limit).await {
            Ok(crate::framing::Down::Eof) | Err(_) => break,
            Ok(d) => {
                shim.child_frame(d);
            }
        }
    }
}

/// Writes the engine's lines to our stdout; an empty line is a flush marker.
pub(crate) async fn write_client(shim: Arc<Shim>, mut rx: Receiver) {
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
pub(crate) fn client_input() -> Box<dyn tokio::io::AsyncRead + Unpin + Send> {
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

/// Bytes per read from the downstream. With [`widen_pipe`], one read drains up to this
/// much of a long answer: fewer wake-ups per megabyte scanned (the governor's refusal
/// speed), while a short answer still touches only the pages it fills.
const DOWN_READ: usize = 1024 * 1024;

/// Asks the kernel for a pipe as wide as one read (the default 64 KiB pipe makes a
/// 500 MB answer cost ~8 000 reader wake-ups). Best effort: an unprivileged process may
/// be held to `/proc/sys/fs/pipe-max-size`, and a smaller pipe only costs speed.
fn widen_pipe(out: &tokio::process::ChildStdout) {
    use std::os::fd::AsRawFd;
    let _ = nix::fcntl::fcntl(
        out.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETPIPE_SZ(DOWN_READ as i32),
    );
}
