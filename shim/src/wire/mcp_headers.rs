//! SEP-2243's headers in one place: which body field `Mcp-Name` mirrors, how a value
//! travels in a header (`=?base64?…?=`), and a tool's `x-mcp-header` parameters.
//!
//! The HTTP downstream sends `Mcp-Param-{Name}` for each declared argument of a 2026-07-28
//! `tools/call` (a client MUST); the HTTP front refuses a call whose `Mcp-Param-*` headers
//! say something else than its body (an intermediary may route on them; tc judges the
//! body). The encoding is the SDKs': the server compares exact strings.

use std::collections::HashSet;

use axum::http::HeaderMap;
use base64::Engine as _;
use serde_json::Value;

/// JSON-RPC error: the routing headers disagree with the body (HTTP 400).
pub const HEADER_MISMATCH: i64 = -32020;
/// The header prefix of a mirrored tool parameter.
pub const PARAM_PREFIX: &str = "mcp-param-";
/// The schema keyword naming a parameter's header.
const KEYWORD: &str = "x-mcp-header";

/// The body field `Mcp-Name` mirrors for `method`, if it carries one (the spec's three;
/// not the Tasks extension's `taskId`, which a client need not send and the front
/// would then refuse).
pub fn name_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// A value as an HTTP header carries it: printable ASCII without edge whitespace as is,
/// anything else (and anything that looks like the sentinel) as `=?base64?…?=`.
pub fn encode(v: &str) -> String {
    let plain = v.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && v.trim_matches([' ', '\t']) == v
        && !(v.starts_with("=?base64?") && v.ends_with("?="));
    if plain {
        v.to_string()
    } else {
        let b64 = base64::engine::general_purpose::STANDARD.encode(v.as_bytes());
        format!("=?base64?{b64}?=")
    }
}

/// A header value as sent: verbatim, or the UTF-8 inside a `=?base64?…?=` sentinel
/// (canonical base64 only, so one value has one spelling).
pub fn decode(v: &str) -> Option<String> {
    let Some(inner) = v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    else {
        return Some(v.to_string());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    if base64::engine::general_purpose::STANDARD.encode(&bytes) != inner {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// One `x-mcp-header` declaration: the header's name part and the argument it mirrors
/// (property names from the schema root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    pub name: String,
    pub path: Vec<String>,
}

impl ParamHeader {
    /// The header's name, lowercase (`mcp-param-region`), as a `HeaderMap` holds it.
    fn header(&self) -> String {
        format!("{PARAM_PREFIX}{}", self.name.to_ascii_lowercase())
    }
}

/// Why a tool's `x-mcp-header` declarations are invalid: a client MUST NOT use such a
/// tool over HTTP, so tc drops it from the listings it passes on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeclarationError {
    #[error("x-mcp-header must annotate a property, not the schema root")]
    AtRoot,
    #[error("x-mcp-header {0:?} is declared twice")]
    Twice(String),
    /// Inside a subschema that is not a `properties` chain from the root (`at`).
    #[error("x-mcp-header under {at} is off the properties path")]
    OffPath { at: String },
    #[error("x-mcp-header of {prop} is not a string")]
    NotAString { prop: String },
    #[error("x-mcp-header {name:?} of {prop} is not an HTTP token")]
    NotAToken { name: String, prop: String },
    /// Not `number`: a float's decimal spelling differs between implementations.
    #[error(
        "x-mcp-header {name:?} is on {prop} of type {kind:?}, not a string, integer or boolean"
    )]
    NotPrimitive {
        name: String,
        prop: String,
        kind: Option<String>,
    },
}

/// Why a request's `Mcp-Param-*` headers do not say what its body says (the request is
/// refused: a server may route on the headers).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamMismatch {
    #[error("{header} header is not valid (printable ASCII or =?base64?…?=)")]
    BadEncoding { header: String },
    #[error("{header} header appears more than once")]
    Repeated { header: String },
    #[error("{header} header sent for an absent argument {at}")]
    Unexpected { header: String, at: String },
    #[error("{header} header missing for {at}")]
    Missing { header: String, at: String },
    #[error("{header} header does not match the argument {at}")]
    Differs { header: String, at: String },
}

/// A tool definition's declarations, or why they are invalid (a client MUST NOT use such
/// a tool over HTTP): each a non-empty RFC 9110 token, unique without regard to case, on
/// a primitive property reached from the root through `properties` alone.
pub fn declarations(def: &Value) -> Result<Vec<ParamHeader>, DeclarationError> {
    let Some(schema) = def.get("inputSchema").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    if schema.contains_key(KEYWORD) {
        return Err(DeclarationError::AtRoot);
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), true, &mut out)?;
    let mut seen = HashSet::new();
    for d in &out {
        if !seen.insert(d.name.to_ascii_lowercase()) {
            return Err(DeclarationError::Twice(d.name.clone()));
        }
    }
    Ok(out)
}

/// Collects declarations under `schema`; `chain` says whether it is reached from the root
/// through `properties` alone (anywhere else a declaration is refused).
fn walk(
    schema: &serde_json::Map<String, Value>,
    path: &mut Vec<String>,
    chain: bool,
    out: &mut Vec<ParamHeader>,
) -> Result<(), DeclarationError> {
    for (key, value) in schema {
        match key.as_str() {
            KEYWORD if !path.is_empty() => {
                if !chain {
                    return Err(DeclarationError::OffPath { at: path.join(".") });
                }
                out.push(declared(value, schema, path)?);
            }
            "properties" => {
                for (prop, sub) in value.as_object().into_iter().flatten() {
                    path.push(prop.clone());
                    if let Some(sub) = sub.as_object() {
                        walk(sub, path, chain, out)?;
                    }
                    path.pop();
                }
            }
            // Instance data, not schemas: a key named x-mcp-header there means nothing.
            "default" | "const" | "enum" | "examples" | "dependentRequired" => {}
            _ => off_chain(value, path)?,
        }
    }
    Ok(())
}

/// Refuses any declaration inside a subschema that is not a `properties` chain.
fn off_chain(value: &Value, path: &mut Vec<String>) -> Result<(), DeclarationError> {
    match value {
        Value::Object(o) => {
            if o.contains_key(KEYWORD) {
                let at = if path.is_empty() {
                    "the root".to_string()
                } else {
                    path.join(".")
                };
                return Err(DeclarationError::OffPath { at });
            }
            let mut sink = Vec::new();
            walk(o, path, false, &mut sink)
        }
        Value::Array(a) => a.iter().try_for_each(|v| off_chain(v, path)),
        _ => Ok(()),
    }
}

/// One declaration, checked.
fn declared(
    value: &Value,
    schema: &serde_json::Map<String, Value>,
    path: &[String],
) -> Result<ParamHeader, DeclarationError> {
    let prop = path.join(".");
    let Some(name) = value.as_str() else {
        return Err(DeclarationError::NotAString { prop });
    };
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(DeclarationError::NotAToken {
            name: name.to_string(),
            prop,
        });
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string" | "integer" | "boolean") => {}
        other => {
            return Err(DeclarationError::NotPrimitive {
                name: name.to_string(),
                prop,
                kind: other.map(String::from),
            })
        }
    }
    Ok(ParamHeader {
        name: name.to_string(),
        path: path.to_vec(),
    })
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The argument a declaration mirrors and its header's text: `None` when it is absent or
/// null (no header is sent or expected), or not a primitive.
fn argument<'a>(args: Option<&'a Value>, d: &ParamHeader) -> Option<(&'a Value, String)> {
    let v = d.path.iter().try_fold(args?, |v, k| v.get(k))?;
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Some((v, text))
}

/// Whether a header's decoded text says what the body's argument says: the same text, or
/// (the spec's SHOULD) the integer's own spelling (`42`) for a body's integral float
/// (`42.0`) that a double holds exactly; nothing else (`+42`, `042`) passes.
fn agrees(sent: &str, body: &Value, text: &str) -> bool {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    let integral = body
        .as_number()
        .filter(|n| n.is_f64())
        .and_then(serde_json::Number::as_f64)
        .filter(|b| b.fract() == 0.0 && b.abs() < EXACT);
    sent == text || integral.is_some_and(|b| sent == (b as i64).to_string())
}

/// The `Mcp-Param-*` headers a call with `args` carries: (lowercase name, encoded value).
pub fn param_headers(decls: &[ParamHeader], args: Option<&Value>) -> Vec<(String, String)> {
    decls
        .iter()
        .filter_map(|d| {
            let (_, text) = argument(args, d)?;
            Some((d.header(), encode(&text)))
        })
        .collect()
}

/// The `Mcp-Param-*` headers of a request as (lowercase name, decoded value), each
/// checked for its encoding: a plain value must be what [`encode`] would send as is
/// (printable ASCII, no edge blank, no sentinel look-alike), else a canonical sentinel.
pub fn sent_params(h: &HeaderMap) -> Result<Vec<(String, String)>, ParamMismatch> {
    let mut out = Vec::new();
    for (name, value) in h {
        if !name.as_str().starts_with(PARAM_PREFIX) {
            continue;
        }
        let decoded = value.to_str().ok().and_then(|v| {
            let d = decode(v)?;
            // Either a real sentinel (decode unwrapped it) or exactly the plain spelling.
            (d != v || encode(&d) == v).then_some(d)
        });
        let Some(d) = decoded else {
            return Err(ParamMismatch::BadEncoding {
                header: name.to_string(),
            });
        };
        out.push((name.as_str().to_string(), d));
    }
    Ok(out)
}

/// `Ok` when each declared argument's header (from [`sent_params`]) is present exactly
/// when the argument is, once, and says what it says.
pub fn check_params(
    sent: &[(String, String)],
    decls: &[ParamHeader],
    args: Option<&Value>,
) -> Result<(), ParamMismatch> {
    for d in decls {
        let full = d.header();
        let mut named = sent.iter().filter(|(n, _)| *n == full).map(|(_, v)| v);
        let (first, again) = (named.next(), named.next().is_some());
        if again {
            return Err(ParamMismatch::Repeated { header: full });
        }
        let at = d.path.join(".");
        match (first, argument(args, d)) {
            (None, None) => {}
            (Some(s), Some((body, text))) if agrees(s, body, &text) => {}
            (Some(_), None) => return Err(ParamMismatch::Unexpected { header: full, at }),
            (None, Some(_)) => return Err(ParamMismatch::Missing { header: full, at }),
            (Some(_), Some(_)) => return Err(ParamMismatch::Differs { header: full, at }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn tool(props: Value) -> Value {
        json!({"name": "deploy", "inputSchema": {"type": "object", "properties": props}})
    }

    #[test]
    fn declarations_are_found_at_any_depth_of_properties() {
        let def = tool(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"prio": {"type": "integer", "x-mcp-header": "Prio"}}},
            "query": {"type": "string"}}));
        let mut d = declarations(&def).unwrap();
        d.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            d[0],
            ParamHeader {
                name: "Prio".into(),
                path: vec!["opts".into(), "prio".into()]
            }
        );
        assert_eq!(
            d[1],
            ParamHeader {
                name: "Region".into(),
                path: vec!["region".into()]
            }
        );
        let args = json!({"region": "ünï", "opts": {"prio": 3}, "query": "x"});
        let mut hs = param_headers(&d, Some(&args));
        hs.sort();
        assert_eq!(hs[0], ("mcp-param-prio".into(), "3".into()));
        assert_eq!(hs[1].0, "mcp-param-region");
        assert_eq!(decode(&hs[1].1).as_deref(), Some("ünï"));
        assert!(param_headers(&d, Some(&json!({"region": null}))).is_empty());
    }

    #[test]
    fn invalid_declarations_are_refused_with_the_reason() {
        for (props, why) in [
            (
                json!({"a": {"type": "string", "x-mcp-header": ""}}),
                "not an HTTP token",
            ),
            (
                json!({"a": {"type": "string", "x-mcp-header": "Re gion"}}),
                "not an HTTP token",
            ),
            (
                json!({"a": {"type": "string", "x-mcp-header": 7}}),
                "not a string",
            ),
            (
                json!({"a": {"type": "object", "x-mcp-header": "A"}}),
                "type",
            ),
            (
                json!({"a": {"type": "string", "x-mcp-header": "R"}, "b": {"type": "string", "x-mcp-header": "r"}}),
                "twice",
            ),
            (
                json!({"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "I"}}}),
                "off the properties path",
            ),
            (
                json!({"a": {"anyOf": [{"type": "string", "x-mcp-header": "I"}]}}),
                "off the properties path",
            ),
        ] {
            let e = declarations(&tool(props.clone())).unwrap_err();
            assert!(e.to_string().contains(why), "{props}: {e}");
        }
        let root = json!({"name": "t", "inputSchema": {"type": "object", "x-mcp-header": "X"}});
        assert_eq!(declarations(&root).unwrap_err(), DeclarationError::AtRoot);
        let data =
            tool(json!({"a": {"type": "string", "default": {"x-mcp-header": "not a schema"}}}));
        assert_eq!(declarations(&data).unwrap(), vec![]);
    }

    fn check(pairs: &[(&'static str, &str)], d: &[ParamHeader], args: Value) -> Result<(), String> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        let sent = sent_params(&h).map_err(|e| e.to_string())?;
        check_params(&sent, d, Some(&args)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_front_check_wants_each_header_exactly_when_its_argument_is_there() {
        let d = vec![ParamHeader {
            name: "Region".into(),
            path: vec!["region".into()],
        }];
        let args = json!({"region": "us-west1"});
        assert!(check(&[], &d, args.clone())
            .unwrap_err()
            .contains("missing"));
        assert!(check(&[("mcp-param-region", "us-west1")], &d, args.clone()).is_ok());
        assert!(check(&[("Mcp-Param-REGION", "us-west1")], &d, args.clone()).is_ok());
        let e = check(&[("mcp-param-region", "us-west1")], &d, json!({})).unwrap_err();
        assert!(e.contains("absent"), "{e}");
        let e = check(&[("mcp-param-region", "eu-west1")], &d, args.clone()).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        let padded = encode("us-west1 ");
        assert!(check(
            &[("mcp-param-region", &padded)],
            &d,
            json!({"region": "us-west1 "})
        )
        .is_ok());
        let twice = [
            ("mcp-param-region", "us-west1"),
            ("mcp-param-region", "us-west1"),
        ];
        assert!(check(&twice, &d, args.clone())
            .unwrap_err()
            .contains("more than once"));
        // Spellings the encoder never sends plain are refused whatever they decode to.
        for bad in ["=?base64?!!?=", "a\tb", "=?base64?=", " us-west1"] {
            let e = check(&[("mcp-param-other", bad)], &[], json!({})).unwrap_err();
            assert!(e.contains("not valid"), "{bad:?}: {e}");
        }
        let n = vec![ParamHeader {
            name: "N".into(),
            path: vec!["n".into()],
        }];
        assert!(check(&[("mcp-param-n", "42")], &n, json!({"n": 42.0})).is_ok());
        assert!(check(&[("mcp-param-n", "42")], &n, json!({"n": 42})).is_ok());
        for (sent, body) in [
            ("42", json!({"n": 42.5})),
            ("42", json!({"n": "42.0"})),
            ("+42", json!({"n": 42})),
            ("042", json!({"n": 42.0})),
            ("9007199254740992", json!({"n": 9007199254740993u64})),
            ("9007199254740992", json!({"n": 9007199254740993.0})),
        ] {
            assert!(
                check(&[("mcp-param-n", sent)], &n, body.clone()).is_err(),
                "{sent} {body}"
            );
        }
    }

    #[test]
    fn values_that_would_not_survive_a_header_are_base64() {
        assert_eq!(encode("plain-name_1"), "plain-name_1");
        for v in [" lead", "tab\t", "a\r\nX-Evil: 1", "ünï", "=?base64?eA==?="] {
            let enc = encode(v);
            assert!(
                enc.starts_with("=?base64?") && HeaderValue::from_str(&enc).is_ok(),
                "{v}"
            );
            assert_eq!(decode(&enc).as_deref(), Some(v));
        }
        assert_eq!(
            decode("=?base64?eA?=").as_deref(),
            None,
            "non-canonical padding"
        );
    }
}
