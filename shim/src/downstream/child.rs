//! The downstream as a child process: the vault's MCP server started with piped
//! stdin/stdout, its lines written from the engine's queue and read back into the engine.

use std::process::Stdio;
use std::sync::Arc;

use tokio::io::BufReader;
use tokio::process::Command;

use crate::engine::Shim;
use crate::wire::framing::{read_down, write_line, Down};
use crate::wire::outbox::{Out, Receiver};

/// Starts the downstream with piped stdin/stdout, in the vault root when there is one.
pub fn spawn(command: &[String], root: &std::path::Path) -> anyhow::Result<tokio::process::Child> {
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
pub async fn write(shim: Arc<Shim>, mut rx: Receiver, mut child_in: tokio::process::ChildStdin) {
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
pub async fn read(shim: Arc<Shim>, child_out: tokio::process::ChildStdout) {
    widen_pipe(&child_out);
    let mut r = BufReader::with_capacity(DOWN_READ, child_out);
    // Governor: what may be buffered depends on who waits; longer lines are scanned.
    let mut limit = || shim.down_line_limit();
    loop {
        shim.client_box().room().await;
        match read_down(&mut r, &mut limit).await {
            Ok(Down::Eof) | Err(_) => break,
            Ok(d) => {
                shim.child_frame(d);
            }
        }
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
