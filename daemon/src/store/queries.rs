//! The storage seam: every query the ledger's rules make, typed, one trait per table
//! group. Each backend implements them over one open transaction; the rules never see SQL.
//!
//! A method runs inside the caller's transaction ([`crate::store::Store::write`]); the
//! conditional updates (`spend_token`, `consume_state`, ...) report whether they won, so
//! single use holds on any backend whose `UPDATE ... WHERE consumed_at IS NULL` (or
//! insert on a unique key) has one winner.

use crate::error::{DaemonError, StoreError};
use crate::record::{Binding, EventRow, NewEvent};

/// What every query returns.
pub type Q<T> = Result<T, StoreError>;

/// What a write's rules return ([`crate::store::Store::write`]): outer `Err` rolls back,
/// inner `Err` commits then refuses (a drifted token is spent *and* refused).
pub type Written<T> = Result<Result<T, DaemonError>, DaemonError>;

/// A token row as the spending rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub id: i64,
    pub binding: Binding,
    pub state_fp: String,
    pub expires_at: i64,
    pub consumed_at: Option<i64>,
    /// How many times it was redeemed (the sequence number of its latest redemption).
    pub redeemed: i64,
}

/// A token's latest redemption, as release and record-consumed read it.
#[derive(Debug, Clone)]
pub struct RedemptionRow {
    pub redemption_id: Option<String>,
    pub redeemed: i64,
    pub released_at: Option<i64>,
    pub final_at: Option<i64>,
    pub binding: Binding,
}

/// A token to insert (a minted token, or an approval nobody holds).
#[derive(Debug, Clone, Copy)]
pub struct NewToken<'a> {
    pub hash: &'a [u8],
    pub binding: &'a Binding,
    pub state_fp: &'a str,
    pub created_at: i64,
    pub expires_at: i64,
}

/// Tokens, their redemptions, and consumed request states.
pub trait TokenQueries {
    fn token_by_hash(&self, hash: &[u8]) -> Q<Option<TokenRow>>;
    fn token_by_id(&self, id: i64) -> Q<Option<TokenRow>>;
    /// Inserts an unspent token; returns its id.
    fn insert_token(&self, t: &NewToken<'_>) -> Q<i64>;
    /// Spends token `id` if it is unspent: with `redemption` (id, sequence) as its new
    /// latest redemption, or without one (a drift). True for the one winner.
    fn spend_token(&self, id: i64, now: i64, redemption: Option<(&str, i64)>) -> Q<bool>;
    /// Spends token `id` (no redemption) if it is unspent.
    fn void_token(&self, id: i64, now: i64) -> Q<()>;
    /// The token a pre-schema-3 redemption id names (SQLite databases of old only).
    fn legacy_redemption(&self, redemption_id: &str) -> Q<Option<i64>>;
    fn redemption_of(&self, id: i64) -> Q<Option<RedemptionRow>>;
    /// Unspends token `id` if `redemption_id` is its live, unreleased, unrun redemption.
    fn release_token(&self, id: i64, redemption_id: &str, now: i64) -> Q<u64>;
    /// Marks that redemption as run if it is live and of a token minted for `b`.
    fn finalize_redemption(&self, id: i64, redemption_id: &str, b: &Binding, now: i64) -> Q<u64>;
    /// Spends every unspent token minted for `b`; returns how many.
    fn void_call_tokens(&self, b: &Binding, now: i64) -> Q<u64>;
    /// Deletes every unspent token (a secret rotation); returns how many.
    fn delete_unspent_tokens(&self) -> Q<u64>;
    /// Unspent tokens not expired at `now`.
    fn live_tokens(&self, now: i64) -> Q<u64>;
    /// Deletes tokens past `older_than` in expiry, spending and release (never the newest).
    fn collect_tokens(&self, older_than: i64) -> Q<u64>;
    /// Records a request state's nonce as used; true for the one winner.
    fn consume_state(&self, nonce: &str, now: i64, expires_at: i64) -> Q<bool>;
    /// Forgets used states that expired before `before`.
    fn collect_states(&self, before: i64) -> Q<()>;
}

/// A raised request as the approval rules read it.
#[derive(Debug, Clone)]
pub struct RaisedRow {
    pub request_id: Option<String>,
    pub binding: Binding,
    pub state_fp: String,
    pub expires_at: i64,
    pub status: String,
    pub reason: String,
    pub token_id: Option<i64>,
    pub uid: Option<u32>,
    pub expired_logged: bool,
    /// The arguments as raised (JSON; "" when not sent).
    pub args_json: String,
    /// Where its path arguments really lead (a `tc_core::grant::RealPaths` as JSON).
    pub real_paths: String,
    /// The grant that approved it ("" when a human did, or nobody yet).
    pub grant_id: String,
}

/// A raise to record (replacing the call's earlier row).
#[derive(Debug, Clone, Copy)]
pub struct NewRaised<'a> {
    pub binding: &'a Binding,
    pub state_fp: &'a str,
    pub summary: &'a str,
    pub raised_at: i64,
    pub expires_at: i64,
    pub request_id: &'a str,
    pub args_json: &'a str,
    pub covers: &'a str,
    pub uid: Option<u32>,
    pub preview: &'a str,
    pub real_paths: &'a str,
}

/// A raised request as `pending` lists it (status as stored).
#[derive(Debug, Clone)]
pub struct PendingRow {
    pub binding: Binding,
    pub state_fp: String,
    pub summary: String,
    pub raised_at: i64,
    pub expires_at: i64,
    /// A token was minted for it since it was raised.
    pub minted: bool,
    pub request_id: String,
    pub status: String,
    pub args_json: String,
    pub covers: String,
    pub uid: Option<u32>,
    pub reason: String,
    pub preview: String,
}

/// Raised requests.
pub trait RaisedQueries {
    fn raised_by_call(&self, b: &Binding) -> Q<Option<RaisedRow>>;
    fn raised_by_id(&self, request_id: &str) -> Q<Option<RaisedRow>>;
    /// Inserts, or replaces the call's row with a pending one.
    fn upsert_raised(&self, r: &NewRaised<'_>) -> Q<()>;
    fn delete_raised(&self, b: &Binding) -> Q<()>;
    fn mark_expired_logged(&self, b: &Binding) -> Q<()>;
    fn count_raised(&self) -> Q<i64>;
    /// Raised requests not expired at `now`.
    fn live_raised(&self, now: i64) -> Q<u64>;
    /// Approved by a human (`grant` "") or by grant `grant`, under token `token_id`.
    fn set_approved(&self, request_id: &str, token_id: i64, expires_at: i64, grant: &str) -> Q<()>;
    /// Declined with `reason`, standing until `until` at least.
    fn set_declined(&self, request_id: &str, reason: &str, until: i64) -> Q<()>;
    /// Pending rows expired by `cutoff` whose expiry is not logged yet.
    fn unlogged_expired(&self, cutoff: i64) -> Q<Vec<RaisedRow>>;
    fn delete_raised_before(&self, cutoff: i64) -> Q<()>;
    /// Rows expiring after `since`, newest first, of `vault` ("" for all).
    fn pending_rows(&self, since: i64, vault: &str) -> Q<Vec<PendingRow>>;
}

/// An event as retention weighs it.
#[derive(Debug, Clone)]
pub struct EventSize {
    pub id: i64,
    pub at_ms: i64,
    pub kind: String,
    pub bytes: u64,
}

/// An event as the page's history shows it.
#[derive(Debug, Clone)]
pub struct HistoryRow {
    pub at_ms: i64,
    pub kind: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    pub detail: String,
}

/// The audit log and what retention pruned from it.
pub trait EventQueries {
    /// Inserts `ev` (detail as stored) at `at_ms`; returns its id.
    fn insert_event(&self, ev: &NewEvent, detail: &str, at_ms: i64) -> Q<i64>;
    /// Events with `id > after`, oldest first, at most `limit`, only `owner`'s if given.
    /// None is left out that a later call with `after` = the last id returned would miss
    /// (an event may commit after one with a higher id: PostgreSQL returns only the ids
    /// below which everything has committed). Read before the transaction writes.
    fn events_after(&self, after: i64, limit: u32, owner: Option<u32>) -> Q<Vec<EventRow>>;
    /// How many events were ever committed (live and pruned).
    fn events_ever(&self) -> Q<i64>;
    /// The newest events of `kinds`, at most `limit`, only `owner`'s if given.
    fn history(&self, kinds: &[&str], limit: u32, owner: Option<u32>) -> Q<Vec<HistoryRow>>;
    /// The oldest events (never the newest), at most `limit`, with their sizes; every
    /// event with an id up to the last one returned is among them (committed).
    fn oldest_events(&self, limit: u32) -> Q<Vec<EventSize>>;
    fn delete_events_through(&self, id: i64) -> Q<()>;
    /// Counts one pruned event of `kind` for `reason`.
    fn count_pruned(&self, kind: &str, reason: &str) -> Q<()>;
    /// (kind, live + pruned) per kind, then ("", pruned, reason) per reason.
    fn event_totals(&self) -> Q<Vec<(String, u64, String)>>;
    /// The live log's size as retention counts it.
    fn event_bytes(&self) -> Q<u64>;
    /// Whether this transaction may collect and prune now: false while another replica
    /// of a shared database does (it holds the lock until its commit).
    fn try_collect_lock(&self) -> Q<bool>;
}

/// One human's second factor as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactorRow {
    pub secret: Vec<u8>,
    pub confirmed: bool,
    /// The last time step accepted (−1: none yet); only later steps are accepted.
    pub last_step: i64,
    /// Wrong (or replayed) codes since the last accepted one.
    pub failures: u32,
    /// No code is evaluated before this instant (ms since the epoch).
    pub next_try_at: i64,
    pub locked: bool,
    pub enrolled_at: i64,
}

/// Guarded mode's factors.
pub trait FactorQueries {
    /// The factor of `uid`; `for_update` locks the row until the commit (a backend whose
    /// writers are serialised anyway may ignore it).
    fn load_factor(&self, uid: u32, for_update: bool) -> Q<Option<FactorRow>>;
    /// Writes `row` as the factor of `uid`, replacing any earlier one.
    fn save_factor(&self, uid: u32, row: &FactorRow) -> Q<()>;
}

/// A passkey as `tcctl passkey list` shows it.
#[derive(Debug, Clone)]
pub struct PasskeyRow {
    pub credential: String,
    pub name: String,
    pub owner: Option<u32>,
    pub active: bool,
    pub created_at_ms: i64,
    pub last_used_at_ms: Option<i64>,
}

/// A passkey to register.
#[derive(Debug, Clone, Copy)]
pub struct NewPasskey<'a> {
    pub credential: &'a str,
    pub name: &'a str,
    /// The credential as webauthn-rs serialises it (public key and counter).
    pub passkey: &'a str,
    pub created_at: i64,
    pub owner: u32,
    pub active: bool,
}

/// A page link as spent: its uid, the request it names, its expiry.
pub type LinkRow = (u32, Option<String>, i64);

/// The approval page's rows: passkeys, registration codes, one-time links.
pub trait PageQueries {
    /// Serialised passkeys that may approve for `uid` (`guarded`: only that human's).
    fn usable_passkeys(&self, guarded: bool, uid: u32) -> Q<Vec<String>>;
    fn count_usable_passkeys(&self, guarded: bool, uid: u32) -> Q<u32>;
    fn list_passkeys(&self, viewer: Option<u32>) -> Q<Vec<PasskeyRow>>;
    /// Drops inactive registrations created by `before`.
    fn drop_unconfirmed_passkeys(&self, before: i64) -> Q<()>;
    /// False if the credential is known already.
    fn insert_passkey(&self, p: &NewPasskey<'_>) -> Q<bool>;
    /// Up to two (credential, owner, active) whose id starts with `prefix` (`who` 0: any).
    fn passkeys_by_prefix(&self, prefix: &str, who: u32) -> Q<Vec<(String, Option<u32>, bool)>>;
    /// Activates a registration created after `after`; true if it was.
    fn activate_passkey(&self, credential: &str, after: i64) -> Q<bool>;
    fn delete_passkey(&self, credential: &str) -> Q<()>;
    /// `Some(owner)` for an active credential.
    fn passkey_owner(&self, credential: &str) -> Q<Option<Option<u32>>>;
    fn passkey_text(&self, credential: &str) -> Q<Option<String>>;
    fn update_passkey(&self, credential: &str, passkey: &str, now: i64) -> Q<()>;
    /// Stores a registration code's hash, after dropping expired ones and all but the
    /// newest `keep - 1` of `owner`'s.
    fn insert_code(&self, hash: &[u8], expires_at: i64, owner: u32, keep: i64, now: i64) -> Q<()>;
    /// Spends `owner`'s live code; true if it was.
    fn spend_code(&self, hash: &[u8], now: i64, owner: u32) -> Q<bool>;
    fn void_codes(&self, owner: u32) -> Q<()>;
    /// Stores a link's hash, after dropping expired ones and all but the newest `keep - 1`
    /// of `uid`'s.
    fn insert_link(&self, hash: &[u8], link: &LinkRow, keep: i64, now: i64) -> Q<()>;
    /// Deletes and returns `uid`'s link, if any.
    fn take_link(&self, hash: &[u8], uid: u32) -> Q<Option<LinkRow>>;
}

/// Every query, over one transaction.
/// A grant as its rules read it.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantRow {
    pub id: String,
    pub vault: String,
    pub tool: String,
    pub caller: String,
    /// A `tc_core::grant::Scope` as JSON.
    pub scope: String,
    pub given_at: i64,
    pub expires_at: i64,
    /// None: no use count.
    pub uses_left: Option<i64>,
    pub used: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub ended_logged: bool,
    pub request_id: String,
    pub given_by: Option<u32>,
    /// Whose raised requests it covers (the uid that raised the approved one).
    pub raised_by: Option<u32>,
}

/// Grants.
pub trait GrantQueries {
    fn insert_grant(&self, g: &GrantRow) -> Q<()>;
    /// The grant `id` (PostgreSQL: locked for this transaction).
    fn grant_by_id(&self, id: &str) -> Q<Option<GrantRow>>;
    /// Grants for (vault, caller, tool) that are not revoked, expired or used up at `now`.
    fn live_grants(&self, vault: &str, caller: &str, tool: &str, now: i64) -> Q<Vec<GrantRow>>;
    /// Takes one use of grant `id` if it is live at `now`; true for the one winner.
    fn use_grant(&self, id: &str, now: i64) -> Q<bool>;
    /// Revokes grant `id` if it is not revoked yet; true if this call revoked it.
    fn revoke_grant(&self, id: &str, now: i64) -> Q<bool>;
    /// Grants live at `since` or after (revoked ones included), newest first.
    fn list_grants(&self, since: i64) -> Q<Vec<GrantRow>>;
    /// Grants that ended (expiry or last use) by `now`, not yet logged as ended.
    fn unlogged_ended_grants(&self, now: i64) -> Q<Vec<GrantRow>>;
    fn mark_grant_ended(&self, id: &str) -> Q<()>;
    /// Forgets grants that ended before `before`.
    fn delete_grants_before(&self, before: i64) -> Q<()>;
}

pub trait Tx:
    TokenQueries + RaisedQueries + EventQueries + FactorQueries + PageQueries + GrantQueries
{
}

impl<
        T: TokenQueries + RaisedQueries + EventQueries + FactorQueries + PageQueries + GrantQueries,
    > Tx for T
{
}
