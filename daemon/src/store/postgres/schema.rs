//! PostgreSQL's schema: versioned migrations (`tc_schema.version` is the number applied),
//! taken under an advisory lock so replicas starting at once apply each exactly once.

/// The migrations, oldest first; each runs in one transaction.
pub const MIGRATIONS: &[&str] = &[
    // 1: the ledger as SQLite's schema 10 has it (no legacy redemption ids: a PostgreSQL
    // ledger starts fresh), plus the key check and the replicas seen.
    r#"
    CREATE TABLE tc_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE replicas (
        id TEXT PRIMARY KEY, host TEXT NOT NULL,
        started_at BIGINT NOT NULL, seen_at BIGINT NOT NULL
    );
    CREATE TABLE raised (
        vault TEXT NOT NULL, caller TEXT NOT NULL, args_hash TEXT NOT NULL,
        tool TEXT NOT NULL, state_fp TEXT NOT NULL, summary TEXT NOT NULL,
        raised_at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
        request_id TEXT UNIQUE, args_json TEXT NOT NULL DEFAULT '',
        covers TEXT NOT NULL DEFAULT '', raised_by_uid BIGINT,
        status TEXT NOT NULL DEFAULT 'pending', reason TEXT NOT NULL DEFAULT '',
        token_id BIGINT, expired_logged BOOLEAN NOT NULL DEFAULT false,
        preview TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (vault, caller, args_hash)
    );
    CREATE INDEX raised_expiry ON raised (expires_at);
    CREATE TABLE tokens (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        token_hash BYTEA NOT NULL UNIQUE,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        args_hash TEXT NOT NULL, state_fp TEXT NOT NULL,
        created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
        consumed_at BIGINT, redemption_id TEXT, redeemed BIGINT NOT NULL DEFAULT 0,
        released_at BIGINT, final_at BIGINT
    );
    CREATE INDEX tokens_expiry ON tokens (expires_at);
    CREATE INDEX tokens_args ON tokens (args_hash);
    CREATE TABLE consumed_states (
        nonce TEXT PRIMARY KEY, consumed_at BIGINT NOT NULL, expires_at BIGINT NOT NULL
    );
    CREATE INDEX consumed_states_expiry ON consumed_states (expires_at);
    CREATE TABLE events (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL, vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        args_hash TEXT NOT NULL, state_fp TEXT NOT NULL, detail TEXT NOT NULL,
        owner_uid BIGINT
    );
    CREATE INDEX events_owner ON events (owner_uid, id);
    CREATE TABLE events_pruned (
        kind TEXT NOT NULL, reason TEXT NOT NULL, n BIGINT NOT NULL,
        PRIMARY KEY (kind, reason)
    );
    CREATE TABLE factors (
        uid BIGINT PRIMARY KEY, secret BYTEA NOT NULL,
        confirmed BOOLEAN NOT NULL DEFAULT false, last_step BIGINT NOT NULL DEFAULT -1,
        failures BIGINT NOT NULL DEFAULT 0, next_try_at BIGINT NOT NULL DEFAULT 0,
        locked BOOLEAN NOT NULL DEFAULT false, enrolled_at BIGINT NOT NULL
    );
    CREATE TABLE passkeys (
        cred_id TEXT PRIMARY KEY, name TEXT NOT NULL, passkey TEXT NOT NULL,
        created_at BIGINT NOT NULL, last_used_at BIGINT, owner_uid BIGINT,
        active BOOLEAN NOT NULL DEFAULT true
    );
    CREATE TABLE passkey_codes (
        code_hash BYTEA PRIMARY KEY, expires_at BIGINT NOT NULL, owner_uid BIGINT
    );
    CREATE TABLE page_links (
        link_hash BYTEA PRIMARY KEY, uid BIGINT NOT NULL, request_id TEXT,
        expires_at BIGINT NOT NULL
    );
    -- One round trip per event: the events lock (ids commit in id order), the insert,
    -- and the NOTIFY other replicas' --follow streams wake on (sent at commit).
    CREATE FUNCTION tc_log_event(p_lock INT, p_at BIGINT, p_kind TEXT, p_vault TEXT,
        p_tool TEXT, p_caller TEXT, p_args TEXT, p_fp TEXT, p_detail TEXT, p_owner BIGINT)
    RETURNS BIGINT LANGUAGE plpgsql AS $$
    DECLARE new_id BIGINT;
    BEGIN
        PERFORM pg_advisory_xact_lock(p_lock, hashtext(current_schema()));
        INSERT INTO events (at_ms, kind, vault, tool, caller, args_hash, state_fp, detail, owner_uid)
        VALUES (p_at, p_kind, p_vault, p_tool, p_caller, p_args, p_fp, p_detail, p_owner)
        RETURNING id INTO new_id;
        PERFORM pg_notify('tc_events', new_id::TEXT);
        RETURN new_id;
    END $$;
    "#,
    // 2 (grants): as SQLite's schema 11.
    r#"
    CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        vault TEXT NOT NULL, tool TEXT NOT NULL, caller TEXT NOT NULL,
        scope TEXT NOT NULL,
        given_at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
        uses_left BIGINT, used BIGINT NOT NULL DEFAULT 0, last_used_at BIGINT,
        revoked_at BIGINT, ended_logged BOOLEAN NOT NULL DEFAULT false,
        request_id TEXT NOT NULL, given_by_uid BIGINT, raised_by_uid BIGINT
    );
    CREATE INDEX grants_call ON grants (vault, caller, tool);
    ALTER TABLE raised ADD COLUMN real_paths TEXT NOT NULL DEFAULT '';
    ALTER TABLE raised ADD COLUMN grant_id TEXT NOT NULL DEFAULT '';
    "#,
    // 3 (events without a global lock): an event's id is its writing transaction's id
    // shifted left by 16 bits, plus its rank in that transaction, so id order is
    // transaction order and readers stop at the horizon (`HORIZON`) instead of writers
    // taking turns. The ids of older events (1, 2, ... from the identity) stay below.
    // No NOTIFY in the writer's transaction either (`notify.rs`).
    r#"
    ALTER TABLE events ALTER COLUMN id DROP IDENTITY IF EXISTS;
    DO $$ BEGIN
        IF (SELECT coalesce(max(id), 0) FROM events) >= pg_current_xact_id()::TEXT::BIGINT << 16 THEN
            RAISE EXCEPTION 'events: ids already reach past this transaction''s id space';
        END IF;
    END $$;
    CREATE FUNCTION tc_append_event(p_at BIGINT, p_kind TEXT, p_vault TEXT, p_tool TEXT,
        p_caller TEXT, p_args TEXT, p_fp TEXT, p_detail TEXT, p_owner BIGINT)
    RETURNS BIGINT LANGUAGE plpgsql AS $$
    DECLARE
        base BIGINT := pg_current_xact_id()::TEXT::BIGINT << 16;
        new_id BIGINT;
    BEGIN
        -- Only this transaction writes ids in [base, base + 65536): the next rank is one
        -- past the last it wrote (an index probe of its own, uncommitted rows).
        SELECT coalesce(max(id) + 1, base) INTO new_id FROM events
        WHERE id >= base AND id < base + 65536;
        IF new_id >= base + 65536 THEN
            RAISE EXCEPTION 'more than 65536 events in one transaction';
        END IF;
        INSERT INTO events (id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail, owner_uid)
        VALUES (new_id, p_at, p_kind, p_vault, p_tool, p_caller, p_args, p_fp, p_detail, p_owner);
        RETURN new_id;
    END $$;
    -- Replicas of the previous build, still running during an upgrade, call this: they
    -- now write ids the new way (no events lock) and still notify in their transaction.
    CREATE OR REPLACE FUNCTION tc_log_event(p_lock INT, p_at BIGINT, p_kind TEXT, p_vault TEXT,
        p_tool TEXT, p_caller TEXT, p_args TEXT, p_fp TEXT, p_detail TEXT, p_owner BIGINT)
    RETURNS BIGINT LANGUAGE plpgsql AS $$
    DECLARE new_id BIGINT;
    BEGIN
        new_id := tc_append_event(p_at, p_kind, p_vault, p_tool, p_caller, p_args, p_fp, p_detail, p_owner);
        PERFORM pg_notify('tc_events', new_id::TEXT);
        RETURN new_id;
    END $$;
    "#,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

// Advisory locks are (class, hashtext(current_schema())): one ledger per schema, so two
// ledgers in one database (or parallel tests) never wait on each other's locks.
/// The advisory lock class migrations run under ("tcmg").
pub const MIGRATE_LOCK: i32 = 0x7463_6d67;
/// The lock class one replica's collection and retention run under ("tcpr").
pub const PRUNE_LOCK: i32 = 0x7463_7072;
/// Below this id every event is committed for good: no transaction still running can
/// write one under it (an event's id is its transaction's id << 16, plus its rank; every
/// transaction older than the snapshot's `xmin` has ended). `--follow` readers and
/// retention stop here, so a reader of `id > N` never passes an id that commits later.
/// It is evaluated in the statement's own snapshot, so rows read with it are consistent.
pub const HORIZON: &str = "(pg_snapshot_xmin(pg_current_snapshot())::TEXT::BIGINT << 16)";
/// The channel each commit's newest event id is announced on (after the commit).
pub const CHANNEL: &str = "tc_events";
