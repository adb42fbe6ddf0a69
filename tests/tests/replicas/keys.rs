//! The key replicas share: a replica keyed differently refuses to start and says so (no
//! hash of either key); `tcctl rotate-secret` is refused with what to do instead;
//! `tcctl status` names the store.

use tc_tests::postgres::key_file;

use super::Replicas;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_another_key_refuses_to_start() {
    let Some(r) = Replicas::start(1) else { return };
    let other = key_file(r.dir.path(), "other.key");
    let mut d = r.prepared_keyed(&other);
    let (st, err) = d.start_refused();
    assert!(!st.success(), "started with another key:\n{err}");
    assert!(
        err.contains("secret_file is not the key the ledger"),
        "the refusal names the mismatch:\n{err}"
    );
    let check = r
        .cluster
        .query("SELECT value FROM tc_meta WHERE name = 'key_check'");
    assert_eq!(check.len(), 64, "{check}");
    assert!(
        !err.contains(&check),
        "the key check is not printed:\n{err}"
    );
    // The first replica still serves, and a replica with the right key still starts.
    let mut ok = r.prepared();
    ok.start_again();
    assert!(ok.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_secret_is_refused_with_what_to_do_and_status_names_the_store() {
    let Some(r) = Replicas::start(1) else { return };
    let d = &r.daemons[0];
    let out = d.tcctl(&["rotate-secret"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("secret_file") && text.contains("stop every replica"),
        "{text}"
    );
    let out = d.tcctl(&["status"]);
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{status}");
    let want = format!(
        "postgresql 127.0.0.1:{}/tc, schema {}",
        r.cluster.port,
        tc_tests::postgres::SCHEMA_VERSION
    );
    assert!(status.contains(&want), "{status}");
    assert!(status.contains("1 replica(s) seen"), "{status}");
}
