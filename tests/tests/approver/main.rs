//! The human's side: approve and decline by request, previews, the approval page in a
//! real browser (grants on it too), `tcctl watch`, desktop notifications and pushes (ntfy, webhooks).
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod by_request;
mod desktop_notify;
mod grants;
mod page_browser;
mod page_grants;
mod page_remote;
mod preview;
mod push;
mod watch;
