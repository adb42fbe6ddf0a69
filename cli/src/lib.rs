//! `tcctl`, the operator CLI of tc: mints confirmations and inspects the daemon.
//!
//! - [`approve`]: `tcctl approve` / `tcctl decline`, by request id.
//! - [`cli`]: the clap command line.
//! - [`client`]: connecting to `tcd` and turning failures into messages a person can act on.
//! - [`commands`]: one function per subcommand.
//! - [`desktop`]: `tcctl watch`'s desktop notifications (D-Bus).
//! - [`factor`]: guarded mode's second factor (enroll, unlock, the approval code).
//! - [`output`]: what a command writes on stdout, and times as RFC 3339.
//! - [`page`]: `tcctl approvals open`, `tcctl passkey add` (the approval page).
//! - [`token`]: `tcctl token mint`, bearer tokens for HTTP callers.
//! - [`policy_init`]: `tcctl policy init`, a starter policy read from a real server.
//! - [`watch`]: `tcctl pending --watch` and `tcctl watch`, following new requests.

pub mod approve;
pub mod cli;
pub mod client;
pub mod commands;
pub mod desktop;
pub mod factor;
pub mod grants;
pub mod output;
pub mod page;
pub mod policy_init;
pub mod token;
pub mod tty;
pub mod watch;

use std::process::ExitCode;

use clap::Parser;

/// Exit codes (documented in the README).
pub mod exit {
    /// Something else failed.
    pub const FAILURE: u8 = 1;
    /// `tcd` is not reachable.
    pub const UNAVAILABLE: u8 = 3;
    /// `tcd` refused the request (the message says why).
    pub const REFUSED: u8 = 4;
    /// The config file is invalid.
    pub const CONFIG: u8 = 5;
}

/// An error with the exit code it deserves.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }
}

/// Prints a token tcd minted for this command. Unlike the other output, the token is the
/// point: losing it is a failure, and `again` says what to do then.
pub fn print_token(token: &str, again: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{token}")
        .and_then(|()| out.flush())
        .map_err(|e| {
            CliError::new(
                exit::FAILURE,
                format!("the token was minted but could not be written to stdout ({e}){again}"),
            )
        })
}

/// Runs `tcctl` and reports failures on stderr.
pub fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tcctl: cannot start: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match rt.block_on(commands::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Messages carry the daemon's and servers' words: escaped like everything shown.
            tc_core::eprint_failure("tcctl", &tc_core::display::escape(&e.message));
            ExitCode::from(e.code)
        }
    }
}
