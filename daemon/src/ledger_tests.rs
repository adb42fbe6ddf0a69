//! Unit tests of the ledger: migrations from old schemas, collection, sealing limits,
//! and the index and release rules of tokens.

use super::*;
use rusqlite::{params, Connection};

use crate::seal;

fn reason<T: std::fmt::Debug>(r: Result<T, DaemonError>) -> Reason {
    match r {
        Err(DaemonError::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A schema-2 database (tokens + a separate `redemptions` table) with tokens in every
/// state migrates to schema 3 (and on to the current one) with each token's state intact: what was spent stays
/// spent, what was released redeems again, a final redemption cannot be released, and
/// the old redemption ids still release (once) or are refused as before.
#[test]
fn schema_2_tokens_and_redemptions_survive_migrations_3_and_4() {
    let dir = tempfile::tempdir().unwrap();
    let secret = Secret::load_or_create(dir.path()).unwrap();
    let hash = |t: &str| {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.keys.token).unwrap();
        m.update(t.as_bytes());
        m.finalize().into_bytes().to_vec()
    };
    let b = call_of(b"args");
    let fp = tc_core::hash::sha256_hex(b"fp");
    let now = now_ms();
    let exp = now + 3_600_000;
    let db = dir.path().join("cache.db");
    {
        let c = Connection::open(&db).unwrap();
        c.execute_batch(crate::store::sqlite::MIGRATIONS[0])
            .unwrap();
        c.execute_batch(crate::store::sqlite::MIGRATIONS[1])
            .unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
        for id in [1, 2, 7] {
            c.execute(
                "INSERT INTO events (id, at_ms, kind, vault, tool, caller, args_hash, state_fp, detail)
                 VALUES (?1, 0, 'old', '', '', '', '', '', '{}')",
                params![id],
            )
            .unwrap();
        }
        // (token, consumed, tokens.redemption_id, [(redemption, released, final)])
        type Fixture<'a> = (&'a str, bool, Option<&'a str>, Vec<(&'a str, bool, bool)>);
        let fixtures: Vec<Fixture> = vec![
            ("tct_spent", true, Some("rA"), vec![("rA", false, false)]),
            ("tct_released", false, None, vec![("rB", true, false)]),
            ("tct_final", true, Some("rC"), vec![("rC", false, true)]),
            ("tct_fresh", false, None, vec![]),
            (
                "tct_twice",
                true,
                Some("rD2"),
                vec![("rD1", true, false), ("rD2", false, false)],
            ),
        ];
        for (tok, consumed, rid, reds) in fixtures {
            c.execute(
                "INSERT INTO tokens (token_hash, vault, tool, caller, args_hash, state_fp,
                   created_at, expires_at, consumed_at, redemption_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    hash(tok),
                    b.vault,
                    b.tool,
                    b.caller,
                    b.args_hash,
                    fp,
                    now,
                    exp,
                    consumed.then_some(now),
                    rid
                ],
            )
            .unwrap();
            for (id, released, fin) in reds {
                c.execute(
                    "INSERT INTO redemptions (id, token_hash, redeemed_at, released_at, final_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        id,
                        hash(tok),
                        now,
                        released.then_some(now),
                        fin.then_some(now)
                    ],
                )
                .unwrap();
            }
        }
    }
    let store = Store::open(&db).unwrap();
    let l = Ledger::new(store, Secret::load_or_create(dir.path()).unwrap(), 300);
    // The audit log keeps its ids, and new events continue after them.
    let old: Vec<i64> = l
        .store
        .events_after(0, 10)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(old, vec![1, 2, 7]);
    let v: i64 = l
        .store
        .sql(|c| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?))
        .unwrap();
    assert_eq!(v as usize, crate::store::sqlite::SCHEMA_VERSION);

    // Spent stays spent; its redemption releases once, then the token redeems again.
    assert_eq!(reason(l.redeem("tct_spent", &b, &fp)), Reason::Spent);
    l.release("rA", "test").unwrap();
    assert_eq!(reason(l.release("rA", "test")), Reason::Spent);
    let again = l.redeem("tct_spent", &b, &fp).unwrap();
    assert_eq!(reason(l.release("rA", "test")), Reason::Spent);
    assert_eq!(reason(l.redeem("tct_spent", &b, &fp)), Reason::Spent);

    // Released stays released (once), and redeems again.
    assert_eq!(reason(l.release("rB", "test")), Reason::Spent);
    let rb2 = l.redeem("tct_released", &b, &fp).unwrap();
    assert_eq!(reason(l.release("rB", "test")), Reason::Spent);
    l.release(&rb2, "test").unwrap();

    // Final cannot be released; the token stays spent.
    assert_eq!(reason(l.release("rC", "test")), Reason::Spent);
    assert_eq!(reason(l.redeem("tct_final", &b, &fp)), Reason::Spent);

    // Redeemed twice: the first redemption was released, the second is live.
    assert_eq!(reason(l.release("rD1", "test")), Reason::Spent);
    l.release("rD2", "test").unwrap();

    // Once the handler ran, the redemption is final (no release).
    l.consumed(&b, &fp, "test", &again).unwrap();
    assert_eq!(reason(l.release(&again, "test")), Reason::Spent);

    let next = l.store.events_after(7, 1).unwrap();
    assert_eq!(next[0].id, 8, "{next:?}");

    // Unknown ids stay unknown, new-format or not.
    assert_eq!(reason(l.release("nope", "test")), Reason::Unknown);
    assert_eq!(reason(l.release("999.1.x", "test")), Reason::Unknown);
    assert_eq!(reason(l.release("", "test")), Reason::Unknown);

    // The original expiry came through the migration untouched.
    let exps: Vec<i64> = l
        .store
        .sql(|c| {
            let mut st = c.prepare("SELECT expires_at FROM tokens")?;
            let rows = st.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .unwrap();
    assert_eq!(exps, vec![exp; 5]);
}

/// A ledger on a fresh database with a per-process key and a 300 s TTL.
fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::for_test(dir.path());
    (dir, Ledger::new(store, Secret::ephemeral(), 300))
}

/// Call `n` of tool `t` in vault `v` by caller `c`.
fn call(n: u8) -> Binding {
    call_of(&[n])
}

/// The call of tool `t` in vault `v` by caller `c` whose arguments hash as `args` does.
fn call_of(args: &[u8]) -> Binding {
    Binding {
        vault: "v".into(),
        tool: "t".into(),
        caller: "c".into(),
        args_hash: tc_core::hash::sha256_hex(args),
    }
}

/// Garbage collection deletes tokens only once they are past their expiry and their
/// last redemption by the retention, keeps the newest row (ids must not be reused),
/// and a deleted token is still refused.
#[test]
fn gc_deletes_only_tokens_past_the_retention() {
    let (_dir, l) = ledger();
    let fp = tc_core::hash::sha256_hex(b"fp");
    let mut tokens = Vec::new();
    for n in 0..3 {
        l.raise(&call(n), &fp, "s").unwrap();
        tokens.push(l.mint(&call(n), None, &Default::default()).unwrap().0);
    }
    l.redeem(&tokens[0], &call(0), &fp).unwrap();
    let rows = || -> i64 { l.store.scalar("SELECT count(*) FROM tokens").unwrap() };
    let now = now_ms();
    l.gc_at(now).unwrap();
    l.gc_at(now + 300_000 + TOKEN_RETENTION_MS - 60_000)
        .unwrap();
    assert_eq!(rows(), 3, "nothing is old enough yet");
    assert_eq!(reason(l.redeem(&tokens[0], &call(0), &fp)), Reason::Spent);

    l.gc_at(now + 300_000 + TOKEN_RETENTION_MS + 60_000)
        .unwrap();
    assert_eq!(
        rows(),
        1,
        "the spent and the expired token go, the newest row stays"
    );
    assert_eq!(reason(l.redeem(&tokens[0], &call(0), &fp)), Reason::Unknown);
    assert_eq!(reason(l.redeem(&tokens[1], &call(1), &fp)), Reason::Unknown);
    // The kept row is the newest, so the next token gets a fresh id.
    let newest: i64 = l.store.scalar("SELECT max(id) FROM tokens").unwrap();
    l.raise(&call(9), &fp, "s").unwrap();
    let t = l.mint(&call(9), None, &Default::default()).unwrap().0;
    let r = l.redeem(&t, &call(9), &fp).unwrap();
    assert!(r.starts_with(&format!("{}.", newest + 1)), "{r}");
}

/// A used request state stays recorded for a day past its expiry, so a wall clock
/// stepped back after a collection cannot make it open again.
#[test]
fn gc_keeps_used_states_a_day_past_their_expiry() {
    let (_dir, l) = ledger();
    let fp = tc_core::hash::sha256_hex(b"fp");
    let (blob, exp) = l.seal_state(&call(1), &fp, b"inner").unwrap();
    l.open_state(&blob, &call(1), true, &fp).unwrap();
    let rows = || -> i64 {
        l.store
            .scalar("SELECT count(*) FROM consumed_states")
            .unwrap()
    };
    l.gc_at(exp + 3_600_000).unwrap();
    assert_eq!(rows(), 1);
    assert_eq!(
        reason(l.open_state(&blob, &call(1), true, &fp)),
        Reason::Spent
    );
    l.gc_at(exp + 86_400_000 + 1).unwrap();
    assert_eq!(rows(), 0);
}

/// An inner state too large to come back through `open` is refused when sealing, with
/// its size, instead of being handed out and refused as `invalid` on the way back; the
/// largest that fits opens with its bytes intact.
#[test]
fn a_state_too_large_to_open_is_refused_when_sealed() {
    let (_dir, l) = ledger();
    let fp = tc_core::hash::sha256_hex(b"fp");
    let big = vec![b'x'; seal::MAX_SEALED_LEN];
    match l.seal_state(&call(1), &fp, &big) {
        Err(DaemonError::Refused { reason, message }) => {
            assert_eq!(reason, Reason::BadArgument);
            assert!(message.contains(&big.len().to_string()), "{message}");
        }
        other => panic!("sealed {:?}", other.map(|(b, _)| b.len())),
    }
    let fits = vec![b'y'; 30 * 1024];
    let (blob, _) = l.seal_state(&call(1), &fp, &fits).unwrap();
    let s = l.open_state(&blob, &call(1), false, "").unwrap();
    assert_eq!(seal::decode_inner(&s.inner).unwrap(), fits);
}

/// A redeem changes no indexed column of `tokens` (each index would be one more page
/// in its fsync), and the per-call lookups use `tokens_args` instead of a table scan.
#[test]
fn redeem_rewrites_no_index_and_call_lookups_are_indexed() {
    // SQLite's own index lists and query plans.
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::new(
        Store::open(&dir.path().join("db")).unwrap(),
        Secret::ephemeral(),
        300,
    );
    let (indexed, partial, plans) = l
        .store
        .sql(|c| {
            let mut cols = Vec::new();
            let mut partial = Vec::new();
            let mut list = c.prepare("SELECT name, partial FROM pragma_index_list('tokens')")?;
            let idx: Vec<(String, bool)> = list
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            for (name, p) in idx {
                if p {
                    partial.push(name.clone());
                }
                let mut info = c.prepare("SELECT name FROM pragma_index_info(?1)")?;
                let names: Vec<String> = info
                    .query_map([&name], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                cols.extend(names);
            }
            let mut plans = Vec::new();
            for sql in [
                "UPDATE tokens SET consumed_at = 1 WHERE vault = 'v' AND tool = 't'
                   AND caller = 'c' AND args_hash = 'a' AND consumed_at IS NULL",
                "SELECT 1 FROM tokens t WHERE t.vault = 'v' AND t.caller = 'c'
                   AND t.args_hash = 'a' AND t.state_fp = 'f' AND t.created_at >= 0",
            ] {
                let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let detail: Vec<String> =
                    st.query_map([], |r| r.get(3))?.collect::<Result<_, _>>()?;
                plans.push(detail.join("; "));
            }
            Ok((cols, partial, plans))
        })
        .unwrap();
    for col in [
        "consumed_at",
        "redemption_id",
        "redeemed",
        "released_at",
        "final_at",
    ] {
        assert!(
            !indexed.iter().any(|c| c == col),
            "{col} is indexed: {indexed:?}"
        );
    }
    assert!(partial.is_empty(), "partial indexes on tokens: {partial:?}");
    for plan in plans {
        assert!(plan.contains("USING INDEX tokens_args"), "{plan}");
    }
}

/// A release hands back the token with its original expiry, once per redemption; a
/// forged id naming the token's row with the current sequence number is unknown.
#[test]
fn release_once_per_redemption_and_forged_ids_are_unknown() {
    let (_dir, l) = ledger();
    let b = call_of(b"args");
    let fp = tc_core::hash::sha256_hex(b"fp");
    l.raise(&b, &fp, "s").unwrap();
    let (token, exp, _) = l.mint(&b, None, &Default::default()).unwrap();
    let r1 = l.redeem(&token, &b, &fp).unwrap();
    let forged = format!("{}forged", &r1[..r1.rfind('.').unwrap() + 1]);
    assert_eq!(reason(l.release(&forged, "x")), Reason::Unknown);
    l.release(&r1, "x").unwrap();
    assert_eq!(reason(l.release(&r1, "x")), Reason::Spent);
    let r2 = l.redeem(&token, &b, &fp).unwrap();
    assert_ne!(r1, r2);
    assert_eq!(reason(l.release(&r1, "x")), Reason::Spent);
    assert_eq!(reason(l.redeem(&token, &b, &fp)), Reason::Spent);
    l.release(&r2, "x").unwrap();
    let after: i64 = l.store.scalar("SELECT expires_at FROM tokens").unwrap();
    assert_eq!(after, exp);
    // A drift spends the token and leaves the released redemption released.
    let other = tc_core::hash::sha256_hex(b"other");
    assert_eq!(reason(l.redeem(&token, &b, &other)), Reason::ReplayDrift);
    assert_eq!(reason(l.release(&r2, "x")), Reason::Spent);
    assert_eq!(reason(l.redeem(&token, &b, &fp)), Reason::Spent);
}
