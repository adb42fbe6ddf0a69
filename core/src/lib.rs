//! Shared tc domain code, used by `tcd`, `tc-shim` and `tcctl` alike so each piece of
//! logic exists exactly once.
//!
//! - [`config`]: the TOML configuration types and their validation.
//! - [`paths`]: where the config, cache dir and socket live, with documented fallbacks.
//! - [`hash`]: the canonical `args_hash` and fingerprint helpers.
//! - [`display`]: escaping model and server text before a person reads it.
//! - [`preview`]: a gate's preview: its limits and its lines as shown.
//! - [`codes`]: refusal reasons (daemon) and error codes (MCP-facing).
//! - [`guarded`]: guarded mode's fixed locations, root-ownership check, tighten-only merge.
//! - [`owner`]: the human a guarded-mode binding belongs to, carried in its caller.

pub mod codes;
pub mod config;
pub mod display;
#[cfg(any(test, feature = "fuzz-corpus"))]
pub mod fuzz_corpus;
pub mod grant;
pub mod guarded;
pub mod hash;
pub mod origin;
pub mod owner;
pub mod paths;
pub mod preview;

pub use codes::{ErrorCode, Reason};
pub use config::Config;

/// The caller id every locally spawned stdio client presents.
pub const STDIO_CALLER: &str = "stdio";

/// The longest sealed request state or cursor tcd opens (it refuses to seal a longer
/// one); the shim does not send it a downstream state that could not fit.
pub const MAX_SEALED_LEN: usize = 64 * 1024;

/// Milliseconds since the Unix epoch (the one clock all stored times use).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// How each binary reports the failure it exits with: one message, `prog: error: cause:
/// cause` (`{:#}`), never a backtrace. (Returning an `anyhow::Error` from `main` prints
/// its Debug form, with a stack backtrace under `RUST_BACKTRACE=1`.)
pub fn eprint_failure(prog: &str, e: &dyn std::fmt::Display) {
    eprintln!("{prog}: {e:#}");
}
