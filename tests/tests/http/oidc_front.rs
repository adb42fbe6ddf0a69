//! End to end, OIDC callers on the HTTP front: the real npm `oauth2-mock-server` 8.2.3 as
//! the issuer (discovery, JWKS, tokens from its token endpoint), a real `tc-shim serve
//! --http` with `[vaults.http.auth] mode = "oidc"` in front of real server-filesystem,
//! real tcd and tcctl. alice's approval is hers: bob's retry with it is refused and
//! writes nothing. Bad tokens are refused at the front door: expired, other audience,
//! other issuer, unknown key → 401 `invalid_token`; in the query → 400; a missing
//! required scope → 403 `insufficient_scope`.

use tc_tests::shim as support;

use tc_tests::http;

use tc_tests::issuer;

use http::*;
use issuer::{Issuer, AUD};
use serde_json::json;
use support::*;

/// The scope the vault requires of every token.
const SCOPE: &str = "mcp";

/// A vault with `write_file` gated, its callers from `iss` (OIDC), `mcp` scope required.
fn env(iss: &Issuer) -> Env {
    let mut env = Env::with(&Vault::fs_write_gated().raw(&format!(
        "\n[vaults.http.auth]\nmode = \"oidc\"\nissuer = \"{}\"\naudience = \"{AUD}\"\nscopes = [\"{SCOPE}\"]\n",
        iss.url
    )));
    env.start_tcd();
    env
}

/// A token from the issuer for `sub` with the required scope (plus `extra` form fields).
fn token(iss: &Issuer, sub: &str, extra: &[(&str, &str)]) -> String {
    let mut form = vec![("scope", "mcp mcp:tools")];
    form.extend_from_slice(extra);
    iss.token_blocking(&iss.url, sub, &form)
}

#[test]
fn alices_oidc_approval_is_hers_and_bob_cannot_spend_it() {
    let Some(iss) = Issuer::start() else { return };
    let env = env(&iss);
    let front = Front::start(&env, "fs");
    let (alice, alice_bearer) = bearer_session(&front, &token(&iss, "alice", &[]));

    let args = json!({"path": "note.txt", "content": "alice's"});
    let r = bearer_call(&alice, &alice_bearer, 1, "write_file", args.clone());
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(sc(&r)["details"]["caller"], "alice", "{r}");
    let command = sc(&r)["recovery"]["command"].as_str().unwrap();
    assert!(command.contains("--caller alice"), "{command}");
    assert_eq!(
        disk(&env, "note.txt"),
        None,
        "the gated call ran unapproved"
    );
    let approval = tcctl_elicit(&env, &r);

    // bob, a valid caller of the same issuer, with alice's approval in his own session.
    let (bob, bob_bearer) = bearer_session(&front, &token(&iss, "bob", &[]));
    only_alice_redeems(
        &env,
        (&alice, &alice_bearer),
        (&bob, &bob_bearer),
        &args,
        &approval,
        2,
    );
}

#[test]
fn the_front_door_refuses_bad_oidc_tokens() {
    let Some(iss) = Issuer::start() else { return };
    let env = env(&iss);
    let front = Front::start(&env, "fs");
    let c = Raw::new(&front.url());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let post = |t: &str| c.post(&init, &[("authorization", &format!("Bearer {t}"))]);
    let challenge = |a: &Answer| -> String {
        a.headers
            .get("www-authenticate")
            .unwrap_or_else(|| panic!("no challenge: {} {}", a.status, a.text))
            .to_str()
            .unwrap()
            .to_string()
    };

    // The control: the same request with a good token is served.
    let good = token(&iss, "alice", &[]);
    let a = post(&good);
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(a.headers.contains_key("mcp-session-id"));

    let rogue = iss.token_blocking(&iss.rogue, "alice", &[("scope", "mcp")]);
    for (what, bad) in [
        ("expired", token(&iss, "alice", &[("exp_in", "-120")])),
        (
            "other audience",
            token(&iss, "alice", &[("resource", "tc-other")]),
        ),
        (
            "other issuer",
            token(&iss, "alice", &[("iss", "https://evil.example")]),
        ),
        // Claims the issuer, signed with a key it never published.
        ("unknown kid", rogue),
    ] {
        let a = post(&bad);
        assert_eq!(a.status, 401, "{what}: {}", a.text);
        let ch = challenge(&a);
        assert!(ch.starts_with("Bearer "), "{what}: {ch}");
        assert!(ch.contains("invalid_token"), "{what}: {ch}");
        assert!(ch.contains("resource_metadata="), "{what}: {ch}");
        assert!(!a.headers.contains_key("mcp-session-id"), "{what}");
    }

    // A good token in the query string: refused, as is the same in both places.
    let q = Raw::new(&format!("{}?access_token={good}", front.url()));
    let a = q.post(&init, &[]);
    assert_eq!(a.status, 400, "{}", a.text);
    let a = q.post(&init, &[("authorization", &format!("Bearer {good}"))]);
    assert_eq!(a.status, 400, "{}", a.text);

    // Signed right, for the right audience, without the required scope.
    let narrow = iss.token_blocking(&iss.url, "alice", &[("scope", "mcp:tools")]);
    let a = post(&narrow);
    assert_eq!(a.status, 403, "{}", a.text);
    let ch = challenge(&a);
    assert!(ch.contains("insufficient_scope"), "{ch}");
    assert!(ch.contains(&format!("scope=\"{SCOPE}\"")), "{ch}");
    // No token leaks into the front's log.
    let log = front.stderr();
    for t in [&good, &narrow] {
        assert!(!log.contains(t.as_str()), "a token in the log: {log}");
    }
}
