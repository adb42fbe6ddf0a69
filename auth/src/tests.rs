//! Every refusal of a token, with keys generated here: expiry, audience, issuer, unknown
//! `kid`, alg confusion (`none`, HS256 keyed with the public key, another curve), the
//! `sub` rule, scopes; and the [`Verifier`] around them (modes, query tokens, challenges).

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, StatusCode};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::jwt::{self, Expect, Refused};
use crate::keys::KeySet;
use crate::{AuthError, Setup, SetupError, Verifier};

const ISS: &str = "https://id.example";
const AUD: &str = "tc-notes";

/// A signing key and its public PEM.
struct Pair {
    enc: EncodingKey,
    alg: Algorithm,
    public_pem: String,
    /// The public JWK (no kid).
    jwk: Value,
}

fn ec() -> Pair {
    use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let sk = p256::SecretKey::random(&mut rand::rngs::OsRng);
    let private = sk.to_pkcs8_pem(LineEnding::LF).unwrap();
    let enc = EncodingKey::from_ec_pem(private.as_bytes()).unwrap();
    let jwk =
        serde_json::to_value(Jwk::from_encoding_key(&enc, Algorithm::ES256).unwrap()).unwrap();
    Pair {
        enc,
        alg: Algorithm::ES256,
        public_pem: sk.public_key().to_public_key_pem(LineEnding::LF).unwrap(),
        jwk,
    }
}

fn ed() -> Pair {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey, EncodePublicKey};
    let sk = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
    use base64::Engine;
    let private = sk.to_pkcs8_pem(LineEnding::LF).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sk.verifying_key().to_bytes());
    Pair {
        enc: EncodingKey::from_ed_pem(private.as_bytes()).unwrap(),
        alg: Algorithm::EdDSA,
        public_pem: sk
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap(),
        jwk: json!({"kty": "OKP", "crv": "Ed25519", "x": x}),
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn claims(sub: &str) -> Value {
    json!({"iss": ISS, "aud": AUD, "sub": sub, "exp": now() + 600, "iat": now()})
}

fn sign(p: &Pair, kid: Option<&str>, c: &Value) -> String {
    let mut h = Header::new(p.alg);
    h.kid = kid.map(str::to_string);
    encode(&h, c, &p.enc).unwrap()
}

fn jwks(pairs: &[(&Pair, &str)]) -> KeySet {
    let keys: Vec<Value> = pairs
        .iter()
        .map(|(p, kid)| {
            let mut j = p.jwk.clone();
            j["kid"] = json!(kid);
            j
        })
        .collect();
    KeySet::from_jwks(&json!({ "keys": keys })).unwrap()
}

fn expect() -> Expect {
    Expect {
        issuer: ISS.into(),
        audience: AUD.into(),
    }
}

fn refusal(r: Result<crate::Caller, Refused>) -> &'static str {
    match r {
        Err(Refused::Auth(AuthError::Invalid(why))) => why,
        Err(Refused::UnknownKid) => "unknown kid",
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_good_token_names_its_caller_and_scopes() {
    let k = ec();
    let set = jwks(&[(&k, "k1")]);
    let mut c = claims("alice@example.com");
    c["scope"] = json!("mcp:tools read");
    c["scp"] = json!(["extra"]);
    let caller = jwt::verify(&sign(&k, Some("k1"), &c), &set, &expect()).unwrap();
    assert_eq!(caller.sub, "alice@example.com");
    assert_eq!(caller.scopes, ["extra", "mcp:tools", "read"]);
    // An array audience that includes ours is ours.
    c["aud"] = json!(["other", AUD]);
    assert!(jwt::verify(&sign(&k, Some("k1"), &c), &set, &expect()).is_ok());
}

#[test]
fn expired_early_wrong_audience_wrong_issuer_are_refused() {
    let k = ec();
    let set = jwks(&[(&k, "k1")]);
    let t = |f: &dyn Fn(&mut Value)| {
        let mut c = claims("alice");
        f(&mut c);
        jwt::verify(&sign(&k, Some("k1"), &c), &set, &expect())
    };
    assert_eq!(refusal(t(&|c| c["exp"] = json!(now() - 120))), "expired");
    assert_eq!(
        refusal(t(&|c| c["nbf"] = json!(now() + 600))),
        "not valid yet (nbf)"
    );
    assert_eq!(
        refusal(t(&|c| c["aud"] = json!("tc-other"))),
        "wrong audience"
    );
    assert_eq!(
        refusal(t(&|c| c["iss"] = json!("https://evil.example"))),
        "wrong issuer"
    );
    for claim in ["exp", "iss", "aud", "sub"] {
        let why = refusal(t(&|c| {
            c.as_object_mut().unwrap().remove(claim);
        }));
        assert_eq!(why, format!("no {claim} claim"), "{claim}");
    }
}

#[test]
fn unknown_kid_and_a_foreign_key_under_a_known_kid_are_refused() {
    let (k, stranger) = (ec(), ec());
    let set = jwks(&[(&k, "k1")]);
    let t = sign(&stranger, Some("k9"), &claims("alice"));
    assert_eq!(jwt::verify(&t, &set, &expect()), Err(Refused::UnknownKid));
    let t = sign(&stranger, Some("k1"), &claims("alice"));
    assert_eq!(refusal(jwt::verify(&t, &set, &expect())), "bad signature");
    // A tampered payload fails the signature too.
    let good = sign(&k, Some("k1"), &claims("alice"));
    let mut parts: Vec<&str> = good.split('.').collect();
    let evil = sign(&k, Some("k1"), &claims("mallory"));
    parts[1] = evil.split('.').nth(1).unwrap();
    assert_eq!(
        refusal(jwt::verify(&parts.join("."), &set, &expect())),
        "bad signature"
    );
}

#[test]
fn the_alg_comes_from_the_key_never_the_token() {
    let k = ec();
    let set = jwks(&[(&k, "k1")]);
    // HS256 keyed with the public key's text and with its JWK coordinates.
    let hs = EncodingKey::from_secret(k.public_pem.as_bytes());
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("k1".into());
    let t = encode(&h, &claims("alice"), &hs).unwrap();
    assert_eq!(
        refusal(jwt::verify(&t, &set, &expect())),
        "alg is not one the issuer's key uses"
    );
    // The same with a static PEM key (no kid).
    let pem = KeySet {
        keys: vec![KeySet::pem_key(k.public_pem.as_bytes()).unwrap()],
    };
    h.kid = None;
    let t = encode(&h, &claims("alice"), &hs).unwrap();
    assert_eq!(
        refusal(jwt::verify(&t, &pem, &expect())),
        "alg is not one the issuer's key uses"
    );
    // alg "none", unsigned.
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let none = format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#),
        b64.encode(claims("alice").to_string())
    );
    assert_eq!(
        refusal(jwt::verify(&none, &set, &expect())),
        "malformed token"
    );
    // Another key kind under the key's kid: an Ed25519 token against the EC key.
    let e = ed();
    let t = sign(&e, Some("k1"), &claims("alice"));
    assert_eq!(
        refusal(jwt::verify(&t, &set, &expect())),
        "alg is not one the issuer's key uses"
    );
}

#[test]
fn sub_must_be_a_usable_caller_name() {
    let k = ed();
    let set = jwks(&[(&k, "e")]);
    for bad in [
        "",
        "alice bob",
        "a\u{202e}b",
        "$(reboot)",
        "stdio",
        "http-local",
        &"a".repeat(129),
    ] {
        let t = sign(&k, Some("e"), &claims(bad));
        assert!(
            refusal(jwt::verify(&t, &set, &expect())).starts_with("sub is not"),
            "{bad:?}"
        );
    }
    let mut c = claims("x");
    c["sub"] = json!(12345);
    assert_eq!(
        refusal(jwt::verify(&sign(&k, Some("e"), &c), &set, &expect())),
        "malformed token"
    );
}

fn bearer(t: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
    );
    h
}

fn auth(text: &str) -> tc_core::config::HttpAuth {
    toml::from_str(text).unwrap()
}

#[tokio::test]
async fn static_pem_keys_through_the_verifier_with_scopes_and_challenges() {
    let (k, e) = (ec(), ed());
    let dir = tempfile::tempdir().unwrap();
    let (pk, pe) = (dir.path().join("ec.pem"), dir.path().join("ed.pem"));
    std::fs::write(&pk, &k.public_pem).unwrap();
    std::fs::write(&pe, &e.public_pem).unwrap();
    let cfg = auth(&format!(
        "mode = \"jwt\"\nissuer = \"{ISS}\"\naudience = \"{AUD}\"\nscopes = [\"mcp\"]\n\
         public_keys = [{:?}, {:?}]",
        pk, pe
    ));
    let v = Verifier::new(Setup {
        auth: &cfg,
        bind: "127.0.0.1:8080".parse().unwrap(),
        path: "/mcp",
        tcd: None,
    })
    .await
    .unwrap();
    let mut c = claims("alice");
    c["scope"] = json!("mcp other");
    for key in [&k, &e] {
        let caller = v.caller(&bearer(&sign(key, None, &c)), None).await.unwrap();
        assert_eq!(caller.sub, "alice");
    }
    // Without the required scope: 403 insufficient_scope naming it.
    let bare = sign(&k, None, &claims("bob"));
    let err = v.caller(&bearer(&bare), None).await.unwrap_err();
    assert_eq!(err, AuthError::InsufficientScope("mcp".into()));
    assert_eq!(err.status(), StatusCode::FORBIDDEN);
    let rm = "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp";
    assert_eq!(
        v.www_authenticate(&err).unwrap(),
        format!("Bearer resource_metadata=\"{rm}\", error=\"insufficient_scope\", scope=\"mcp\"")
    );
    // A good token in the query string is refused all the same (400).
    let good = sign(&k, None, &c);
    let q = format!("access_token={good}");
    let err = v.caller(&bearer(&good), Some(&q)).await.unwrap_err();
    assert_eq!(
        (err.clone(), err.status()),
        (AuthError::QueryToken, StatusCode::BAD_REQUEST)
    );
    // No header: 401 with the metadata URL and no error code.
    let err = v.caller(&HeaderMap::new(), None).await.unwrap_err();
    assert_eq!(err.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        v.www_authenticate(&err).unwrap(),
        format!("Bearer resource_metadata=\"{rm}\", scope=\"mcp\"")
    );
    let md = v.metadata().unwrap().document();
    assert_eq!(md["resource"], "http://127.0.0.1:8080/mcp");
    assert_eq!(md["authorization_servers"], json!([ISS]));
}

#[tokio::test]
async fn none_is_http_local_on_loopback_only_and_ignores_tokens() {
    let cfg = auth("");
    let setup = |bind: &str| Setup {
        auth: &cfg,
        bind: bind.parse().unwrap(),
        path: "/mcp",
        tcd: None,
    };
    for public in ["0.0.0.0:8080", "10.1.2.3:80", "[::]:8080"] {
        assert!(
            matches!(
                Verifier::new(setup(public)).await,
                Err(SetupError::Config("mode", _)) | Err(SetupError::NoneOnPublicBind(_))
            ),
            "{public}"
        );
    }
    let v = Verifier::new(setup("127.0.0.1:8080")).await.unwrap();
    let c = v.caller(&bearer("forged.token.here"), None).await.unwrap();
    assert_eq!(c.sub, tc_core::config::HTTP_LOCAL_CALLER);
    assert!(v.metadata().is_none());
    let err = v
        .caller(&HeaderMap::new(), Some("access_token=x"))
        .await
        .unwrap_err();
    assert_eq!(err, AuthError::QueryToken);
    assert!(v.www_authenticate(&err).is_none());
}

#[tokio::test]
async fn setup_refuses_what_cannot_work() {
    let hs = auth(&format!("mode = \"jwt\"\naudience = \"{AUD}\""));
    let r = Verifier::new(Setup {
        auth: &hs,
        bind: "127.0.0.1:1".parse().unwrap(),
        path: "/mcp",
        tcd: None,
    })
    .await;
    assert!(matches!(r, Err(SetupError::NoTcd)));
    let dir = tempfile::tempdir().unwrap();
    let priv_file = dir.path().join("k.pem");
    std::fs::write(
        &priv_file,
        "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let cfg = auth(&format!(
        "mode = \"jwt\"\nissuer = \"{ISS}\"\naudience = \"{AUD}\"\npublic_keys = [{priv_file:?}]"
    ));
    let setup = |bind: &str| Setup {
        auth: &cfg,
        bind: bind.parse().unwrap(),
        path: "/mcp",
        tcd: None,
    };
    assert!(matches!(
        Verifier::new(setup("127.0.0.1:1")).await,
        Err(SetupError::Key { .. })
    ));
    // Off loopback the resource URL must be configured.
    assert!(matches!(
        Verifier::new(setup("0.0.0.0:1")).await,
        Err(SetupError::Config("resource", _))
    ));
}
