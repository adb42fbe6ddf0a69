//! Guarded mode as root with real users: the deployment, the factor, the agent with the
//! human's shell, humans kept apart, the page with TOTP
//! (and grants given, listed and revoked on it).
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod agent;
mod agent_with_a_shell;
mod deploy;
mod factor;
mod grants;
mod humans_apart;
mod page_grants;
mod page_remote;
mod page_totp;
