//! End to end, pushes (issue 32 item 1): a webhook and an ntfy-shaped receiver (axum on
//! 127.0.0.1, inside the test) told by a real tcd of requests a Python `mcp` client
//! raises through a real tc-shim in front of server-filesystem.

use tc_tests::elicit;
use tc_tests::shim as support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use elicit::*;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use support::*;
use tc_tests::receiver::{Hit, Receiver};

/// An argument value no push may carry.
const CANARY: &str = "push-canary-7f3a9c-do-not-send";
const SECRET: &str = "whsec-test-3e1d9b0c55aa41f2";
const TOKEN: &str = "tk_pushtesttoken0123456789";

/// A private file (0600) holding `text`, in the env's directory.
fn private_file(env: &Env, name: &str, text: &str, mode: u32) -> PathBuf {
    let p = env.tmp.path().join(name);
    std::fs::write(&p, format!("{text}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// Appends `text` to the env's config file.
fn append(config: &Path, text: &str) {
    let old = std::fs::read_to_string(config).unwrap();
    std::fs::write(config, format!("{old}\n{text}")).unwrap();
}

/// `[notify]` with fast retries and the given targets.
fn notify(attempts: u32, targets: &str) -> String {
    format!("[notify]\nattempts = {attempts}\nbackoff_ms = 20\nbackoff_max_ms = 100\n\n{targets}")
}

fn webhook(name: &str, port: u16, secret: &Path) -> String {
    format!(
        "[[notify.webhook]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{port}/tc\"\nsecret_file = {:?}\n\n",
        secret.display().to_string()
    )
}

/// Raises `write_file(path, CANARY)`; returns the refusal's details (id, hash, state).
fn raise(h: &mut Human, path: &str) -> Value {
    let args = json!({"path": path, "content": CANARY});
    let r = h.call("write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    sc(&r)["details"].clone()
}

/// The receiver's check: the timestamp is fresh and the MAC over `<timestamp>.<body>`
/// under the shared secret is the header's (compared in constant time).
#[track_caller]
fn check_signature(hit: &Hit) {
    let ts = hit.header("x-tc-timestamp");
    let secs: u64 = ts.parse().unwrap_or_else(|_| panic!("timestamp {ts:?}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(secs) <= 300, "stale: {secs} at {now}");
    let sig = hit.header("x-tc-signature");
    let hex_mac = sig
        .strip_prefix("sha256=")
        .unwrap_or_else(|| panic!("{sig}"));
    let mut mac = <Hmac<Sha256>>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{ts}.").as_bytes());
    mac.update(&hit.body);
    mac.verify_slice(&hex::decode(hex_mac).unwrap())
        .expect("the signature verifies under the shared secret");
    // The same MAC under another secret, or over another body, does not.
    let mut other = <Hmac<Sha256>>::new_from_slice(b"another secret").unwrap();
    other.update(format!("{ts}.").as_bytes());
    other.update(&hit.body);
    assert!(other.verify_slice(&hex::decode(hex_mac).unwrap()).is_err());
}

/// Nothing of the call beyond its names: no argument, hash, state, secret or token.
#[track_caller]
fn check_reveals_nothing(hit: &Hit, d: &Value) {
    let body = String::from_utf8_lossy(&hit.body);
    for k in ["args_hash", "state_fp"] {
        let v = d[k].as_str().unwrap();
        assert!(v.len() >= 16, "{k} in {d}");
        assert!(!body.contains(v), "{k}: {body}");
    }
    for s in [CANARY, SECRET, TOKEN, ".txt"] {
        assert!(!body.contains(s), "{s:?} in {body}");
    }
}

#[test]
fn pushes_are_signed_name_the_request_and_retries_stop_once_delivered() {
    let mut env = fs_vault("", None);
    let page = tc_tests::page::listen_on_free_port(&env.config);
    let hook = Receiver::start(2, 503);
    let ntfy = Receiver::start(0, 200);
    let secret = private_file(&env, "hook.key", SECRET, 0o600);
    let token = private_file(&env, "ntfy.token", TOKEN, 0o600);
    let ntfy_toml = format!(
        "[[notify.ntfy]]\nname = \"phone\"\nurl = \"http://127.0.0.1:{}\"\ntopic = \"tc-test\"\n\
         token_file = {:?}\npriority = 4\n",
        ntfy.port,
        token.display().to_string()
    );
    append(
        &env.config,
        &notify(5, &(webhook("hook", hook.port, &secret) + &ntfy_toml)),
    );
    env.start_tcd();
    let mut h = Human::python("legacy", &env.shim_argv("fs"));

    let d1 = raise(&mut h, "one.txt");
    let id1 = d1["request_id"].as_str().unwrap().to_string();
    // Two 503s, then delivered: three attempts of one push, each signed afresh.
    let tries: Vec<Hit> = (0..3).map(|_| hook.next()).collect();
    assert_eq!(
        tries.iter().map(|t| t.answered).collect::<Vec<_>>(),
        [503, 503, 200]
    );
    let link1 = format!("http://localhost:{page}/requests/{id1}");
    for t in &tries {
        assert_eq!(t.path, "/tc");
        assert_eq!(t.header("content-type"), "application/json");
        check_signature(t);
        check_reveals_nothing(t, &d1);
        assert_eq!(t.header("x-tc-delivery"), tries[0].header("x-tc-delivery"));
        let b = t.json();
        assert_eq!(
            b["delivery"].as_str(),
            Some(t.header("x-tc-delivery")),
            "{b}"
        );
        assert_eq!(b["event"], "tc.request.raised", "{b}");
        assert_eq!(
            (b["request_id"].as_str(), b["url"].as_str()),
            (Some(&*id1), Some(&*link1))
        );
        assert_eq!(
            (b["tool"].as_str(), b["vault"].as_str()),
            (Some("write_file"), Some("fs"))
        );
        assert!(b["caller"].as_str().is_some_and(|c| !c.is_empty()), "{b}");
    }

    // The agent's identical retry keeps the id: not news, no push. The next push is the
    // next request's, and the first one's retries ended with its success (one sender per
    // target, one push at a time, in order).
    let again = raise(&mut h, "one.txt");
    assert_eq!(again["request_id"].as_str(), Some(&*id1));
    let d2 = raise(&mut h, "two.txt");
    let id2 = d2["request_id"].as_str().unwrap().to_string();
    assert_ne!(id1, id2);
    let t = hook.next();
    assert_eq!(
        (t.json()["request_id"].as_str(), t.answered),
        (Some(&*id2), 200)
    );
    assert_ne!(t.header("x-tc-delivery"), tries[0].header("x-tc-delivery"));
    check_signature(&t);
    check_reveals_nothing(&t, &d2);
    assert_eq!(
        hook.count(),
        4,
        "three attempts for the first, one for the second"
    );

    // ntfy: the JSON publish API, the token as a Bearer header, one `view` action.
    for (d, id) in [(&d1, &id1), (&d2, &id2)] {
        let n = ntfy.next();
        assert_eq!(n.path, "/");
        assert_eq!(n.header("authorization"), format!("Bearer {TOKEN}"));
        check_reveals_nothing(&n, d);
        let m = n.json();
        let link = format!("http://localhost:{page}/requests/{id}");
        assert_eq!(m["topic"], "tc-test", "{m}");
        assert_eq!(m["priority"], 4, "{m}");
        let title = m["title"].as_str().unwrap();
        assert!(title.contains("write_file") && title.contains("fs"), "{m}");
        assert!(m["message"].as_str().unwrap().contains(id.as_str()), "{m}");
        assert_eq!(m["click"].as_str(), Some(link.as_str()));
        let actions = m["actions"].as_array().expect("actions");
        assert_eq!(actions.len(), 1, "only the page link: {m}");
        assert_eq!(actions[0]["action"], "view", "never an http action: {m}");
        assert_eq!(actions[0]["url"].as_str(), Some(link.as_str()));
    }

    // The push approved nothing; the retries are in the counters.
    assert_eq!(events_of(&env, "tc.elicit.approved"), 0);
    assert_eq!(disk(&env, "one.txt"), None);
    let m = env.tcd.tcctl(&["metrics"]);
    let text = String::from_utf8_lossy(&m.stdout);
    assert!(
        text.contains("tc_push_retries_total{target=\"hook\"} 2"),
        "{text}"
    );
    assert!(
        !text.contains("tc_push_retries_total{target=\"phone\"}"),
        "{text}"
    );
}

#[test]
fn a_push_given_up_is_an_event_naming_its_target_and_nothing_secret() {
    let mut env = fs_vault("", None);
    tc_tests::page::listen_on_free_port(&env.config);
    let down = Receiver::start(usize::MAX, 500);
    let deny = Receiver::start(usize::MAX, 401);
    let secret = private_file(&env, "hook.key", SECRET, 0o600);
    let targets = webhook("down", down.port, &secret) + &webhook("deny", deny.port, &secret);
    append(&env.config, &notify(3, &targets));
    env.start_tcd();
    let mut h = Human::python("legacy", &env.shim_argv("fs"));
    let d = raise(&mut h, "one.txt");
    let id = d["request_id"].as_str().unwrap();

    let evs = wait_events(&env.socket, "tc.push.failed", 2);
    assert_eq!(evs.len(), 2, "{evs:?}");
    let mut by_target = BTreeMap::new();
    for e in &evs {
        assert!(
            !e.detail_json.contains(SECRET) && !e.detail_json.contains(CANARY),
            "{e:?}"
        );
        assert!(
            !e.detail_json.contains("127.0.0.1"),
            "no URL in the log: {e:?}"
        );
        let v: Value = serde_json::from_str(&e.detail_json).unwrap();
        assert_eq!(v["request_id"].as_str(), Some(id), "{v}");
        assert_eq!((e.tool.as_str(), e.vault.as_str()), ("write_file", "fs"));
        by_target.insert(v["target"].as_str().unwrap().to_string(), v);
    }
    // A 5xx is retried to the last attempt; a 401 would only be refused again.
    assert_eq!(by_target["down"]["attempts"], 3, "{by_target:?}");
    assert_eq!(by_target["down"]["why"], "answered 500");
    assert_eq!(by_target["deny"]["attempts"], 1, "{by_target:?}");
    assert_eq!(by_target["deny"]["why"], "answered 401");
    // The event is written after the last attempt: no more came.
    assert_eq!((down.count(), deny.count()), (3, 1));
    let m = env.tcd.tcctl(&["metrics"]);
    let text = String::from_utf8_lossy(&m.stdout);
    for line in [
        "tc_push_failed_total{target=\"deny\"} 1",
        "tc_push_failed_total{target=\"down\"} 1",
        "tc_push_retries_total{target=\"down\"} 2",
        "tc_events_total{kind=\"tc.push.failed\"} 2",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
}

#[test]
fn tcd_refuses_a_secret_file_others_can_read_without_showing_it() {
    let mut env = fs_vault("", None);
    tc_tests::page::listen_on_free_port(&env.config);
    let secret = private_file(&env, "hook.key", SECRET, 0o644);
    append(&env.config, &notify(3, &webhook("hook", 9, &secret)));
    let (st, err) = env.tcd.start_refused();
    assert!(!st.success(), "{err}");
    assert!(
        err.contains("notify.webhook \"hook\" secret_file") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");
}
