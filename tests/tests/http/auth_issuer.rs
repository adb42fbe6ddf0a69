//! HTTP callers against real token issuers, through tc-auth's `Verifier`:
//! - npm `oauth2-mock-server` 8.2.3 (a real OIDC issuer on Node): tokens for alice and bob
//!   from its token endpoint verify in `oidc` mode (discovery) and `jwt` + `jwks_url`
//!   mode; expired, wrong-audience, wrong-issuer, unknown-`kid` and query-string tokens
//!   are refused; a key the issuer adds later is found by a JWKS refresh, within the floor;
//! - the real `tcd` + `tcctl`: `tcctl token mint --sub alice` verifies through
//!   `VerifyToken` (cached by digest), and expired, foreign, other-audience and
//!   rotated-away tokens are refused.

use tc_tests::issuer;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::{HeaderMap, HeaderValue, StatusCode};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tc_auth::{AuthError, Setup, TcdRefusal, TcdTokens, Verified, Verifier};
use tc_core::config::HttpAuth;
use tc_proto::v1;
use tc_tests::*;

use issuer::{Issuer, AUD};

fn bearer(t: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        ::http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
    );
    h
}

async fn verifier(text: &str, tcd: Option<Arc<dyn TcdTokens>>) -> Verifier {
    let auth: HttpAuth = toml::from_str(text).unwrap();
    Verifier::new(Setup {
        auth: &auth,
        bind: "127.0.0.1:8080".parse().unwrap(),
        path: "/mcp",
        tcd,
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn refusal(v: &Verifier, token: &str) -> &'static str {
    match v.caller(&bearer(token), None).await {
        Err(AuthError::Invalid(why)) => why,
        other => panic!("expected invalid_token, got {other:?}"),
    }
}

/// What both key-fetching modes must do with the issuer's tokens.
async fn callers_and_refusals(iss: &Issuer, v: &Verifier) {
    for sub in ["alice", "bob"] {
        let t = iss.token(&iss.url, sub, &[]).await;
        let c = v.caller(&bearer(&t), None).await.unwrap();
        assert_eq!(
            (c.sub.as_str(), c.scopes.clone()),
            (sub, vec!["mcp:tools".to_string()])
        );
        let q = format!("x=1&access_token={t}");
        let e = v.caller(&HeaderMap::new(), Some(&q)).await.unwrap_err();
        assert_eq!(
            (e.clone(), e.status()),
            (AuthError::QueryToken, StatusCode::BAD_REQUEST)
        );
    }
    let expired = iss.token(&iss.url, "alice", &[("exp_in", "-120")]).await;
    assert_eq!(refusal(v, &expired).await, "expired");
    let other_aud = iss
        .token(&iss.url, "alice", &[("resource", "tc-other")])
        .await;
    assert_eq!(refusal(v, &other_aud).await, "wrong audience");
    let other_iss = iss
        .token(&iss.url, "alice", &[("iss", "https://evil.example")])
        .await;
    assert_eq!(refusal(v, &other_iss).await, "wrong issuer");
    // Right issuer, audience and sub, signed by a key the issuer never published.
    let rogue = iss.token(&iss.rogue, "alice", &[]).await;
    assert_eq!(refusal(v, &rogue).await, "unknown kid");
    // A scope the issuer did not grant.
    let narrow = iss.token(&iss.url, "bob", &[("scope", "other")]).await;
    let e = v.caller(&bearer(&narrow), None).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (StatusCode::FORBIDDEN, Some("insufficient_scope"))
    );
    let challenge = v.www_authenticate(&e).unwrap();
    assert!(
        challenge.to_str().unwrap().contains(
            "resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp\""
        ),
        "{challenge:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oidc_discovery_and_jwks_url_verify_the_issuers_callers() {
    let Some(mut iss) = Issuer::start() else {
        return;
    };
    let oidc = verifier(
        &format!(
            "mode = \"oidc\"\nissuer = \"{}\"\naudience = \"{AUD}\"\nscopes = [\"mcp:tools\"]\n\
             jwks_refresh_floor_seconds = 3600",
            iss.url
        ),
        None,
    )
    .await;
    callers_and_refusals(&iss, &oidc).await;
    assert_eq!(
        oidc.metadata().unwrap().document()["authorization_servers"],
        json!([iss.url])
    );

    let jwks = verifier(
        &format!(
            "mode = \"jwt\"\nissuer = \"{0}\"\naudience = \"{AUD}\"\nscopes = [\"mcp:tools\"]\n\
             jwks_url = \"{0}/jwks\"\njwks_refresh_floor_seconds = 1",
            iss.url
        ),
        None,
    )
    .await;
    callers_and_refusals(&iss, &jwks).await;

    // The issuer adds a key. The oidc verifier's floor (an hour) forbids another fetch:
    // the new kid stays unknown. The jwks verifier's (a second) lets a refresh find it.
    let fresh = iss.rotate("carol");
    assert_eq!(refusal(&oidc, &fresh).await, "unknown kid");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match jwks.caller(&bearer(&fresh), None).await {
            Ok(c) => break assert_eq!(c.sub, "carol"),
            Err(AuthError::Invalid("unknown kid")) if Instant::now() < deadline => {
                // The floor is a wall-clock rule: wait it out.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn oidc_start_refuses_an_issuer_that_names_another() {
    let Some(iss) = Issuer::start() else { return };
    // The document at this URL says its issuer is 127.0.0.1's, not localhost's (or the
    // reverse): discovery must refuse the mismatch.
    let other = if iss.url.contains("localhost") {
        iss.url.replace("localhost", "127.0.0.1")
    } else {
        iss.url.replace("127.0.0.1", "localhost")
    };
    let auth: HttpAuth = toml::from_str(&format!(
        "mode = \"oidc\"\nissuer = \"{other}\"\naudience = \"{AUD}\""
    ))
    .unwrap();
    let r = Verifier::new(Setup {
        auth: &auth,
        bind: "127.0.0.1:8080".parse().unwrap(),
        path: "/mcp",
        tcd: None,
    })
    .await;
    let e = r.err().expect("refused");
    assert!(e.to_string().contains("names issuer"), "{e}");
}

/// tcd's `VerifyToken` over the test's gRPC client, counting calls.
struct GrpcTcd {
    client: Client,
    calls: AtomicUsize,
}

impl TcdTokens for GrpcTcd {
    fn verify_token<'a>(
        &'a self,
        token: &'a str,
        audience: &'a str,
    ) -> tc_auth::tcd::VerifyFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut c = self.client.clone();
        let req = v1::VerifyTokenRequest {
            token: token.into(),
            audience: audience.into(),
        };
        Box::pin(async move {
            match c.verify_token(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    Ok(Verified {
                        sub: r.sub,
                        scopes: r.scopes,
                        exp: r.exp,
                    })
                }
                Err(s) => Err(match reason_of(&s) {
                    Some(Reason::Expired) => TcdRefusal::Expired,
                    Some(_) => TcdRefusal::Invalid,
                    None => TcdRefusal::Unavailable,
                }),
            }
        })
    }
}

const VAULTS: &str = "\n[[vaults]]\nid = \"notes\"\nroot = \"/tmp\"\n[vaults.http.auth]\nmode = \"jwt\"\naudience = \"tc-notes\"\n\
                      \n[[vaults]]\nid = \"other\"\nroot = \"/tmp\"\n[vaults.http.auth]\nmode = \"jwt\"\naudience = \"tc-other\"\n\
                      \n[[vaults]]\nid = \"plain\"\nroot = \"/tmp\"\n";

fn with_vaults() -> Daemon {
    let d = Daemon::start();
    let mut cfg = std::fs::OpenOptions::new()
        .append(true)
        .open(&d.config)
        .unwrap();
    cfg.write_all(VAULTS.as_bytes()).unwrap();
    d
}

fn mint(d: &Daemon, args: &[&str]) -> String {
    let mut all = vec!["token", "mint"];
    all.extend_from_slice(args);
    let o = d.tcctl(&all);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().count(), 1, "only the token: {out:?}");
    out.trim_end().to_string()
}

/// A token signed with the key derived from `d`'s secret (as tcd derives it).
fn forge(d: &Daemon, claims: &Value) -> String {
    let secret = std::fs::read(d.cache_dir.join("server-secrets/server.key")).unwrap();
    let hk = hkdf::Hkdf::<Sha256>::new(Some(b"tc-server-secret"), &secret);
    let mut key = [0u8; 32];
    hk.expand(b"tc/v1/http-bearer", &mut key).unwrap();
    let signed = format!(
        "{}.{}",
        B64.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
        B64.encode(claims.to_string())
    );
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
    m.update(signed.as_bytes());
    format!("{signed}.{}", B64.encode(m.finalize().into_bytes()))
}

#[tokio::test(flavor = "multi_thread")]
async fn tcctl_minted_tokens_verify_through_tcd() {
    let d = with_vaults();
    let tcd = Arc::new(GrpcTcd {
        client: d.client().await,
        calls: AtomicUsize::new(0),
    });
    let v = verifier(
        &format!("mode = \"jwt\"\naudience = \"{AUD}\""),
        Some(tcd.clone()),
    )
    .await;

    let alice = mint(&d, &["--sub", "alice", "--vault", "notes", "--ttl", "10m"]);
    for _ in 0..3 {
        let c = v.caller(&bearer(&alice), None).await.unwrap();
        assert_eq!(c.sub, "alice");
    }
    assert_eq!(
        tcd.calls.load(Ordering::SeqCst),
        1,
        "verified once, then cached"
    );
    let bob = mint(
        &d,
        &[
            "--sub",
            "bob@example.com",
            "--vault",
            "notes",
            "--scope",
            "mcp:tools",
        ],
    );
    let c = v.caller(&bearer(&bob), None).await.unwrap();
    assert_eq!(
        (c.sub.as_str(), c.scopes),
        ("bob@example.com", vec!["mcp:tools".to_string()])
    );

    // Signed right but past its exp; signed right for a name no token may carry.
    let now = tc_core::now_ms() / 1000;
    let claims = |sub: &str, exp: i64| json!({"iss": "tcd", "sub": sub, "aud": AUD, "iat": now - 600, "exp": exp, "jti": "x"});
    assert_eq!(
        refusal(&v, &forge(&d, &claims("alice", now - 1))).await,
        "expired"
    );
    let stdio = forge(&d, &claims("stdio", now + 600));
    assert_eq!(
        refusal(&v, &stdio).await,
        "not minted by this tcd for this audience"
    );
    assert_eq!(
        v.caller(&bearer(&forge(&d, &claims("alice", now + 600))), None)
            .await
            .unwrap()
            .sub,
        "alice",
        "the forged-with-the-real-key control verifies (the key derivation is tcd's)"
    );
    // Another vault's audience, another tcd's token.
    let other = mint(&d, &["--sub", "alice", "--vault", "other"]);
    assert_eq!(
        refusal(&v, &other).await,
        "not minted by this tcd for this audience"
    );
    let d2 = with_vaults();
    let foreign = mint(&d2, &["--sub", "alice", "--vault", "notes"]);
    assert_eq!(
        refusal(&v, &foreign).await,
        "not minted by this tcd for this audience"
    );
    let mut c = d.client().await;
    refused(
        c.verify_token(v1::VerifyTokenRequest {
            token: foreign.clone(),
            audience: AUD.into(),
        })
        .await,
        Reason::Invalid,
    );
    // After a rotation tcd refuses what it minted before (the verifier's cache still
    // holds alice's for at most a minute; a fresh verifier asks tcd).
    let o = d.tcctl(&["rotate-secret"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fresh = verifier(
        &format!("mode = \"jwt\"\naudience = \"{AUD}\""),
        Some(tcd.clone()),
    )
    .await;
    assert_eq!(
        refusal(&fresh, &alice).await,
        "not minted by this tcd for this audience"
    );
    // The audit log names the minted callers, never a token.
    let evs = events(&mut c).await;
    let minted: Vec<&str> = evs
        .iter()
        .filter(|e| e.kind == "tc.bearer.minted")
        .map(|e| e.caller.as_str())
        .collect();
    assert_eq!(minted, ["alice", "bob@example.com", "alice"]);
    assert!(!format!("{evs:?}").contains(&alice));
}

#[test]
fn tcctl_token_mint_refuses_bad_callers_and_vaults_without_tcd_tokens() {
    let d = with_vaults();
    for (args, code, says) in [
        (&["--sub", "alice bob", "--vault", "notes"][..], 4, "sub"),
        (&["--sub", "stdio", "--vault", "notes"], 4, "local caller"),
        (
            &["--sub", "alice", "--vault", "notes", "--ttl", "31d"],
            4,
            "30 days",
        ),
        (
            &["--sub", "alice", "--vault", "plain"],
            5,
            "does not take tokens minted by tcd",
        ),
        (&["--sub", "alice"], 1, "--vault is required"),
        (
            &["--sub", "alice", "--vault", "notes", "--ttl", "1w"],
            2,
            "unit",
        ),
    ] {
        let mut all = vec!["token", "mint"];
        all.extend_from_slice(args);
        let o = d.tcctl(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}
