//! The `tcctl` command line (clap derive); `tcctl help <command>` is the reference.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Operator CLI for tc, the human confirmation gate for MCP tool calls.
#[derive(Debug, Parser)]
#[command(name = "tcctl", version, propagate_version = true)]
pub struct Cli {
    /// Config file (default: $TC_CONFIG, $XDG_CONFIG_HOME/tc/config.toml, ~/.config/tc/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Daemon socket (default: daemon.socket from the config, else its documented fallback).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Approve one blocked call: mint a single-use token for it (prints only the token).
    Elicit(ElicitArgs),
    /// Approve a blocked call by its request id (no id: pick from the waiting ones); the
    /// agent's identical retry then runs it once. Guarded mode asks for your code.
    Approve(crate::approve::ApproveArgs),
    /// Decline a blocked call by its request id: the agent's retries get a hard stop.
    Decline(crate::approve::DeclineArgs),
    /// Show the grants given with approvals (`tcctl approve --grant`): scope, expiry,
    /// uses left, last use; live ones and those that ended within a day.
    Grants {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a grant: the next call it would have let through asks a human again.
    Revoke {
        /// The grant id from `tcctl grants` (g-…).
        grant: String,
    },
    /// Show the blocked calls waiting for a human, with what they would do.
    Pending {
        /// Only this vault.
        #[arg(long)]
        vault: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Keep running: print the requests waiting now, then each new one as it is
        /// raised, one JSON object per line (id, vault, tool, caller, summary, expires,
        /// url when the approval page is configured).
        #[arg(long, conflicts_with = "json")]
        watch: bool,
    },
    /// Tell me when something waits: a desktop notification for each new request (with
    /// the approval page's link); without a desktop session, a live list here. It never
    /// approves anything.
    Watch {
        /// List on this terminal even when a desktop session is there.
        #[arg(long)]
        terminal: bool,
    },
    /// Print the audit log.
    Events {
        /// Keep printing new events as they happen.
        #[arg(long, short)]
        follow: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Only events after this id.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// At most this many events (0 = all).
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Print counters in the Prometheus text format.
    Metrics,
    /// Show whether tcd is running, where, and with which key.
    Status,
    /// Replace the server secret: every pending token, request state and cursor is voided.
    RotateSecret,
    /// Work with the gate policy in the config.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Guarded mode, root: enroll a human's second factor (replacing any earlier one).
    Enroll {
        #[command(subcommand)]
        command: EnrollCommand,
    },
    /// Guarded mode, root: unlock a human's factor after too many wrong codes.
    Unlock {
        /// The human (user name or uid; one of `[guarded] humans`).
        #[arg(long)]
        user: String,
    },
    /// Open the approval page: a link that opens a page session of your own, once,
    /// within a minute (printed; in a desktop session also opened in the browser).
    Page {
        /// Open the page on this raised request.
        #[arg(long, conflicts_with = "remote")]
        request: Option<String>,
        /// Only print the link.
        #[arg(long)]
        print: bool,
        /// A link (and its QR code) to the remote page (`[approvals] remote`), to open on
        /// your phone within five minutes: it lets that browser register a passkey, and
        /// nothing else.
        #[arg(long)]
        remote: bool,
    },
    /// The approval page: `tcctl approvals open` is `tcctl page`.
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Passkeys for approving on the page: add, list, confirm (guarded mode), remove.
    Passkey {
        #[command(subcommand)]
        command: PasskeyCommand,
    },
    /// Bearer tokens for HTTP callers (`[vaults.http.auth] mode = "jwt"` without keys).
    Token {
        #[command(subcommand)]
        command: crate::token::TokenCommand,
    },
    /// Print a shell completion script.
    Completions { shell: clap_complete::Shell },
}

#[derive(Debug, Args)]
pub struct ElicitArgs {
    /// The args_hash from the elicit_required refusal.
    #[arg(long)]
    pub hash: String,
    /// The tool the confirmation is for.
    #[arg(long)]
    pub tool: String,
    /// The vault (required when the config lists more than one).
    #[arg(long)]
    pub vault: Option<String>,
    /// The caller that was blocked ("stdio" for editors that spawn tc-shim).
    #[arg(long, default_value = tc_core::STDIO_CALLER)]
    pub caller: String,
    /// Pin the token to the state the refusal reported (refused if the target changed since).
    #[arg(long)]
    pub state_fp: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate the config and print each vault's gates.
    Check,
    /// Start an MCP server, read its tools and print a starter policy for it.
    Init {
        /// The vault id to write into the starter block.
        #[arg(long, default_value = "my-vault")]
        vault: String,
        /// The server command, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnrollCommand {
    /// A TOTP authenticator app: shows the otpauth:// URI and a QR code once, then asks
    /// for one code from the app (on this terminal) to confirm.
    Totp {
        /// The human (user name or uid; one of `[guarded] humans`).
        #[arg(long)]
        user: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// As `tcctl page`: a one-time link to the page, printed (and opened on a desktop).
    Open {
        /// Only print the URL.
        #[arg(long)]
        print: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PasskeyCommand {
    /// Print a one-time code to type into the page's "add a passkey" form (ten minutes);
    /// the passkey is yours (root in guarded mode: `--user` names whose).
    Add {
        /// Guarded mode, root: the human the passkey is for (user name or uid).
        #[arg(long)]
        user: Option<String>,
    },
    /// Your passkeys (root: everyone's), with owner, state and last use.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Guarded mode: confirm a passkey registered on the page with your authenticator
    /// code (root: without one); until then it approves nothing.
    Confirm {
        /// The credential id, or its first 8+ hex digits (`tcctl passkey list`).
        credential: String,
    },
    /// Remove a passkey of yours (root: anyone's).
    Remove {
        /// The credential id, or its first 8+ hex digits (`tcctl passkey list`).
        credential: String,
    },
}
