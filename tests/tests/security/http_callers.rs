//! Issue 29 item 4, the HTTP front with jwt callers, attacked end to end: the real
//! `tc-shim serve --http`, real tcd/tcctl, real server-filesystem. Tokens are made here
//! (RSA keys and RS256 signatures by the `openssl` command line; HMACs with the `hmac`
//! crate), so each attack is exactly the bytes an attacker would send.
//!
//! Already covered elsewhere (not repeated): bob with alice's session id on POST (404),
//! her `elicit_token`, her `requestState`, her paging cursor (tests/tests/http/callers.rs); expired,
//! other-audience, other-issuer and unknown-key OIDC tokens at the front door
//! (tests/tests/http/oidc_front.rs); alg `none`, HS256 keyed with the public key and another curve
//! against the verifier (auth/src/tests.rs); tcd's header pinning (daemon/src/bearer.rs).
//!
//! Added here, each held (no fix was needed):
//! - static `public_keys`: HS256 keyed with the PEM (alg confusion), `alg: none` in
//!   every spelling, a key embedded in the header (`jwk`, `jku`, `x5u`), wrong, missing
//!   and array-without-ours `aud`, expired, missing `exp`, `sub` swapped under alice's
//!   signature, a reserved `sub` (`stdio`), all 401 at the front; the good token is 200;
//! - tcd-minted tokens: alg `none`, HS512 and a token signed with another secret are 401;
//! - approve by request: alice's request approved by the human does not run bob's
//!   identical call (his is a request of his own), and bob raising it does not take
//!   alice's approval: her retry still runs it, once;
//! - bob's DELETE and GET with alice's session id are 404 and her session lives on.

use tc_tests::shim as support;

use tc_tests::http;

use std::path::Path;
use std::process::Command;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use http::*;
use serde_json::{json, Value};
use sha2::Sha256;
use support::*;

const ISS: &str = "https://id.example.test";
const AUD: &str = "tc-sec";

fn openssl(args: &[&str]) -> Vec<u8> {
    setup_output(Command::new("openssl").args(args))
}

/// An RSA key pair in `dir`: (private PEM path, public PEM path).
fn rsa(dir: &Path, name: &str) -> (String, String) {
    let private = dir.join(format!("{name}.key")).display().to_string();
    let public = dir.join(format!("{name}.pub.pem")).display().to_string();
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        &private,
    ]);
    openssl(&["pkey", "-in", &private, "-pubout", "-out", &public]);
    (private, public)
}

fn now() -> i64 {
    tc_core::now_ms() / 1000
}

fn claims(sub: &str) -> Value {
    json!({"iss": ISS, "aud": AUD, "sub": sub, "iat": now(), "exp": now() + 600})
}

fn signing_input(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims.to_string())
    )
}

/// RS256 over the header and claims with the private key at `key`.
fn rs256(dir: &Path, key: &str, header: &Value, claims: &Value) -> String {
    let input = signing_input(header, claims);
    let file = dir.join("input");
    std::fs::write(&file, &input).unwrap();
    let sig = openssl(&["dgst", "-sha256", "-sign", key, &file.display().to_string()]);
    format!("{input}.{}", B64.encode(sig))
}

/// HS256 over the header and claims keyed with `secret`.
fn hs256(secret: &[u8], header: &Value, claims: &Value) -> String {
    let input = signing_input(header, claims);
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap();
    m.update(input.as_bytes());
    format!("{input}.{}", B64.encode(m.finalize().into_bytes()))
}

fn init_status(front: &Front, token: &str) -> (u16, String) {
    let c = Raw::new(&front.url());
    let a = c.post(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        &[("authorization", &format!("Bearer {token}"))],
    );
    let challenge = a
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (a.status, challenge)
}

#[test]
fn static_public_keys_refuse_every_forged_token_at_the_front() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (key, public) = rsa(dir, "issuer");
    let (rogue, _) = rsa(dir, "rogue");
    let mut env = Env::new(&format!(
        r#"[[vaults]]
id = "fs"
root = "$ROOT"
command = ["node", "{}", "$ROOT"]

[vaults.http.auth]
mode = "jwt"
issuer = "{ISS}"
audience = "{AUD}"
public_keys = ["{public}"]
"#,
        filesystem_server().display()
    ));
    env.start_tcd();
    let front = Front::start(&env, "fs");
    let rs = json!({"alg": "RS256", "typ": "JWT"});

    // The control: a token the issuer signed is served.
    let good = rs256(dir, &key, &rs, &claims("alice"));
    assert_eq!(init_status(&front, &good).0, 200, "{}", front.stderr());

    let pem = std::fs::read(&public).unwrap();
    let der = openssl(&["pkey", "-pubin", "-in", &public, "-outform", "DER"]);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims("alice");
        f(&mut c);
        c
    };
    // alice's claims lacking `claim`.
    let without = |claim: &str| {
        let mut c = claims("alice");
        c.as_object_mut().unwrap().remove(claim);
        c
    };
    let mut swapped: Vec<String> = good.split('.').map(String::from).collect();
    swapped[1] = B64.encode(claims("bob").to_string());
    let none = |alg: &str| {
        format!(
            "{}.{}.",
            B64.encode(json!({"alg": alg, "typ": "JWT"}).to_string()),
            B64.encode(claims("alice").to_string())
        )
    };
    let rogue_jwk = json!({"alg": "RS256", "jwk": {"kty": "RSA", "n": "AQAB", "e": "AQAB"}});
    let attacks: Vec<(&str, String)> = vec![
        (
            "HS256 keyed with the public PEM",
            hs256(
                &pem,
                &json!({"alg": "HS256", "typ": "JWT"}),
                &claims("alice"),
            ),
        ),
        (
            "HS256 keyed with the public DER",
            hs256(
                &der,
                &json!({"alg": "HS256", "typ": "JWT"}),
                &claims("alice"),
            ),
        ),
        ("alg none", none("none")),
        ("alg None", none("None")),
        ("alg NONE", none("NONE")),
        (
            "alg none with alice's signature kept",
            format!(
                "{}.{}.{}",
                B64.encode(json!({"alg": "none"}).to_string()),
                B64.encode(claims("alice").to_string()),
                good.rsplit('.').next().unwrap()
            ),
        ),
        (
            "the attacker's key embedded as jwk",
            rs256(dir, &rogue, &rogue_jwk, &claims("alice")),
        ),
        (
            "jku pointing at the attacker",
            rs256(
                dir,
                &rogue,
                &json!({"alg": "RS256", "jku": "https://evil.example/jwks"}),
                &claims("alice"),
            ),
        ),
        (
            "x5u pointing at the attacker",
            rs256(
                dir,
                &rogue,
                &json!({"alg": "RS256", "x5u": "https://evil.example/cert"}),
                &claims("alice"),
            ),
        ),
        (
            "wrong aud",
            rs256(dir, &key, &rs, &with(&|c| c["aud"] = json!("tc-other"))),
        ),
        (
            "aud array without ours",
            rs256(
                dir,
                &key,
                &rs,
                &with(&|c| c["aud"] = json!(["tc-other", "tc-sec2"])),
            ),
        ),
        ("missing aud", rs256(dir, &key, &rs, &without("aud"))),
        (
            "expired",
            rs256(dir, &key, &rs, &with(&|c| c["exp"] = json!(now() - 300))),
        ),
        ("missing exp", rs256(dir, &key, &rs, &without("exp"))),
        ("sub swapped under alice's signature", swapped.join(".")),
        ("a reserved sub", rs256(dir, &key, &rs, &claims("stdio"))),
        (
            "another issuer",
            rs256(
                dir,
                &key,
                &rs,
                &with(&|c| c["iss"] = json!("https://evil.example")),
            ),
        ),
    ];
    for (what, token) in &attacks {
        let (status, challenge) = init_status(&front, token);
        assert_eq!(status, 401, "{what} was served");
        assert!(challenge.contains("invalid_token"), "{what}: {challenge}");
    }
}

fn fs_env() -> Env {
    let mut env = Env::with(&Vault::fs_write_gated().raw(&format!(
        "\n[vaults.http.auth]\nmode = \"jwt\"\naudience = \"{AUD}\"\n"
    )));
    env.start_tcd();
    env
}

#[test]
fn tcd_minted_tokens_refuse_other_algs_and_other_secrets() {
    let env = fs_env();
    let front = Front::start(&env, "fs");
    let alice = mint_bearer(&env, "alice");
    assert_eq!(init_status(&front, &alice).0, 200, "{}", front.stderr());
    let payload = alice.split('.').nth(1).unwrap().to_string();
    let body: Value = serde_json::from_slice(&B64.decode(&payload).unwrap()).unwrap();
    let mut bob = body.clone();
    bob["sub"] = json!("bob");
    let hs512 = {
        let input = format!(
            "{}.{payload}",
            B64.encode(json!({"alg": "HS512", "typ": "JWT"}).to_string())
        );
        let mut m = <Hmac<sha2::Sha512> as Mac>::new_from_slice(b"guess").unwrap();
        m.update(input.as_bytes());
        format!("{input}.{}", B64.encode(m.finalize().into_bytes()))
    };
    let hs = json!({"alg": "HS256", "typ": "JWT"});
    for (what, token) in [
        (
            "alg none",
            format!("{}.{payload}.", B64.encode(r#"{"alg":"none","typ":"JWT"}"#)),
        ),
        ("HS512", hs512),
        ("another secret", hs256(b"not tcd's key", &hs, &body)),
        ("an empty secret", hs256(b"", &hs, &body)),
        (
            "bob's claims under alice's signature",
            format!(
                "{}.{}.{}",
                alice.split('.').next().unwrap(),
                B64.encode(bob.to_string()),
                alice.rsplit('.').next().unwrap()
            ),
        ),
    ] {
        let (status, challenge) = init_status(&front, &token);
        assert_eq!(status, 401, "{what} was served");
        assert!(challenge.contains("invalid_token"), "{what}: {challenge}");
    }
}

#[test]
fn an_approval_by_request_is_the_raising_callers_only() {
    let env = fs_env();
    let front = Front::start(&env, "fs");
    let (alice, alice_bearer) = bearer_session(&front, &mint_bearer(&env, "alice"));
    let (bob, bob_bearer) = bearer_session(&front, &mint_bearer(&env, "bob"));
    let args = json!({"path": "note.txt", "content": "alice's"});

    let r = bearer_call(&alice, &alice_bearer, 1, "write_file", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    let alices = request_id(&r);
    tcctl_approve(&env, &alices);

    // bob's identical call: not run under alice's approval; a request of his own.
    let r = bearer_call(&bob, &bob_bearer, 2, "write_file", args.clone());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    assert_eq!(sc(&r)["details"]["caller"], "bob", "{r}");
    let bobs = sc(&r)["details"]["request_id"].as_str().unwrap();
    assert_ne!(bobs, alices, "bob's raise took alice's request");
    assert_eq!(disk(&env, "note.txt"), None, "bob ran alice's approval");

    // Alice's approval is still hers: her retry runs it, once.
    let r = bearer_call(&alice, &alice_bearer, 3, "write_file", args.clone());
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(disk(&env, "note.txt").as_deref(), Some("alice's"));
    std::fs::remove_file(env.root.join("note.txt")).unwrap();
    let r = bearer_call(&alice, &alice_bearer, 4, "write_file", args);
    assert_eq!(
        code(&r).as_deref(),
        Some("elicit_required"),
        "ran twice: {r}"
    );
    assert_eq!(disk(&env, "note.txt"), None);
}

#[test]
fn another_callers_session_id_cannot_end_or_listen_to_a_session() {
    let env = fs_env();
    let front = Front::start(&env, "fs");
    let (alice, alice_bearer) = bearer_session(&front, &mint_bearer(&env, "alice"));
    let bob_bearer = format!("Bearer {}", mint_bearer(&env, "bob"));
    let h = |b: reqwest::RequestBuilder, bearer: &str| {
        b.header("authorization", bearer)
            .header("mcp-protocol-version", "2025-11-25")
    };
    let a = alice.send(h(alice.request(reqwest::Method::DELETE), &bob_bearer));
    assert_eq!(a.status, 404, "bob ended alice's session: {}", a.text);
    let a = alice.send(
        h(alice.request(reqwest::Method::GET), &bob_bearer).header("accept", "text/event-stream"),
    );
    assert_eq!(a.status, 404, "bob listened on alice's session: {}", a.text);
    // Her session is still hers.
    let r = bearer_call(
        &alice,
        &alice_bearer,
        1,
        "list_allowed_directories",
        json!({}),
    );
    assert_ne!(r["isError"], true, "{r}");
}
