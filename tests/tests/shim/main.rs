//! tc-shim over stdio in front of real servers and clients: forwarding, targets,
//! fingerprints, the governor, the lean facade, eras, release, soak.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod era;
mod everything_server;
mod filesystem_move;
mod filesystem_server;
mod git_server;
mod governor;
mod governor_oversize;
mod governor_resources;
mod lean_facade;
mod memory_server;
mod release;
mod rmcp_client;
mod soak;
mod targets;
mod targets_cache;
mod transport;
mod ts_client;
