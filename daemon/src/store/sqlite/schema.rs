//! SQLite's schema: the versioned migrations (`PRAGMA user_version` is the index of the
//! last one applied), each run in one exclusive transaction at open.

/// Schema migrations; `PRAGMA user_version` is the index of the last one applied.
pub const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
    CREATE TABLE raised (
        vault TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        tool TEXT NOT NULL, state_fp TEXT NOT NULL, summary TEXT NOT NULL,
        raised_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        PRIMARY KEY (vault, caller, args_hash)
    );
    CREATE TABLE tokens (
        token_hash BLOB PRIMARY KEY,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        state_fp TEXT NOT NULL,
        created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        consumed_at INTEGER, redemption_id TEXT
    );
    CREATE TABLE redemptions (
        id TEXT PRIMARY KEY, token_hash BLOB NOT NULL,
        redeemed_at INTEGER NOT NULL, released_at INTEGER, final_at INTEGER
    );
    CREATE TABLE consumed_states (
        nonce TEXT PRIMARY KEY, consumed_at INTEGER NOT NULL, expires_at INTEGER NOT NULL
    );
    CREATE INDEX consumed_states_expiry ON consumed_states (expires_at);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        args_hash TEXT NOT NULL, state_fp TEXT NOT NULL, detail TEXT NOT NULL
    );
    CREATE TABLE counters (
        name TEXT NOT NULL, labels TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (name, labels)
    );
    "#,
    // 2: counters are derived from the event log at start and kept in memory (one less
    // write per event); a partial index keeps "live tokens" cheap for `Status`.
    r#"
    DROP TABLE counters;
    CREATE INDEX tokens_live ON tokens (expires_at) WHERE consumed_at IS NULL;
    "#,
    // 3: `redemptions` folds into `tokens` (a redeem writes one row instead of two rows
    // in two tables, each with its own B-trees). A token keeps its latest redemption:
    // `redemption_id`, its sequence number `redeemed`, `released_at`, `final_at`. New
    // redemption ids are `<tokens.id>.<seq>.<random>`, found by rowid with no index; ids
    // issued before this migration (no '.') are found through `legacy_redemptions`,
    // written only here. `id` is an explicit rowid so VACUUM cannot renumber it.
    r#"
    CREATE TABLE tokens_v3 (
        id INTEGER PRIMARY KEY,
        token_hash BLOB NOT NULL,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        state_fp TEXT NOT NULL,
        created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        consumed_at INTEGER,
        redemption_id TEXT, redeemed INTEGER NOT NULL DEFAULT 0,
        released_at INTEGER, final_at INTEGER
    );
    INSERT INTO tokens_v3 (token_hash, vault, tool, caller, args_hash, state_fp, created_at,
                           expires_at, consumed_at, redemption_id, redeemed, released_at, final_at)
    SELECT t.token_hash, t.vault, t.tool, t.caller, t.args_hash, t.state_fp, t.created_at,
           t.expires_at, t.consumed_at, r.id,
           (SELECT count(*) FROM redemptions c WHERE c.token_hash = t.token_hash),
           r.released_at, r.final_at
    FROM tokens t
    -- The latest redemption: the one the token names while spent, else the newest row
    -- (released ones; v2 cleared tokens.redemption_id on release).
    LEFT JOIN redemptions r ON r.rowid = coalesce(
        (SELECT x.rowid FROM redemptions x WHERE x.id = t.redemption_id),
        (SELECT max(y.rowid) FROM redemptions y WHERE y.token_hash = t.token_hash))
    ORDER BY t.rowid;
    CREATE TABLE legacy_redemptions (id TEXT PRIMARY KEY, token_id INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO legacy_redemptions (id, token_id)
    SELECT r.id, n.id FROM redemptions r JOIN tokens_v3 n ON n.token_hash = r.token_hash;
    DROP TABLE redemptions;
    DROP TABLE tokens;
    ALTER TABLE tokens_v3 RENAME TO tokens;
    CREATE UNIQUE INDEX tokens_hash ON tokens (token_hash);
    CREATE INDEX tokens_live ON tokens (expires_at) WHERE consumed_at IS NULL;
    -- Events lose AUTOINCREMENT: events are never deleted, so max(id)+1 hands out the
    -- same ids, and every event no longer also rewrites the sqlite_sequence page.
    CREATE TABLE events_v3 (
        id INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        args_hash TEXT NOT NULL, state_fp TEXT NOT NULL, detail TEXT NOT NULL
    );
    INSERT INTO events_v3 (id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail)
    SELECT id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail FROM events;
    DROP TABLE events;
    ALTER TABLE events_v3 RENAME TO events;
    "#,
    // 4: indexes that a redeem never rewrites. `tokens_live` (partial on `consumed_at IS
    // NULL`) lost an entry on every redeem: one more B-tree page in each redeem's fsync.
    // `tokens_expiry` covers the same `Status` count (a range scan of the tokens minted
    // within one TTL) and lets garbage collection find old tokens; `tokens_args` finds a
    // call's tokens for `RecordConsumed`'s sibling voiding and `pending`'s "minted" flag,
    // which scanned the whole table before. Neither column changes after minting.
    r#"
    DROP INDEX tokens_live;
    CREATE INDEX tokens_expiry ON tokens (expires_at);
    CREATE INDEX tokens_args ON tokens (args_hash);
    "#,
    // 5: events are pruned by retention (`retention.rs`); what was pruned is counted here
    // per kind and reason, so the counters derived at start (live events + pruned ones)
    // never go backwards.
    r#"
    CREATE TABLE events_pruned (
        kind TEXT NOT NULL, reason TEXT NOT NULL, n INTEGER NOT NULL,
        PRIMARY KEY (kind, reason)
    ) WITHOUT ROWID;
    "#,
    // 6 (guarded mode): one TOTP factor per human uid (`factor/`). `last_step` is the
    // last time step accepted (only later ones are), `failures` the wrong codes in a row,
    // `next_try_at` (ms) when the next code may be evaluated, `locked` until root unlocks.
    r#"
    CREATE TABLE factors (
        uid INTEGER PRIMARY KEY,
        secret BLOB NOT NULL,
        confirmed INTEGER NOT NULL DEFAULT 0,
        last_step INTEGER NOT NULL DEFAULT -1,
        failures INTEGER NOT NULL DEFAULT 0,
        next_try_at INTEGER NOT NULL DEFAULT 0,
        locked INTEGER NOT NULL DEFAULT 0,
        enrolled_at INTEGER NOT NULL
    );
    "#,
    // 7 (approvals): a raised request gets a short id, its full arguments, what its
    // approval covers and the uid that raised it; `status` is pending, approved (the
    // approval is the token row `token_id`, never shown to anyone) or declined (with
    // `reason`); `expired_logged`: its tc.elicit.expired event is written.
    r#"
    ALTER TABLE raised ADD COLUMN request_id TEXT;
    ALTER TABLE raised ADD COLUMN args_json TEXT NOT NULL DEFAULT '';
    ALTER TABLE raised ADD COLUMN covers TEXT NOT NULL DEFAULT '';
    ALTER TABLE raised ADD COLUMN raised_by_uid INTEGER;
    ALTER TABLE raised ADD COLUMN status TEXT NOT NULL DEFAULT 'pending';
    ALTER TABLE raised ADD COLUMN reason TEXT NOT NULL DEFAULT '';
    ALTER TABLE raised ADD COLUMN token_id INTEGER;
    ALTER TABLE raised ADD COLUMN expired_logged INTEGER NOT NULL DEFAULT 0;
    CREATE UNIQUE INDEX raised_request_id ON raised (request_id);
    CREATE INDEX raised_expiry ON raised (expires_at);
    "#,
    // 8 (preview): the gate's preview the shim computed for a raised request (a unified
    // diff, or the line saying why none is shown), capped; '' when the gate has none.
    r#"
    ALTER TABLE raised ADD COLUMN preview TEXT NOT NULL DEFAULT '';
    "#,
    // 9 (the approval page): passkeys registered for approving on the page (`page/`),
    // the WebAuthn credential as webauthn-rs serialises it (public key and counter, no
    // secret); and the one-time registration codes `tcctl passkey add` prints (their
    // SHA-256 only, single use, short-lived).
    r#"
    CREATE TABLE passkeys (
        cred_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        passkey TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_used_at INTEGER
    );
    CREATE TABLE passkey_codes (
        code_hash BLOB PRIMARY KEY,
        expires_at INTEGER NOT NULL
    );
    "#,
    // 10 (whose is what): the uid each event, passkey and registration code belongs to
    // (NULL: the daemon's own, or written before owners existed); a passkey registered in
    // guarded mode waits inactive until its human confirms it with their code; and the
    // one-time links `tcctl page` opens the page with (their SHA-256 only).
    r#"
    ALTER TABLE events ADD COLUMN owner_uid INTEGER;
    CREATE INDEX events_owner ON events (owner_uid, id);
    ALTER TABLE passkeys ADD COLUMN owner_uid INTEGER;
    ALTER TABLE passkeys ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE passkey_codes ADD COLUMN owner_uid INTEGER;
    CREATE TABLE page_links (
        link_hash BLOB PRIMARY KEY,
        uid INTEGER NOT NULL,
        request_id TEXT,
        expires_at INTEGER NOT NULL
    );
    "#,
    // 11 (grants): a human's grant for calls similar to one they approved (`grants.rs`);
    // a raised request keeps where its path arguments really lead (what a grant's globs
    // are matched against) and the grant that approved it, if one did.
    r#"
    CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        scope TEXT NOT NULL,
        given_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
        uses_left INTEGER, used INTEGER NOT NULL DEFAULT 0, last_used_at INTEGER,
        revoked_at INTEGER, ended_logged INTEGER NOT NULL DEFAULT 0,
        request_id TEXT NOT NULL, given_by_uid INTEGER, raised_by_uid INTEGER
    );
    CREATE INDEX grants_call ON grants (vault, caller, tool);
    ALTER TABLE raised ADD COLUMN real_paths TEXT NOT NULL DEFAULT '';
    ALTER TABLE raised ADD COLUMN grant_id TEXT NOT NULL DEFAULT '';
    "#,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();
