//! Unit tests of the factor's rules, each on a real store with an injected clock (the
//! `now_ms` every function takes).

use super::*;
use crate::store::Store;

const UID: u32 = 1000;
/// An instant in the middle of a time step, so T−1 and T+1 are whole steps away.
const NOW: i64 = 1_700_000_015_000;

struct Fx {
    _dir: tempfile::TempDir,
    store: Store,
    secret: Vec<u8>,
}

fn reason<T: std::fmt::Debug>(r: Result<T, DaemonError>) -> Reason {
    match r {
        Err(DaemonError::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

impl Fx {
    /// A store with `UID` enrolled and confirmed (with the code of step T−2 at `NOW`, so
    /// steps T−1 and T are still unused).
    fn new() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::for_test(dir.path());
        let (uri, b32) = store
            .write(|tx, evs| Ok(Ok(enroll(tx, evs, UID, "alice", NOW - 60_000)?)))
            .unwrap();
        assert!(uri.starts_with("otpauth://totp/tc:alice?secret="), "{uri}");
        assert!(uri.contains(&b32));
        let secret = store
            .read(|tx| Ok(tx.load_factor(UID, false)?.unwrap().secret))
            .unwrap();
        assert_eq!(secret.len(), 20);
        assert_eq!(totp::base32(&secret), b32);
        let fx = Fx {
            _dir: dir,
            store,
            secret,
        };
        // Before confirmation no approval passes, even with the right code.
        assert_eq!(
            reason(fx.check(Some(&fx.code(NOW - 60_000)), NOW - 60_000)),
            Reason::NotEnrolled
        );
        fx.confirm(&fx.code(NOW - 60_000), NOW - 60_000).unwrap();
        fx
    }

    fn code(&self, at_ms: i64) -> String {
        totp::code_at(&self.secret, totp::step_of(at_ms))
    }

    fn check(&self, code: Option<&str>, now: i64) -> Result<(), DaemonError> {
        self.store.write(|tx, evs| check(tx, evs, UID, code, now))
    }

    fn confirm(&self, code: &str, now: i64) -> Result<(), DaemonError> {
        self.store.write(|tx, evs| confirm(tx, evs, UID, code, now))
    }

    fn row(&self) -> Row {
        self.store
            .read(|tx| Ok(tx.load_factor(UID, false)?.unwrap()))
            .unwrap()
    }

    fn kinds(&self) -> Vec<String> {
        let evs = self.store.events_after(0, 1000).unwrap();
        evs.into_iter().map(|e| e.kind).collect()
    }

    fn count(&self, kind: &str) -> usize {
        self.kinds().iter().filter(|k| *k == kind).count()
    }

    /// A wrong code for `NOW`: the right one with its last digit changed.
    fn wrong(&self, now: i64) -> String {
        let mut c = self.code(now).into_bytes();
        c[5] = if c[5] == b'9' { b'0' } else { c[5] + 1 };
        String::from_utf8(c).unwrap()
    }
}

#[test]
fn t_minus_two_and_t_plus_one_are_refused_t_minus_one_and_t_accepted() {
    let fx = Fx::new();
    let step = totp::PERIOD_MS;
    assert_eq!(
        reason(fx.check(Some(&fx.code(NOW - 2 * step)), NOW)),
        Reason::FactorInvalid
    );
    // Past the delay the first failure set.
    let later = NOW + delay_ms(1);
    assert_eq!(
        reason(fx.check(Some(&fx.code(NOW + step)), later)),
        Reason::FactorInvalid
    );
    let later = later + delay_ms(2);
    fx.check(Some(&fx.code(NOW - step)), later).unwrap();
    fx.check(Some(&fx.code(NOW)), later).unwrap();
    assert_eq!(fx.row().last_step, totp::step_of(NOW));
    assert_eq!(fx.row().failures, 0, "success resets the count");
}

#[test]
fn a_used_step_is_refused_as_replayed_and_logged() {
    let fx = Fx::new();
    let code = fx.code(NOW);
    fx.check(Some(&code), NOW).unwrap();
    assert_eq!(fx.count(events::FACTOR_REPLAYED), 0);
    assert_eq!(
        reason(fx.check(Some(&code), NOW + 1)),
        Reason::FactorReplayed
    );
    assert_eq!(
        fx.count(events::FACTOR_REPLAYED),
        1,
        "committed with the refusal"
    );
    // Once step T is used, T−1 is older than it: no longer accepted either.
    assert_eq!(
        reason(fx.check(Some(&fx.code(NOW - totp::PERIOD_MS)), NOW + 1000)),
        Reason::FactorReplayed
    );
    // The same code in the next step (as T−1) is still the used step.
    let next = NOW + totp::PERIOD_MS + 5_000;
    assert_eq!(reason(fx.check(Some(&code), next)), Reason::FactorReplayed);
    // The next step's own code is fresh (once the delay of three refusals is over).
    let next = next + delay_ms(3);
    fx.check(Some(&fx.code(next)), next).unwrap();
}

#[test]
fn no_code_and_malformed_codes() {
    let fx = Fx::new();
    assert_eq!(reason(fx.check(None, NOW)), Reason::FactorRequired);
    assert_eq!(reason(fx.check(Some(""), NOW)), Reason::FactorRequired);
    assert_eq!(fx.row().failures, 0, "no code is no guess");
    assert_eq!(reason(fx.check(Some("12345x"), NOW)), Reason::FactorInvalid);
    assert_eq!(fx.row().failures, 1, "a malformed code is a wrong one");
    // Another uid has no factor at all.
    let other = fx
        .store
        .write(|tx, evs| check(tx, evs, UID + 1, Some(&fx.code(NOW)), NOW));
    assert_eq!(reason(other), Reason::NotEnrolled);
}

#[test]
fn a_try_inside_the_delay_is_not_evaluated() {
    let fx = Fx::new();
    assert_eq!(
        reason(fx.check(Some(&fx.wrong(NOW)), NOW)),
        Reason::FactorInvalid
    );
    let row = fx.row();
    assert_eq!((row.failures, row.next_try_at), (1, NOW + delay_ms(1)));
    // The right code inside the delay: refused, not consumed, not counted.
    let inside = NOW + delay_ms(1) - 1;
    assert_eq!(
        reason(fx.check(Some(&fx.code(NOW)), inside)),
        Reason::FactorDelay
    );
    assert_eq!(fx.row().failures, 1);
    assert_eq!(fx.row().last_step, row.last_step);
    assert_eq!(fx.count(events::FACTOR_FAILED), 1);
    fx.check(Some(&fx.code(NOW)), NOW + delay_ms(1)).unwrap();
}

#[test]
fn delays_grow_and_ten_in_a_row_take_well_under_thirty_seconds() {
    let delays: Vec<i64> = (1..LOCK_AFTER).map(delay_ms).collect();
    assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
    assert!(delays[1] > delays[0]);
    assert!(delays.iter().sum::<i64>() < 10_000, "{delays:?}");
    assert_eq!(delay_ms(u32::MAX), MAX_DELAY_MS);
}

#[test]
fn ten_wrong_in_a_row_lock_until_unlocked() {
    let fx = Fx::new();
    let mut now = NOW;
    for i in 1..LOCK_AFTER {
        assert_eq!(
            reason(fx.check(Some(&fx.wrong(now)), now)),
            Reason::FactorInvalid,
            "try {i}"
        );
        now += delay_ms(i);
    }
    assert_eq!(fx.count(events::FACTOR_LOCKED), 0);
    assert_eq!(
        reason(fx.check(Some(&fx.wrong(now)), now)),
        Reason::FactorLocked
    );
    assert_eq!(fx.count(events::FACTOR_FAILED), LOCK_AFTER as usize);
    assert_eq!(fx.count(events::FACTOR_LOCKED), 1);
    // Locked: the right code is refused, much later too, and not consumed.
    let much_later = now + 3_600_000;
    assert_eq!(
        reason(fx.check(Some(&fx.code(much_later)), much_later)),
        Reason::FactorLocked
    );
    assert_eq!(
        fx.count(events::FACTOR_FAILED),
        LOCK_AFTER as usize,
        "not counted"
    );
    fx.store.write(|tx, evs| Ok(unlock(tx, evs, UID))).unwrap();
    assert_eq!(fx.count(events::FACTOR_UNLOCKED), 1);
    let row = fx.row();
    assert_eq!((row.locked, row.failures, row.next_try_at), (false, 0, 0));
    fx.check(Some(&fx.code(much_later)), much_later).unwrap();
}

#[test]
fn success_resets_the_count_so_only_failures_in_a_row_lock() {
    let fx = Fx::new();
    let mut now = NOW;
    for i in 1..LOCK_AFTER {
        assert_eq!(
            reason(fx.check(Some(&fx.wrong(now)), now)),
            Reason::FactorInvalid
        );
        now += delay_ms(i);
    }
    fx.check(Some(&fx.code(now)), now).unwrap();
    now += totp::PERIOD_MS;
    assert_eq!(
        reason(fx.check(Some(&fx.wrong(now)), now)),
        Reason::FactorInvalid
    );
    assert_eq!(fx.row().failures, 1);
}

#[test]
fn reenrolling_replaces_the_secret_and_needs_a_new_confirmation() {
    let fx = Fx::new();
    let old = fx.code(NOW);
    fx.store
        .write(|tx, evs| Ok(Ok(enroll(tx, evs, UID, "alice", NOW)?)))
        .unwrap();
    let row = fx.row();
    assert_ne!(row.secret, fx.secret);
    assert!(!row.confirmed);
    assert_eq!(reason(fx.check(Some(&old), NOW)), Reason::NotEnrolled);
    assert_eq!(
        reason(fx.confirm(&old, NOW)),
        Reason::FactorInvalid,
        "the old secret's code does not confirm the new one"
    );
}

#[test]
fn events_hold_no_code_and_no_secret() {
    let fx = Fx::new();
    let code = fx.code(NOW);
    let wrong = fx.wrong(NOW);
    fx.check(Some(&wrong), NOW).unwrap_err();
    fx.check(Some(&code), NOW + 1000).unwrap();
    fx.check(Some(&code), NOW + 2000).unwrap_err();
    let b32 = totp::base32(&fx.secret);
    let evs = fx.store.events_after(0, 1000).unwrap();
    assert!(evs.len() >= 4, "{evs:?}");
    for e in evs {
        // Every text field (the numbers are ids and times).
        let all = [
            e.kind,
            e.vault,
            e.tool,
            e.caller,
            e.args_hash,
            e.state_fp,
            e.detail,
        ]
        .join(" ");
        for secret in [&code, &wrong, &b32, &hex::encode(&fx.secret)] {
            assert!(!all.contains(secret.as_str()), "{all}");
        }
    }
}

/// The ledger's side: in guarded mode Mint checks the factor inside its own write.
mod mint {
    use super::*;
    use crate::ledger::Ledger;
    use crate::record::Binding;
    use tc_core::config::Mode;

    fn ledger(mode: Mode) -> (tempfile::TempDir, Ledger, Vec<u8>, Binding) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::for_test(dir.path());
        let l = Ledger::new(store, crate::secret::Secret::ephemeral(), 300).with_mode(mode);
        let now = tc_core::now_ms();
        l.store
            .write(|tx, evs| Ok(Ok(enroll(tx, evs, UID, "alice", now)?)))
            .unwrap();
        let secret = l
            .store
            .read(|tx| Ok(tx.load_factor(UID, false)?.unwrap().secret))
            .unwrap();
        // Confirmed with a step long gone, so the current ones are fresh.
        let old = now - 10 * totp::PERIOD_MS;
        let code = totp::code_at(&secret, totp::step_of(old));
        l.store
            .write(|tx, evs| confirm(tx, evs, UID, &code, old))
            .unwrap();
        let b = Binding {
            vault: "v".into(),
            tool: "write".into(),
            caller: "stdio".into(),
            args_hash: "a".repeat(64),
        };
        l.raise(&b, &"b".repeat(64), "write a file").unwrap();
        (dir, l, secret, b)
    }

    fn tokens(l: &Ledger) -> i64 {
        l.store.scalar("SELECT count(*) FROM tokens").unwrap()
    }

    fn approver(code: Option<String>) -> Approver {
        Approver { uid: UID, code }
    }

    #[test]
    fn guarded_mint_needs_a_fresh_code_and_spends_its_step_with_the_token() {
        let (_d, l, secret, b) = ledger(Mode::Guarded);
        assert_eq!(
            reason(l.mint(&b, None, &approver(None))),
            Reason::FactorRequired
        );
        let now = tc_core::now_ms();
        let right = totp::code_at(&secret, totp::step_of(now));
        let wrong = format!("{:06}", (right.parse::<u32>().unwrap() + 1) % 1_000_000);
        assert_eq!(
            reason(l.mint(&b, None, &approver(Some(wrong)))),
            Reason::FactorInvalid
        );
        assert_eq!(tokens(&l), 0);
        let row = l
            .store
            .read(|tx| Ok(tx.load_factor(UID, false)?.unwrap()))
            .unwrap();
        assert_eq!(row.failures, 1, "the refused mint committed its failure");
        // Past the delay, the right code mints once and its step is spent with it.
        let row_wait = row.next_try_at - tc_core::now_ms();
        if row_wait > 0 {
            std::thread::sleep(std::time::Duration::from_millis(row_wait as u64 + 1));
        }
        l.mint(&b, None, &approver(Some(right.clone()))).unwrap();
        assert_eq!(tokens(&l), 1);
        let row = l
            .store
            .read(|tx| Ok(tx.load_factor(UID, false)?.unwrap()))
            .unwrap();
        assert!(row.last_step >= totp::step_of(now), "{row:?}");
        assert_eq!(
            reason(l.mint(&b, None, &approver(Some(right)))),
            Reason::FactorReplayed
        );
        assert_eq!(tokens(&l), 1);
    }

    #[test]
    fn a_refused_request_spends_no_step_and_counts_no_failure() {
        let (_d, l, secret, b) = ledger(Mode::Guarded);
        let code = totp::code_at(&secret, totp::step_of(tc_core::now_ms()));
        let unknown = Binding {
            args_hash: "c".repeat(64),
            ..b.clone()
        };
        assert_eq!(
            reason(l.mint(&unknown, None, &approver(Some(code.clone())))),
            Reason::NoRaisedRequest
        );
        l.mint(&b, None, &approver(Some(code))).unwrap();
    }

    #[test]
    fn personal_mode_mints_without_a_code() {
        let (_d, l, _, b) = ledger(Mode::Personal);
        l.mint(&b, None, &approver(None)).unwrap();
        assert_eq!(tokens(&l), 1);
    }
}

/// Two stores on one PostgreSQL ledger (two replicas' pools, in effect): a code accepted
/// through one is `factor_replayed` through the other, and wrong codes spread over both
/// add up to the lock. Only with `TC_TEST_POSTGRES_URL` (a SQLite file has one writer).
#[test]
fn replicas_share_the_factor_on_postgres() {
    if std::env::var("TC_TEST_POSTGRES_URL").map_or(true, |u| u.is_empty()) {
        return;
    }
    let fx = Fx::new();
    // The same temp dir names the same schema: a second pool on the same ledger.
    let other = Store::for_test(fx._dir.path());
    let on =
        |s: &Store, code: &str, now: i64| s.write(|tx, evs| check(tx, evs, UID, Some(code), now));
    let code = fx.code(NOW);
    on(&fx.store, &code, NOW).unwrap();
    assert_eq!(reason(on(&other, &code, NOW)), Reason::FactorReplayed);
    let wrong = if fx.code(NOW) == "000000" {
        "111111"
    } else {
        "000000"
    };
    let mut now = NOW;
    let mut last = Reason::FactorInvalid;
    for i in 0..LOCK_AFTER {
        now += MAX_DELAY_MS + 1;
        let s = if i % 2 == 0 { &other } else { &fx.store };
        last = reason(on(s, wrong, now));
    }
    // The replay counted too: the lock came at the ninth wrong code at the latest.
    assert_eq!(last, Reason::FactorLocked);
    assert!(fx.row().locked);
    assert_eq!(reason(on(&other, &fx.code(now), now)), Reason::FactorLocked);
}
