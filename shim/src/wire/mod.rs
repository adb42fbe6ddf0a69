//! The JSON-RPC wire, shared by every room: framing lines, parsing messages, ids, the
//! MCP headers and eras, the outgoing queues. Nothing here knows about gates.

#[cfg(feature = "serve")]
pub mod era;
pub mod framing;
pub mod ids;
pub mod jsonrpc;
#[cfg(feature = "serve")]
pub mod mcp_headers;
#[cfg(feature = "serve")]
pub mod outbox;
#[cfg(feature = "serve")]
pub mod peek;
pub mod scan;
pub mod unique;
#[cfg(feature = "serve")]
pub mod value;
