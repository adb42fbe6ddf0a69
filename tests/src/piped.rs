//! A child process spoken to over pipes: started with piped stdin and stdout, and its
//! stdout read on a thread into a channel, so that a test waits for a line with a timeout.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// A command for `argv` (program first), as the harnesses' shim command lines are built.
pub fn argv_command(argv: &[String]) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd
}

/// `cmd` started with piped stdin and stdout and `stderr` where the caller wants it
/// (inherited to show a failing test's log, a file, or null for a flood).
pub fn spawn_piped(cmd: &mut Command, stderr: Stdio) -> std::io::Result<Child> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
}

/// The lines of `r` (without their `\n`), each passed through `map`, read on a thread
/// until EOF, a read error, or the receiver is dropped.
pub fn lines_mapped<T: Send + 'static>(
    r: impl Read + Send + 'static,
    map: impl Fn(String) -> T + Send + 'static,
) -> mpsc::Receiver<T> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(map(l)).is_err() {
                break;
            }
        }
    });
    lines
}

/// The lines of `r` as text (see [`lines_mapped`]).
pub fn lines_of(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    lines_mapped(r, |l| l)
}

/// The lines of `r` as the bytes that came, each with its `\n` (none on a last line cut
/// short): for the tests that check what the shim wrote byte for byte.
pub fn byte_lines_of(r: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        loop {
            let mut l = Vec::new();
            match r.read_until(b'\n', &mut l) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            }
        }
    });
    lines
}
