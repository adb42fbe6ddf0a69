//! `tc-shim` as a library: the MCP proxy that puts a human confirmation gate in front of a
//! downstream MCP server, arranged in three rooms over two shared floors.
//!
//! - [`front`]: how a client reaches us (stdio, Streamable HTTP).
//! - [`engine`]: what happens to each message, in stages: admission → judge → confirm →
//!   forward, with the response governor and paging (`govern`) and what the agent is told
//!   when tc refuses (`refusal`).
//! - [`downstream`]: the MCP server behind us (a child process or a remote server), one
//!   [`downstream::Downstream`] type both fronts use.
//!
//! Under them: [`wire`] (JSON-RPC framing, ids, eras, queues), [`vault`] (reading the
//! vault's files for fingerprints) and [`daemon_client`] (tcd over its Unix socket).
//! [`serve`] reads the command line and config and starts one front.

//!
//! Without the default feature `serve` the crate is only its parsers (`wire`'s framing,
//! ids and scanners, and `vault`), with none of the network stack: what the fuzz crate
//! links.

pub mod vault;
pub mod wire;

#[cfg(feature = "serve")]
pub mod daemon_client;
#[cfg(feature = "serve")]
pub mod downstream;
#[cfg(feature = "serve")]
pub mod engine;
#[cfg(feature = "serve")]
pub mod front;
#[cfg(feature = "serve")]
pub mod serve;
