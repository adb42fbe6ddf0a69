//! The fronts: how a client reaches the engine. `stdio` serves one client on our
//! stdin/stdout; `http` serves MCP Streamable HTTP to many callers.

pub mod http;
pub mod stdio;
