//! The ledger's rows read out of a result row of either backend: one reader per row type
//! over [`Cells`], so SQLite and PostgreSQL map their columns in one place.
//!
//! Each reader takes the columns in the order of the matching `*_COLS` list below (or of
//! the query named in its comment); both backends select them in that order.

use crate::record::{Binding, EventRow};
use crate::store::queries::{
    EventSize, FactorRow, GrantRow, HistoryRow, PasskeyRow, PendingRow, RaisedRow, RedemptionRow,
    TokenRow, Q,
};

/// A column value both drivers can decode.
pub trait Cell: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a> {}
impl<T: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a>> Cell for T {}

/// A result row of either backend.
pub trait Cells {
    /// Column `i`, decoded as `T`.
    fn cell<T: Cell>(&self, i: usize) -> Q<T>;

    /// A uid column (stored as a 64-bit integer): `None` for NULL or out of range.
    fn uid(&self, i: usize) -> Q<Option<u32>> {
        Ok(self
            .cell::<Option<i64>>(i)?
            .and_then(|v| u32::try_from(v).ok()))
    }

    /// The four binding columns from column `at` on (vault, tool, caller, args_hash).
    fn binding(&self, at: usize) -> Q<Binding> {
        Ok(Binding {
            vault: self.cell(at)?,
            tool: self.cell(at + 1)?,
            caller: self.cell(at + 2)?,
            args_hash: self.cell(at + 3)?,
        })
    }
}

impl Cells for rusqlite::Row<'_> {
    fn cell<T: Cell>(&self, i: usize) -> Q<T> {
        Ok(self.get(i)?)
    }
}

impl Cells for tokio_postgres::Row {
    fn cell<T: Cell>(&self, i: usize) -> Q<T> {
        Ok(self.try_get(i)?)
    }
}

pub const TOKEN_COLS: &str =
    "id, vault, tool, caller, args_hash, state_fp, expires_at, consumed_at, redeemed";

pub fn token_row(r: &impl Cells) -> Q<TokenRow> {
    Ok(TokenRow {
        id: r.cell(0)?,
        binding: r.binding(1)?,
        state_fp: r.cell(5)?,
        expires_at: r.cell(6)?,
        consumed_at: r.cell(7)?,
        redeemed: r.cell(8)?,
    })
}

pub const REDEMPTION_COLS: &str =
    "redemption_id, redeemed, released_at, final_at, vault, tool, caller, args_hash";

pub fn redemption_row(r: &impl Cells) -> Q<RedemptionRow> {
    Ok(RedemptionRow {
        redemption_id: r.cell(0)?,
        redeemed: r.cell(1)?,
        released_at: r.cell(2)?,
        final_at: r.cell(3)?,
        binding: r.binding(4)?,
    })
}

pub const RAISED_COLS: &str = "request_id, vault, tool, caller, args_hash, state_fp, expires_at, \
                               status, reason, token_id, raised_by_uid, expired_logged, \
                               args_json, real_paths, grant_id";

pub fn raised_row(r: &impl Cells) -> Q<RaisedRow> {
    Ok(RaisedRow {
        request_id: r.cell(0)?,
        binding: r.binding(1)?,
        state_fp: r.cell(5)?,
        expires_at: r.cell(6)?,
        status: r.cell(7)?,
        reason: r.cell(8)?,
        token_id: r.cell(9)?,
        uid: r.uid(10)?,
        expired_logged: r.cell(11)?,
        args_json: r.cell(12)?,
        real_paths: r.cell(13)?,
        grant_id: r.cell(14)?,
    })
}

/// A raised request as `tcctl pending` and the page list it (over `raised r`): whether a
/// token was minted for its exact state since it was raised, and its display columns.
pub const PENDING_COLS: &str = "r.vault, r.tool, r.caller, r.args_hash, r.state_fp, r.summary,
    r.raised_at, r.expires_at,
    EXISTS (SELECT 1 FROM tokens t WHERE t.vault = r.vault AND t.caller = r.caller
            AND t.args_hash = r.args_hash AND t.state_fp = r.state_fp
            AND t.created_at >= r.raised_at),
    coalesce(r.request_id, ''), r.status, r.args_json, r.covers, r.raised_by_uid, r.reason,
    r.preview";

pub fn pending_row(r: &impl Cells) -> Q<PendingRow> {
    Ok(PendingRow {
        binding: r.binding(0)?,
        state_fp: r.cell(4)?,
        summary: r.cell(5)?,
        raised_at: r.cell(6)?,
        expires_at: r.cell(7)?,
        minted: r.cell(8)?,
        request_id: r.cell(9)?,
        status: r.cell(10)?,
        args_json: r.cell(11)?,
        covers: r.cell(12)?,
        uid: r.uid(13)?,
        reason: r.cell(14)?,
        preview: r.cell(15)?,
    })
}

pub const EVENT_COLS: &str = "id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail";

pub fn event_row(r: &impl Cells) -> Q<EventRow> {
    Ok(EventRow {
        id: r.cell(0)?,
        at_ms: r.cell(1)?,
        kind: r.cell(2)?,
        vault: r.cell(3)?,
        tool: r.cell(4)?,
        caller: r.cell(5)?,
        args_hash: r.cell(6)?,
        state_fp: r.cell(7)?,
        detail: r.cell(8)?,
    })
}

pub const HISTORY_COLS: &str = "at_ms, kind, vault, tool, caller, detail";

pub fn history_row(r: &impl Cells) -> Q<HistoryRow> {
    Ok(HistoryRow {
        at_ms: r.cell(0)?,
        kind: r.cell(1)?,
        vault: r.cell(2)?,
        tool: r.cell(3)?,
        caller: r.cell(4)?,
        detail: r.cell(5)?,
    })
}

/// The columns of `oldest_events`: id, at_ms, kind, then the event's size.
pub fn event_size(r: &impl Cells) -> Q<EventSize> {
    Ok(EventSize {
        id: r.cell(0)?,
        at_ms: r.cell(1)?,
        kind: r.cell(2)?,
        bytes: r.cell::<i64>(3)?.max(0) as u64,
    })
}

pub const FACTOR_COLS: &str =
    "secret, confirmed, last_step, failures, next_try_at, locked, enrolled_at";

pub fn factor_row(r: &impl Cells) -> Q<FactorRow> {
    Ok(FactorRow {
        secret: r.cell(0)?,
        confirmed: r.cell(1)?,
        last_step: r.cell(2)?,
        failures: u32::try_from(r.cell::<i64>(3)?).unwrap_or(u32::MAX),
        next_try_at: r.cell(4)?,
        locked: r.cell(5)?,
        enrolled_at: r.cell(6)?,
    })
}

pub const PASSKEY_COLS: &str = "cred_id, name, owner_uid, active, created_at, last_used_at";

pub fn passkey_row(r: &impl Cells) -> Q<PasskeyRow> {
    Ok(PasskeyRow {
        credential: r.cell(0)?,
        name: r.cell(1)?,
        owner: r.uid(2)?,
        active: r.cell(3)?,
        created_at_ms: r.cell(4)?,
        last_used_at_ms: r.cell(5)?,
    })
}

pub const GRANT_COLS: &str = "id, vault, tool, caller, scope, given_at, expires_at, uses_left, \
                              used, last_used_at, revoked_at, ended_logged, request_id, \
                              given_by_uid, raised_by_uid";

pub fn grant_row(r: &impl Cells) -> Q<GrantRow> {
    Ok(GrantRow {
        id: r.cell(0)?,
        vault: r.cell(1)?,
        tool: r.cell(2)?,
        caller: r.cell(3)?,
        scope: r.cell(4)?,
        given_at: r.cell(5)?,
        expires_at: r.cell(6)?,
        uses_left: r.cell(7)?,
        used: r.cell(8)?,
        last_used_at: r.cell(9)?,
        revoked_at: r.cell(10)?,
        ended_logged: r.cell(11)?,
        request_id: r.cell(12)?,
        given_by: r.uid(13)?,
        raised_by: r.uid(14)?,
    })
}
