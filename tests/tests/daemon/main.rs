//! tcd and tcctl on their own: the ledger's RPCs, tokens, states, events, retention, the
//! process (signals, systemd), the CLI's errors, paths and `policy init`.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod cli_errors;
mod events;
mod paths_runtime;
mod policy_init;
mod process;
mod retention;
mod states_and_cursors;
mod systemd;
mod tcctl;
mod tokens;
