//! A raised request as the ledger hands it out: what a raise recorded ([`Raised`]), where
//! a fresh one is pushed ([`Push`]), and a request as `tcctl pending` shows it ([`Pending`]).

use crate::record::Binding;
use crate::store::Store;

/// A recorded raise.
#[derive(Debug, Clone)]
pub struct Raised {
    pub request_id: String,
    pub raised_at_ms: i64,
    pub expires_at_ms: i64,
    /// The live grant that covers the call and approved it (no prompt), if one did.
    pub grant_id: Option<String>,
    /// A new id: no human has been told of this request yet (a retry of one still
    /// pending keeps its id and is not news).
    pub fresh: bool,
}

/// Told of each request a raise creates that a human must answer, after its commit
/// (`push/`'s `Pusher`, the `[notify]` targets). Never waits: the raise does not.
pub trait Push: Send + Sync {
    /// Queues a push of the request `r` just raised for `b` (counted in `store`).
    fn offer(&self, store: &Store, b: &Binding, r: &Raised);
}

/// A request waiting for a human, as `tcctl pending` shows it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub binding: Binding,
    pub state_fp: String,
    pub summary: String,
    pub raised_at_ms: i64,
    pub expires_at_ms: i64,
    pub minted: bool,
    /// Short id for `tcctl approve ID` / `tcctl decline ID`.
    pub request_id: String,
    /// `pending`, `approved`, `declined` or `expired`.
    pub status: &'static str,
    /// The full arguments as JSON (capped), as the shim sent them.
    pub args_json: String,
    /// What the approval covers, in words.
    pub covers: String,
    /// uid of the peer that raised it (none for a request raised before schema 6).
    pub raised_by_uid: Option<u32>,
    /// Why it was declined (declined only).
    pub reason: String,
    /// The gate's preview, as the raiser sent it (capped).
    pub preview: String,
}
