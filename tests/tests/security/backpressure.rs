//! A client that writes without reading its answers (issue 15 §7's growth, the queue
//! side): tc-shim stops reading from it once its answers back up, as a pipe to a server run
//! directly would, instead of queueing them without bound. Real tc-shim in front of
//! server-memory; the client is this test, not reading its stdout for a while.

use tc_tests::shim as support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use support::*;

const LINES: usize = 200_000;

#[test]
fn a_client_that_does_not_read_is_not_read_from() {
    let mut env = Env::with(&Vault::memory("mem"));
    env.start_tcd();
    let argv = env.shim_argv("mem");
    let mut child = spawn_piped(&mut argv_command(&argv), Stdio::null()).unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":"init","method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("\"init\""), "{line}");
    let before = status_kb(pid, "VmHWM");
    // Each of these is refused by the shim itself (an id a server could respell), so every
    // line in makes an answer of a few hundred bytes: ~60 MB of answers in all.
    let writer = std::thread::spawn(move || {
        for i in 0..LINES {
            let l = format!("{{\"jsonrpc\":\"2.0\",\"id\":{i}.5,\"method\":\"ping\"}}\n");
            if stdin.write_all(l.as_bytes()).is_err() {
                return (i, stdin);
            }
        }
        // Kept open until the peak is read: at EOF the shim exits, and a zombie has no
        // VmHWM to read.
        (LINES, stdin)
    });
    // Not reading for a while: an unbounded shim reads everything and queues every answer.
    std::thread::sleep(Duration::from_secs(3));
    let peak = status_kb(pid, "VmHWM");
    let mut answers = 0;
    let mut l = String::new();
    while answers < LINES {
        l.clear();
        if out.read_line(&mut l).unwrap() == 0 {
            break;
        }
        assert!(l.contains("-32600"), "{l}");
        answers += 1;
    }
    let (written, stdin) = writer.join().unwrap();
    assert_eq!(written, LINES, "the writer was cut off");
    assert_eq!(
        answers, LINES,
        "every line was answered once the client read"
    );
    let peak_after = status_kb(pid, "VmHWM");
    drop(stdin);
    assert!(
        peak_after < before + 40 * 1024,
        "answers queued for a client that did not read grew tc-shim from {before} kB to {peak} kB \
         (peak {peak_after} kB)"
    );
    let _ = child.kill();
    let _ = child.wait();
}
