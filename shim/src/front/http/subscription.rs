//! What a `subscriptions/listen` stream carries: which list-changed notifications it
//! asked for and tc honours ([`Filter`]), and the subscription id tagged on each message.

use serde_json::{json, Map, Value};

use crate::wire::value::at;

/// The `_meta` key tagging every message of a subscription with its request id.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The list-changed kinds a subscription may ask for: its filter key, the method, and
/// the legacy server capability that advertises it.
const KINDS: [(&str, &str, &str); 3] = [
    (
        "toolsListChanged",
        "notifications/tools/list_changed",
        "tools",
    ),
    (
        "promptsListChanged",
        "notifications/prompts/list_changed",
        "prompts",
    ),
    (
        "resourcesListChanged",
        "notifications/resources/list_changed",
        "resources",
    ),
];

/// The list-changed notifications a subscription asked for and tc honours, by [`KINDS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter([bool; 3]);

impl Filter {
    /// The filter a request asks for; `None` when `params.notifications` is not an object.
    pub fn requested(msg: &Value) -> Option<Filter> {
        let n = at(msg, &["params", "notifications"])?.as_object()?;
        Some(Filter(KINDS.map(|(k, _, _)| {
            n.get(k).and_then(Value::as_bool) == Some(true)
        })))
    }

    /// What a legacy server's `capabilities` say it sends: `{"tools": {"listChanged":
    /// true}}` and the like.
    pub fn advertised(caps: &Value) -> Filter {
        Filter(
            KINDS.map(|(_, _, c)| {
                at(caps, &[c, "listChanged"]).and_then(Value::as_bool) == Some(true)
            }),
        )
    }

    /// The kinds both filters pass.
    pub fn and(self, other: Filter) -> Filter {
        Filter(std::array::from_fn(|i| self.0[i] && other.0[i]))
    }

    /// Whether a notification `method` passes this filter.
    pub fn wants(&self, method: &str) -> bool {
        KINDS
            .iter()
            .zip(self.0)
            .any(|((_, m, _), on)| on && *m == method)
    }

    pub fn honoured(&self) -> Value {
        let on = KINDS.iter().zip(self.0).filter(|(_, on)| *on);
        let m: Map<String, Value> = on
            .map(|((k, _, _), _)| (k.to_string(), Value::Bool(true)))
            .collect();
        Value::Object(m)
    }
}

/// Whether a notification method is one a subscription can carry.
pub fn is_list_changed(method: &str) -> bool {
    KINDS.iter().any(|(_, m, _)| *m == method)
}

/// A notification line tagged with the subscription it goes out on.
pub fn tag(line: &[u8], id: &Value) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(line).ok()?;
    let params = v
        .as_object_mut()?
        .entry("params")
        .or_insert_with(|| json!({}));
    let meta = params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta.as_object_mut()?
        .insert(SUBSCRIPTION_ID.into(), id.clone());
    Some(v.to_string().into_bytes())
}
