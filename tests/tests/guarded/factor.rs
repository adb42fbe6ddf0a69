//! Guarded mode's TOTP factor through the real `tcd` and `tcctl` (issue 16 item 4): root
//! enrolls a human on a real pty, then an agent without the secret tries to approve (no
//! terminal, no code, wrong codes until the lock, a replayed code) and the human, with
//! codes this test computes from the enrolled secret (its own RFC 6238, checking tcd's),
//! approves once.
//!
//! Runs as root (tcd in guarded mode wants a root-owned config); skipped otherwise.

use tc_tests::pty as pty_support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use pty_support::{
    away_from_a_step_edge, base32_decode, confirm_enrollment, enrollment_shown, step_now, totp,
    wrong_code, Pty,
};

use tc_core::codes::events;
use tc_core::Reason;
use tc_proto::v1;
use tc_tests::shim::assert_ok;
use tc_tests::{bin, binding, h, refused, workspace, Daemon, DaemonOpts};
use tokio_stream::StreamExt;

/// `tcctl`'s exit code for a refusal.
const REFUSED: i32 = 4;

#[test]
fn test_totp_matches_rfc6238() {
    // RFC 6238 appendix B, SHA-1, last six of the eight digits.
    let s = b"12345678901234567890";
    assert_eq!(totp(s, 59 / 30), "287082");
    assert_eq!(totp(s, 1111111109 / 30), "081804");
    assert_eq!(base32_decode("GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"), s);
}

// ---- a real terminal ----

/// `args` on a real pty that is its controlling terminal (as root).
fn pty(args: &[String]) -> Pty {
    let mut c = Command::new("python3");
    c.arg(workspace().join("tests/fixtures/pty_run.py"))
        .args(args);
    Pty::start(c)
}

// ---- a guarded tcd ----

/// A tcd in guarded mode with `[guarded] humans = ["root"]`, its config root-owned 0644
/// in a 0755 directory (what guarded mode's start-up check asks for).
struct Guarded {
    d: Daemon,
    _base: tempfile::TempDir,
}

impl Guarded {
    fn start() -> Guarded {
        let base = tempfile::Builder::new()
            .prefix("tc-guarded-")
            .tempdir()
            .unwrap();
        tc_tests::chmod(base.path(), 0o755);
        let config = base.path().join("config.toml");
        std::fs::write(
            &config,
            "[daemon]\nmode = \"guarded\"\n\n[guarded]\nhumans = [\"root\"]\ndaemon_user = \"root\"\n",
        )
        .unwrap();
        tc_tests::chmod(&config, 0o644);
        let mut d = Daemon::prepared_in(base.path(), config, DaemonOpts::default());
        d.start_again();
        Guarded { d, _base: base }
    }

    /// `tcctl` and its arguments against this daemon, then `rest`.
    fn tcctl_args(&self, rest: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = vec![bin("tcctl").display().to_string()];
        for (flag, p) in [("--socket", &self.d.socket), ("--config", &self.d.config)] {
            v.extend([flag.to_string(), p.display().to_string()]);
        }
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    }

    fn kinds(&self) -> Vec<String> {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut c = self.d.client().await;
            let mut s = c
                .list_events(v1::ListEventsRequest::default())
                .await
                .unwrap()
                .into_inner();
            let mut kinds = Vec::new();
            while let Some(e) = s.next().await {
                kinds.push(e.unwrap().kind);
            }
            kinds
        })
    }

    fn count(&self, kind: &str) -> usize {
        self.kinds().iter().filter(|k| *k == kind).count()
    }
}

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("skipped: guarded mode's tests run as root");
    false
}

/// `tcctl enroll totp --user root` on a pty, confirmed with the code of step T−1 (so step
/// T is still fresh for the first approval); returns the secret read from its output.
fn enroll(g: &Guarded) -> Vec<u8> {
    let mut p = pty(&g.tcctl_args(&["enroll", "totp", "--user", "root"]));
    let (shown, b32) = enrollment_shown(&p);
    assert!(
        shown.contains(&format!(
            "otpauth://totp/tc:root?secret={b32}&issuer=tc&algorithm=SHA1&digits=6&period=30"
        )),
        "{shown}"
    );
    assert!(
        shown.contains('█') || shown.contains('▀'),
        "no QR code:\n{shown}"
    );
    let secret = base32_decode(&b32);
    assert_eq!(secret.len(), 20, "a 160-bit secret");
    let code = confirm_enrollment(&mut p, &secret);
    let (rc, out) = p.finish();
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("enrolled"), "{out}");
    assert!(
        !out[shown.len()..].contains(&code),
        "the code was echoed:\n{out}"
    );
    secret
}

/// `tcctl elicit`'s arguments for `b`, its caller left to tcctl's default.
fn elicit_args(b: &v1::Binding) -> Vec<&str> {
    vec![
        "elicit",
        "--hash",
        &b.args_hash,
        "--tool",
        &b.tool,
        "--vault",
        &b.vault,
    ]
}

/// `tcctl elicit` for `b` on a pty, the human typing `typed` at the prompt.
fn elicit_on_pty(g: &Guarded, b: &v1::Binding, typed: &str) -> (i32, String) {
    let mut args = elicit_args(b);
    args.extend(["--caller", &b.caller]);
    let mut p = pty(&g.tcctl_args(&args));
    // The call is shown in full and confirmed before any code is asked.
    let shown = p.wait_for("[y/N]");
    assert!(shown.contains(&b.tool), "the call is shown:\n{shown}");
    p.type_line("y");
    let prompt = p.wait_for("6-digit code");
    assert!(
        prompt.contains(&b.tool),
        "the prompt names the call:\n{prompt}"
    );
    p.type_line(typed);
    let (rc, out) = p.finish();
    if !typed.is_empty() {
        assert!(!out.contains(typed), "the code was echoed:\n{out}");
    }
    (rc, out)
}

async fn mint_with(
    c: &mut tc_tests::Client,
    b: &v1::Binding,
    code: Option<&str>,
) -> Result<String, tonic::Status> {
    c.mint(v1::MintRequest {
        binding: Some(b.clone()),
        state_fp: None,
        factor: code.map(|c| v1::Factor { totp: c.into() }),
    })
    .await
    .map(|r| r.into_inner().token)
}

#[test]
fn an_agent_without_the_secret_cannot_approve_and_the_human_approves_once() {
    if !is_root() {
        return;
    }
    let g = Guarded::start();
    let secret = enroll(&g);
    assert_eq!(
        g.count(events::FACTOR_ENROLLED),
        2,
        "generated, then confirmed"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = binding("v", "write_file", "stdio", "{\"path\":\"notes.md\"}");
    let fp = h("state");
    let mut c = rt.block_on(g.d.client());
    rt.block_on(c.raise(v1::RaiseRequest {
        binding: Some(b.clone()),
        state_fp: fp.clone(),
        summary: "write notes.md".into(),
        ..Default::default()
    }))
    .unwrap();

    // The agent's own client, no code: refused.
    refused(
        rt.block_on(mint_with(&mut c, &b, None)),
        Reason::FactorRequired,
    );

    // The exact `tcctl elicit` line, without a terminal (a new session), a code on the
    // pipe: refused before anything is sent.
    let mut agent = Command::new("setsid")
        .arg("-w")
        .args(g.tcctl_args(&elicit_args(&b)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = totp(&secret, step_now());
    agent
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{code}\n").as_bytes())
        .unwrap();
    let out = agent.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(REFUSED), "{err}");
    assert!(err.contains("no terminal"), "{err}");
    assert!(out.stdout.is_empty());

    // On a terminal, nothing typed: refused, nothing counted.
    let (rc, out) = elicit_on_pty(&g, &b, "");
    assert_eq!(rc, REFUSED, "{out}");
    assert!(out.contains("no code"), "{out}");
    assert_eq!(g.count(events::FACTOR_FAILED), 0);

    // A wrong code: refused and counted.
    let (rc, out) = elicit_on_pty(&g, &b, &wrong_code(&secret, 0));
    assert_eq!(rc, REFUSED, "{out}");
    assert!(out.contains("factor_invalid"), "{out}");
    assert_eq!(g.count(events::FACTOR_FAILED), 1);

    // Nine more guesses from the agent's own client: the tenth wrong code in a row locks.
    // A guess inside the growing delay is refused unevaluated: it waits that out.
    let mut results = Vec::new();
    for i in 1..10 {
        let guess = wrong_code(&secret, i);
        let r = loop {
            match rt.block_on(mint_with(&mut c, &b, Some(&guess))) {
                Err(s) if tc_tests::reason_of(&s) == Some(Reason::FactorDelay) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                r => break r,
            }
        };
        results.push(tc_tests::reason_of(&r.unwrap_err()));
    }
    let mut want = vec![Some(Reason::FactorInvalid); 8];
    want.push(Some(Reason::FactorLocked));
    assert_eq!(results, want);
    assert_eq!(g.count(events::FACTOR_FAILED), 10);
    assert_eq!(g.count(events::FACTOR_LOCKED), 1);

    // Locked: the right code is refused too.
    away_from_a_step_edge();
    let right = totp(&secret, step_now());
    let (rc, out) = elicit_on_pty(&g, &b, &right);
    assert_eq!(rc, REFUSED, "{out}");
    assert!(out.contains("factor_locked"), "{out}");

    // Root unlocks; the human's right code approves once.
    assert_ok(&g.d.tcctl(&["unlock", "--user", "root"]));
    assert_eq!(g.count(events::FACTOR_UNLOCKED), 1);
    let (rc, out) = elicit_on_pty(&g, &b, &right);
    assert_eq!(rc, 0, "{out}");
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("tct_"))
        .unwrap_or_else(|| panic!("no token:\n{out}"))
        .to_string();
    assert_eq!(g.count(events::MINTED), 1);

    // The same code again (read over the shoulder): refused, and an alarm in the log.
    assert_eq!(g.count(events::FACTOR_REPLAYED), 0);
    let (rc, out) = elicit_on_pty(&g, &b, &right);
    assert_eq!(rc, REFUSED, "{out}");
    assert!(out.contains("factor_replayed"), "{out}");
    assert_eq!(g.count(events::FACTOR_REPLAYED), 1);
    assert_eq!(g.count(events::MINTED), 1, "one approval, one token");

    // The one approval is a real single-use token.
    rt.block_on(tc_tests::redeem(&mut c, &token, &b, &fp))
        .unwrap();
    refused(
        rt.block_on(tc_tests::redeem(&mut c, &token, &b, &fp)),
        Reason::Spent,
    );
}

#[test]
fn enrollment_needs_a_terminal_and_a_listed_human() {
    if !is_root() {
        return;
    }
    let g = Guarded::start();
    // No terminal: refused before tcd makes a secret.
    let out = Command::new("setsid")
        .arg("-w")
        .args(g.tcctl_args(&["enroll", "totp", "--user", "root"]))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(REFUSED));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no terminal"));
    assert_eq!(g.count(events::FACTOR_ENROLLED), 0);
    // A user who is not one of `[guarded] humans`.
    let p = pty(&g.tcctl_args(&["enroll", "totp", "--user", "nobody"]));
    let (rc, out) = p.finish();
    assert_eq!(rc, REFUSED, "{out}");
    assert!(out.contains("not_permitted"), "{out}");
    assert_eq!(g.count(events::FACTOR_ENROLLED), 0);
    // Before enrollment an approval is refused as not enrolled, whatever the code.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = binding("v", "write_file", "stdio", "{}");
    let mut c = rt.block_on(g.d.client());
    rt.block_on(c.raise(v1::RaiseRequest {
        binding: Some(b.clone()),
        state_fp: h("s"),
        ..Default::default()
    }))
    .unwrap();
    refused(
        rt.block_on(mint_with(&mut c, &b, Some("123456"))),
        Reason::NotEnrolled,
    );
}

#[test]
fn personal_mode_has_no_factors_and_mints_without_a_code() {
    let d = Daemon::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = rt.block_on(d.client());
    refused(
        rt.block_on(c.enroll_factor(v1::EnrollFactorRequest {
            user: "root".into(),
        })),
        Reason::NotPermitted,
    );
    let b = binding("v", "write_file", "stdio", "{}");
    rt.block_on(c.raise(v1::RaiseRequest {
        binding: Some(b.clone()),
        state_fp: h("s"),
        ..Default::default()
    }))
    .unwrap();
    // tcctl asks for no code (stdin is null and it has no terminal of its own here).
    let out = d.tcctl(&elicit_args(&b));
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tct_"));
}
