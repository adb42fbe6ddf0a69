//! Shared by the guarded-mode tests: a command on a real pty (tests/fixtures/pty_run.py)
//! that is its controlling terminal, and the tests' own TOTP (RFC 6238, SHA-1, 6 digits,
//! 30 s), which checks tcd's rather than reusing it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};

// ---- TOTP ----

pub fn base32_decode(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let (mut bits, mut n, mut out) = (0u64, 0u32, Vec::new());
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base32") as u64;
        bits = (bits << 5) | v;
        n += 5;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub fn totp(secret: &[u8], step: i64) -> String {
    let mut mac = <Hmac<sha1::Sha1> as Mac>::new_from_slice(secret).unwrap();
    mac.update(&step.to_be_bytes());
    let d = mac.finalize().into_bytes();
    let o = usize::from(d[19] & 15);
    let v = u32::from_be_bytes([d[o] & 0x7f, d[o + 1], d[o + 2], d[o + 3]]) % 1_000_000;
    format!("{v:06}")
}

pub fn step_now() -> i64 {
    unix_ms() / 30_000
}

/// Waits until the current step has at least 3 s left, so a code computed now is still
/// in its step (or the next, which tcd also accepts) when tcd checks it.
pub fn away_from_a_step_edge() {
    let left = 30_000 - unix_ms() % 30_000;
    if left < 3_000 {
        std::thread::sleep(Duration::from_millis(left as u64 + 50));
    }
}

/// The code of the current step, computed from the secret as the human's app does.
pub fn right_code(secret: &[u8]) -> String {
    away_from_a_step_edge();
    totp(secret, step_now())
}

/// A guess: none of T−1, T, T+1's codes, so wrong whatever step tcd is in.
pub fn wrong_code(secret: &[u8], salt: u32) -> String {
    let t = step_now();
    let near: Vec<String> = (t - 1..=t + 1).map(|s| totp(secret, s)).collect();
    (salt..)
        .map(|k| format!("{:06}", (k * 7919 + 13) % 1_000_000))
        .find(|c| !near.contains(c))
        .unwrap()
}

// ---- a real terminal ----

/// A command on a real pty: what it writes to the terminal is collected, what the
/// "human" types is sent.
pub struct Pty {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<(Mutex<Vec<u8>>, Condvar)>,
    reader: std::thread::JoinHandle<()>,
}

impl Pty {
    /// Starts `relay` (a `python3 tests/fixtures/pty_run.py …` command, as whichever
    /// user should own the terminal) with its stdio piped to this side.
    pub fn start(mut relay: Command) -> Pty {
        let mut child =
            crate::piped::spawn_piped(&mut relay, Stdio::inherit()).expect("pty_run.py");
        let out = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let (mut r, o) = (child.stdout.take().unwrap(), out.clone());
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = r.read(&mut buf) {
                o.0.lock().unwrap().extend_from_slice(&buf[..n]);
                o.1.notify_all();
            }
        });
        let stdin = child.stdin.take();
        Pty {
            child,
            stdin,
            out,
            reader,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.0.lock().unwrap()).into_owned()
    }

    /// Waits until the terminal shows `needle` (at most 20 s); returns all it showed.
    pub fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = self.out.0.lock().unwrap();
        loop {
            let text = String::from_utf8_lossy(&buf).into_owned();
            if text.contains(needle) {
                return text;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the terminal never showed {needle:?}:\n{text}"
            );
            buf = self.out.1.wait_timeout(buf, left).unwrap().0;
        }
    }

    pub fn type_line(&mut self, line: &str) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(format!("{line}\n").as_bytes()).unwrap();
        w.flush().unwrap();
    }

    /// Waits for the command to exit (at most 20 s): its exit code and all it showed.
    pub fn finish(mut self) -> (i32, String) {
        drop(self.stdin.take());
        let st = crate::wait_timeout(&mut self.child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("the command on the pty did not exit:\n{}", self.text()));
        // The relay has exited: its stdout is at EOF once the reader has read it all.
        self.reader.join().unwrap();
        let text = String::from_utf8_lossy(&self.out.0.lock().unwrap()).into_owned();
        (st.code().unwrap_or(-1), text)
    }
}

// ---- `tcctl enroll totp` on a terminal ----

/// Waits until `tcctl enroll totp` on `p` asks for its first code: (all it showed, the
/// secret in base32 as shown for typing in).
pub fn enrollment_shown(p: &Pty) -> (String, String) {
    let shown = p.wait_for("to confirm (1 of 3): ");
    let b32 = shown
        .split("secret (base32, to type in instead): ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no secret shown:\n{shown}"))
        .to_string();
    (shown, b32)
}

/// Confirms the enrollment on `p` with step T−1's code of `secret` (so step T is still
/// fresh for the first approval); returns the code typed.
pub fn confirm_enrollment(p: &mut Pty, secret: &[u8]) -> String {
    away_from_a_step_edge();
    let code = totp(secret, step_now() - 1);
    p.type_line(&code);
    code
}
