//! RFC 9728 Protected Resource Metadata: the document, where it is served
//! (`/.well-known/oauth-protected-resource` + the resource's path) and its URL for the
//! `resource_metadata` parameter of a `WWW-Authenticate` challenge.

use serde_json::json;

/// The well-known prefix (RFC 9728 3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// This endpoint as an OAuth protected resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedResource {
    /// The resource identifier: the endpoint's canonical URL (`https://host/mcp`).
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
}

impl ProtectedResource {
    /// The metadata document (served as `application/json`).
    pub fn document(&self) -> serde_json::Value {
        let mut doc = json!({
            "resource": self.resource,
            "bearer_methods_supported": ["header"],
        });
        if !self.authorization_servers.is_empty() {
            doc["authorization_servers"] = json!(self.authorization_servers);
        }
        if !self.scopes_supported.is_empty() {
            doc["scopes_supported"] = json!(self.scopes_supported);
        }
        doc
    }

    /// The request paths the document is served at: the path-suffixed form first
    /// (RFC 9728 3.1), then the bare one (where MCP clients look next).
    pub fn paths(&self) -> Vec<String> {
        well_known_paths(&self.resource)
    }

    /// The document's absolute URL (the path-suffixed form).
    pub fn url(&self) -> String {
        metadata_url(&self.resource)
    }
}

/// `/.well-known/oauth-protected-resource{path}`, and the bare prefix when the resource
/// has a path. A resource that is not a URL gets the bare prefix only.
pub fn well_known_paths(resource: &str) -> Vec<String> {
    let path = url::Url::parse(resource)
        .map(|u| u.path().trim_end_matches('/').to_string())
        .unwrap_or_default();
    if path.is_empty() {
        vec![WELL_KNOWN.to_string()]
    } else {
        vec![format!("{WELL_KNOWN}{path}"), WELL_KNOWN.to_string()]
    }
}

/// The metadata URL for `resource`: its origin, the well-known prefix, its path.
pub fn metadata_url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(u) => {
            let origin = u.origin().ascii_serialization();
            format!("{origin}{}", well_known_paths(resource)[0])
        }
        Err(_) => WELL_KNOWN.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_insert_the_well_known_prefix_before_the_path() {
        let r = ProtectedResource {
            resource: "https://tc.example:8443/mcp".into(),
            authorization_servers: vec!["https://id.example".into()],
            scopes_supported: vec!["mcp:tools".into()],
        };
        assert_eq!(
            r.paths(),
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            r.url(),
            "https://tc.example:8443/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            r.document(),
            json!({
                "resource": "https://tc.example:8443/mcp",
                "authorization_servers": ["https://id.example"],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["mcp:tools"],
            })
        );
        assert_eq!(well_known_paths("http://127.0.0.1:9/"), [WELL_KNOWN]);
        assert_eq!(
            metadata_url("http://127.0.0.1:9"),
            "http://127.0.0.1:9/.well-known/oauth-protected-resource"
        );
    }
}
