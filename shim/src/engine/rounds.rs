//! A downstream's own `input_required` round, as our state carries it: the downstream's
//! `requestState` and whether the call was approved, under a MAC only this process makes.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tc_proto::v1::Binding;

/// What our state carries around a downstream's round (the daemon's `inner` bytes).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(in crate::engine) struct Inner {
    /// The downstream's own requestState, exactly as it sent it (it may send none).
    pub(in crate::engine) state: Option<String>,
    /// The call had been approved (the state is sealed with the approved fingerprint).
    pub(in crate::engine) approved: bool,
    /// [`round_mac`] of this round, by this process: tcd's seal alone proves nothing
    /// about `approved`, since anything running as the human (in guarded mode, the
    /// agent's shell) may call SealState with any `inner`.
    #[serde(default)]
    pub(in crate::engine) mac: String,
}

/// This process's key for [`round_mac`], random per process and never written anywhere
/// (a round of an approved call cannot be continued by another tc-shim process).
fn round_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut k);
        k
    })
}

/// HMAC of everything a round is: the call, the approved fingerprint, the downstream's
/// state and whether the call was approved.
fn round_tag(b: &Binding, fp: &str, state: Option<&str>, approved: bool) -> Vec<u8> {
    use hmac::Mac as _;
    let doc = json!([b.vault, b.tool, b.caller, b.args_hash, fp, state, approved]);
    let mut m = <hmac::Hmac<sha2::Sha256>>::new_from_slice(round_key()).expect("any key length");
    m.update(doc.to_string().as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// [`round_tag`] in hex, as a round carries it.
pub(in crate::engine) fn round_mac(
    b: &Binding,
    fp: &str,
    state: Option<&str>,
    approved: bool,
) -> String {
    hex::encode(round_tag(b, fp, state, approved))
}

/// Whether `inner` is a round this process sealed for `b` at `fp` (constant time).
pub(in crate::engine) fn round_is_ours(b: &Binding, fp: &str, inner: &Inner) -> bool {
    let Ok(mac) = hex::decode(&inner.mac) else {
        return false;
    };
    let tag = round_tag(b, fp, inner.state.as_deref(), inner.approved);
    // Constant time, as every tag comparison in the workspace (security.rs checks).
    subtle::ConstantTimeEq::ct_eq(tag.as_slice(), mac.as_slice()).into()
}

/// The downstream's `requestState` if `msg` answers with a round of its own
/// (`resultType: "input_required"`): `Some(None)` for a round without a state.
pub(in crate::engine) fn downstream_round(msg: &Value) -> Option<Option<String>> {
    let r = msg.get("result")?;
    if r.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return None;
    }
    Some(
        r.get("requestState")
            .and_then(Value::as_str)
            .map(String::from),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_input_required_answer_is_a_round() {
        let r = |v: Value| downstream_round(&json!({"jsonrpc": "2.0", "id": 1, "result": v}));
        assert_eq!(
            r(json!({"resultType": "input_required", "requestState": "s", "inputRequests": {}})),
            Some(Some("s".into()))
        );
        assert_eq!(
            r(json!({"resultType": "input_required", "inputRequests": {}})),
            Some(None)
        );
        assert_eq!(
            r(json!({"resultType": "complete", "requestState": "s"})),
            None
        );
        assert_eq!(r(json!({"content": []})), None);
        assert_eq!(
            downstream_round(&json!({"id": 1, "error": {"code": 1, "message": "x"}})),
            None
        );
    }

    #[test]
    fn inner_round_trips_and_refuses_unknown_fields() {
        let i = Inner {
            state: Some("s".into()),
            approved: true,
            mac: String::new(),
        };
        let b = serde_json::to_vec(&i).unwrap();
        assert_eq!(serde_json::from_slice::<Inner>(&b).unwrap(), i);
        assert!(
            serde_json::from_slice::<Inner>(br#"{"state":null,"approved":false,"x":1}"#).is_err()
        );
    }

    #[test]
    fn only_our_own_round_is_ours() {
        let b = Binding {
            vault: "v".into(),
            tool: "t".into(),
            caller: "stdio".into(),
            args_hash: "a".repeat(64),
        };
        let fp = "f".repeat(64);
        let mac = round_mac(&b, &fp, Some("s"), true);
        let ours = Inner {
            state: Some("s".into()),
            approved: true,
            mac: mac.clone(),
        };
        assert!(round_is_ours(&b, &fp, &ours));
        let forged = Inner {
            mac: String::new(),
            ..ours
        };
        assert!(!round_is_ours(&b, &fp, &forged));
        let other_state = Inner {
            state: Some("t".into()),
            approved: true,
            mac: mac.clone(),
        };
        assert!(!round_is_ours(&b, &fp, &other_state));
        let ours = Inner {
            state: Some("s".into()),
            approved: true,
            mac,
        };
        assert!(!round_is_ours(&b, &"0".repeat(64), &ours));
    }
}
