//! Streamable HTTP: the front (both eras), callers (none/jwt/oidc), a real token issuer,
//! the remote downstream, real SDK clients and the conformance suite.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod auth_issuer;
mod callers;
mod conformance;
mod front;
mod grants;
mod oidc_front;
mod remote_downstream;
mod rmcp_client;
mod sdk_clients;
