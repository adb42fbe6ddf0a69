//! The gate against a hostile model and server: framing, ids, roots, links, the ACL, the
//! barrier, back-pressure, display, callers, redefined tools, terminals.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod acl_args;
mod backpressure;
mod barrier;
mod barrier_ids;
mod display;
mod framing;
mod git_acl;
mod http_callers;
mod ids;
mod links;
mod redefinition;
mod roots;
mod secrets_and_escapes;
mod stdin;
mod terminal;
