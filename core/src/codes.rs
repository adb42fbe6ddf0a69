//! The machine-readable vocabulary of refusals: [`Reason`] travels from `tcd` to its
//! clients on gRPC errors, [`ErrorCode`] is what the shim shows the MCP client.

use std::fmt;
use std::str::FromStr;

/// Why the daemon refused a token, request state or cursor operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No such token / redemption (never issued, voided by a secret rotation, or collected
    /// a week after its expiry).
    Unknown,
    /// Past its expiry.
    Expired,
    /// Already used (token redeemed, request state consumed, redemption released or final).
    Spent,
    /// Presented for a different vault, tool, caller or args_hash than it was issued for.
    BindingMismatch,
    /// The target changed since the request was raised; the confirmation is spent.
    ReplayDrift,
    /// `tcctl elicit` for a call that was never blocked (or not by this caller).
    NoRaisedRequest,
    /// `--state-fp` names a fingerprint that is not the retained request's own.
    StateFpMismatch,
    /// Not something this daemon issued: garbage, tampered, or sealed under another key.
    Invalid,
    /// Issued to another caller.
    Foreign,
    /// Issued for another request (tool or arguments differ).
    RequestMismatch,
    /// A request argument is malformed (empty binding field, bad hex, ...).
    BadArgument,
    /// This (vault, caller) raised requests or reported events faster than
    /// `daemon.rate_limit_per_minute` allows; nothing was recorded.
    RateLimited,
    /// The human declined this request (`tcctl decline`, the page): a hard stop.
    Declined,
    /// No approval is held for this request (nobody approved it yet).
    NotApproved,
    /// Guarded mode: this needs the human's second factor and none was given.
    FactorRequired,
    /// Guarded mode: the code is wrong (a failure is counted).
    FactorInvalid,
    /// Guarded mode: too many wrong codes in a row; root must `tcctl unlock`.
    FactorLocked,
    /// Guarded mode: a wrong code was given moments ago; wait before the next try.
    FactorDelay,
    /// Guarded mode: this code's time step was already used (an alarm is logged).
    FactorReplayed,
    /// Guarded mode: the user has no confirmed factor (`sudo tcctl enroll totp`).
    NotEnrolled,
    /// The peer's uid may not do this (guarded mode: not a listed human, or not root).
    NotPermitted,
    /// A grant cannot be given as asked: the gate forbids grants, the scope exceeds its
    /// caps, or it does not cover the approved call itself.
    GrantRefused,
    /// The grant that let this call through was revoked (or lapsed) before it ran.
    Revoked,
}

impl Reason {
    /// All reasons, for exhaustive tests and docs.
    pub const ALL: [Reason; 23] = [
        Reason::Unknown,
        Reason::Expired,
        Reason::Spent,
        Reason::BindingMismatch,
        Reason::ReplayDrift,
        Reason::NoRaisedRequest,
        Reason::StateFpMismatch,
        Reason::Invalid,
        Reason::Foreign,
        Reason::RequestMismatch,
        Reason::BadArgument,
        Reason::RateLimited,
        Reason::Declined,
        Reason::NotApproved,
        Reason::FactorRequired,
        Reason::FactorInvalid,
        Reason::FactorLocked,
        Reason::FactorDelay,
        Reason::FactorReplayed,
        Reason::NotEnrolled,
        Reason::NotPermitted,
        Reason::GrantRefused,
        Reason::Revoked,
    ];

    /// The wire spelling (snake_case), stable across versions.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unknown => "unknown",
            Reason::Expired => "expired",
            Reason::Spent => "spent",
            Reason::BindingMismatch => "binding_mismatch",
            Reason::ReplayDrift => "replay_drift",
            Reason::NoRaisedRequest => "no_raised_request",
            Reason::StateFpMismatch => "state_fp_mismatch",
            Reason::Invalid => "invalid",
            Reason::Foreign => "foreign",
            Reason::RequestMismatch => "request_mismatch",
            Reason::BadArgument => "bad_argument",
            Reason::RateLimited => "rate_limited",
            Reason::Declined => "declined",
            Reason::NotApproved => "not_approved",
            Reason::FactorRequired => "factor_required",
            Reason::FactorInvalid => "factor_invalid",
            Reason::FactorLocked => "factor_locked",
            Reason::FactorDelay => "factor_delay",
            Reason::FactorReplayed => "factor_replayed",
            Reason::NotEnrolled => "not_enrolled",
            Reason::NotPermitted => "not_permitted",
            Reason::GrantRefused => "grant_refused",
            Reason::Revoked => "revoked",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Reason {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s).ok_or(())
    }
}

/// The `structuredContent.code` of a tool result (or `data.code` of a JSON-RPC error)
/// the shim returns to the MCP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    ElicitRequired,
    ReplayDrift,
    ApprovalDeclined,
    ApprovalNotObtained,
    InvalidInput,
    Overflow,
    TooLarge,
    AclDenied,
    ConfirmationUnavailable,
    GateNotConfigured,
    RateLimited,
    /// The raised request expired unanswered: nobody declined; a retry raises a fresh one.
    RequestExpired,
}

impl ErrorCode {
    /// The wire spelling (snake_case).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ElicitRequired => "elicit_required",
            ErrorCode::ReplayDrift => "replay_drift",
            ErrorCode::ApprovalDeclined => "approval_declined",
            ErrorCode::ApprovalNotObtained => "approval_not_obtained",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::Overflow => "overflow",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::AclDenied => "acl_denied",
            ErrorCode::ConfirmationUnavailable => "confirmation_unavailable",
            ErrorCode::GateNotConfigured => "gate_not_configured",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::RequestExpired => "request_expired",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Audit event kinds written to the event log.
pub mod events {
    pub const REQUESTED: &str = "tc.elicit.requested";
    pub const MINTED: &str = "tc.elicit.minted";
    pub const CONSUMED: &str = "tc.elicit.consumed";
    pub const RELEASED: &str = "hitl_released";
    pub const DECLINED: &str = "tc.elicit.declined";
    pub const NOT_OBTAINED: &str = "tc.elicit.not_obtained";
    pub const REPLAY_DRIFT: &str = "replay_drift";
    pub const REFUSED: &str = "tc.elicit.refused";
    pub const REDEEMED: &str = "tc.elicit.redeemed";
    pub const OVERFLOW: &str = "tc.governor.overflow";
    pub const CURSOR_REJECTED: &str = "tc.cursor.rejected";
    pub const AUTH_DENIED: &str = "tc.auth.denied";
    pub const SECRET_ROTATED: &str = "tc.secret.rotated";
    /// A human approved a raised request by its id (`tcctl approve`, the page).
    pub const APPROVED: &str = "tc.elicit.approved";
    /// A raised request expired unanswered.
    pub const EXPIRED: &str = "tc.elicit.expired";
    pub const FACTOR_ENROLLED: &str = "tc.factor.enrolled";
    pub const FACTOR_FAILED: &str = "tc.factor.failed";
    pub const FACTOR_LOCKED: &str = "tc.factor.locked";
    pub const FACTOR_UNLOCKED: &str = "tc.factor.unlocked";
    /// A code whose time step was already used: it may have been read over a shoulder.
    pub const FACTOR_REPLAYED: &str = "tc.factor.replayed";
    /// A passkey was registered on the approval page (with a code from `tcctl passkey add`).
    pub const PASSKEY_ADDED: &str = "tc.passkey.added";
    /// A passkey registered in guarded mode was confirmed (its human's code, or root).
    pub const PASSKEY_CONFIRMED: &str = "tc.passkey.confirmed";
    /// A passkey was removed (`tcctl passkey remove`).
    pub const PASSKEY_REMOVED: &str = "tc.passkey.removed";
    /// The approval page was opened with a `tcctl page` link (a new page session).
    pub const PAGE_OPENED: &str = "tc.page.opened";
    /// A bearer token for an HTTP caller was minted (`tcctl token mint`); never the token.
    pub const BEARER_MINTED: &str = "tc.bearer.minted";
    /// A human gave a grant with an approval (its scope, expiry and uses in the detail).
    pub const GRANT_GIVEN: &str = "tc.grant.given";
    /// A grant let a call through without a prompt (grant id, args_hash, state_fp).
    pub const GRANT_USED: &str = "tc.grant.used";
    /// A human revoked a grant.
    pub const GRANT_REVOKED: &str = "tc.grant.revoked";
    /// A grant reached its expiry or its last use.
    pub const GRANT_ENDED: &str = "tc.grant.ended";
    /// A push about a raised request was given up (`[notify]`: target, attempts, why).
    pub const PUSH_FAILED: &str = "tc.push.failed";

    /// How a call that waited on a human ended: `detail.outcome` is an [`super::Outcome`].
    pub const CALL_OUTCOME: &str = "tc.call.outcome";

    /// Kinds a client may append with `AppendEvent`; the rest only the daemon writes.
    pub const CLIENT_APPENDABLE: &[&str] = &[DECLINED, NOT_OBTAINED, OVERFLOW, CALL_OUTCOME];
}

/// How a call that waited on a human ended, as the SEP-2848 draft names the four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Approved, sent, and the server answered with a result.
    Executed,
    /// Not run: declined, not approved in time, or refused after the approval.
    Denied,
    /// Approved and sent; the server answered with an error (or `isError`).
    Errored,
    /// Approved and sent; its answer never came (the server went away, or it was
    /// cancelled): it may or may not have run, and tc never sends it again.
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Denied => "denied",
            Outcome::Errored => "errored",
            Outcome::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_through_their_wire_names() {
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
        }
        assert!("nonsense".parse::<Reason>().is_err());
    }
}
