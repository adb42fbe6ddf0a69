//! Public keys and the algorithms each may verify: from PEM files (`public_keys`) or a
//! JWKS document. The algorithm comes from the key, never from the token: symmetric
//! keys are never loaded here, so a public key can never act as an HMAC secret.

use std::str::FromStr;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Header};

/// Most keys kept from one JWKS document.
pub const MAX_KEYS: usize = 64;

/// One verification key.
pub struct Key {
    pub kid: Option<String>,
    pub key: DecodingKey,
    /// The algorithms this key verifies (one when the JWK names its `alg`).
    pub algs: Vec<Algorithm>,
}

/// The keys one issuer signs with.
#[derive(Default)]
pub struct KeySet {
    pub keys: Vec<Key>,
}

/// Why no key may check a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoKey {
    /// The token's `kid` is not in the set (a JWKS refresh may find it).
    UnknownKid,
    /// No key of the set verifies the token's `alg` (alg confusion, or `none`).
    WrongAlg,
}

impl KeySet {
    /// A key from one PEM file's text: RSA, EC (P-256/P-384) or Ed25519 public key.
    pub fn pem_key(pem: &[u8]) -> Result<Key, String> {
        let text = std::str::from_utf8(pem).map_err(|_| "not a PEM text file".to_string())?;
        if text.contains("PRIVATE KEY") {
            return Err("holds a private key; give the public key only".into());
        }
        let key = DecodingKey::from_rsa_pem(pem)
            .or_else(|_| DecodingKey::from_ec_pem(pem))
            .or_else(|_| DecodingKey::from_ed_pem(pem))
            .map_err(|_| "not an RSA, EC or Ed25519 public key in PEM".to_string())?;
        let algs = key.family().algorithms().to_vec();
        Ok(Key {
            kid: None,
            key,
            algs,
        })
    }

    /// The usable signature keys of a JWKS document; unusable entries are skipped (an
    /// issuer may publish encryption keys, or kinds this build does not verify).
    pub fn from_jwks(doc: &serde_json::Value) -> Result<KeySet, &'static str> {
        let entries = doc
            .get("keys")
            .and_then(|k| k.as_array())
            .ok_or("the JWKS has no \"keys\" array")?;
        let keys: Vec<Key> = entries
            .iter()
            .filter_map(|e| serde_json::from_value::<Jwk>(e.clone()).ok())
            .filter_map(|j| jwk_key(&j))
            .take(MAX_KEYS)
            .collect();
        Ok(KeySet { keys })
    }

    /// The keys that may check a token with this header: by `kid` when it names one
    /// (else all), and only those whose algorithms include the token's `alg`.
    pub fn candidates(&self, header: &Header) -> Result<Vec<&Key>, NoKey> {
        let by_kid: Vec<&Key> = match &header.kid {
            Some(kid) => self
                .keys
                .iter()
                .filter(|k| k.kid.as_deref() == Some(kid.as_str()))
                .collect(),
            None => self.keys.iter().collect(),
        };
        if by_kid.is_empty() {
            return Err(NoKey::UnknownKid);
        }
        let fit: Vec<&Key> = by_kid
            .into_iter()
            .filter(|k| k.algs.contains(&header.alg))
            .collect();
        if fit.is_empty() {
            return Err(NoKey::WrongAlg);
        }
        Ok(fit)
    }
}

/// A verification key from one JWK, or None when it is not an asymmetric signature
/// key this build can use.
fn jwk_key(j: &Jwk) -> Option<Key> {
    let c = &j.common;
    if matches!(c.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    if let Some(ops) = &c.key_operations {
        if !ops.contains(&KeyOperations::Verify) {
            return None;
        }
    }
    let family_algs: Vec<Algorithm> = match &j.algorithm {
        AlgorithmParameters::RSA(_) => AlgorithmFamily::Rsa.algorithms().to_vec(),
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        // Symmetric (`oct`) keys and anything else: never a public verification key.
        _ => return None,
    };
    let algs = match c.key_algorithm {
        None => family_algs,
        Some(a) => {
            let a = Algorithm::from_str(&a.to_string()).ok()?;
            if !family_algs.contains(&a) {
                return None;
            }
            vec![a]
        }
    };
    let key = DecodingKey::from_jwk(j).ok()?;
    if key.family() == AlgorithmFamily::Hmac {
        return None;
    }
    Some(Key {
        kid: c.key_id.clone(),
        key,
        algs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ec_jwk(kid: &str, alg: Option<&str>) -> serde_json::Value {
        // The P-256 generator point: a valid public key for parsing purposes.
        let mut j = json!({
            "kty": "EC", "crv": "P-256", "kid": kid,
            "x": "axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY",
            "y": "T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU",
        });
        if let Some(a) = alg {
            j["alg"] = json!(a);
        }
        j
    }

    fn header(alg: Algorithm, kid: Option<&str>) -> Header {
        let mut h = Header::new(alg);
        h.kid = kid.map(str::to_string);
        h
    }

    #[test]
    fn jwks_keeps_signature_keys_and_never_symmetric_ones() {
        let doc = json!({"keys": [
            ec_jwk("a", None),
            ec_jwk("b", Some("ES256")),
            ec_jwk("wrong-alg", Some("RS256")),
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-256", "kid": "enc", "use": "enc",
             "x": "axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY",
             "y": "T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU"},
            {"kty": "weird"},
            "not an object",
        ]});
        let set = KeySet::from_jwks(&doc).unwrap();
        let kids: Vec<_> = set.keys.iter().map(|k| k.kid.clone().unwrap()).collect();
        assert_eq!(kids, ["a", "b"]);
        assert!(KeySet::from_jwks(&json!({"nokeys": []})).is_err());
    }

    #[test]
    fn candidates_by_kid_and_by_the_keys_own_alg() {
        let set = KeySet::from_jwks(&json!({"keys": [ec_jwk("a", None)]})).unwrap();
        assert_eq!(
            set.candidates(&header(Algorithm::ES256, Some("a")))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            set.candidates(&header(Algorithm::ES256, None))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            set.candidates(&header(Algorithm::ES256, Some("z"))).err(),
            Some(NoKey::UnknownKid)
        );
        for alg in [Algorithm::HS256, Algorithm::RS256, Algorithm::ES384] {
            assert_eq!(
                set.candidates(&header(alg, Some("a"))).err(),
                Some(NoKey::WrongAlg),
                "{alg:?}"
            );
        }
    }

    #[test]
    fn pem_files_must_be_public_keys() {
        assert!(
            KeySet::pem_key(b"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n")
                .is_err()
        );
        assert!(KeySet::pem_key(b"hello").is_err());
        assert!(KeySet::pem_key(&[0xff, 0xfe]).is_err());
    }
}
