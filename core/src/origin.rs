//! Which `Host` and `Origin` values a local HTTP listener answers to: the one rule against
//! DNS rebinding and cross-site requests, for tcd's approval page and tc-shim's HTTP front.

use std::net::SocketAddr;

/// The `Host` values a listener answers to and the `Origin`s it accepts.
#[derive(Debug, Clone)]
pub struct HostGuard {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl HostGuard {
    /// The bind's own name (for a loopback bind also `localhost`, `127.0.0.1` and `[::1]`,
    /// each with the port) plus `extra_hosts`; origins are those names over http and
    /// https plus `extra_origins`. A rebinding name like `evil.example` is never one.
    pub fn new(addr: SocketAddr, extra_hosts: &[String], extra_origins: &[String]) -> HostGuard {
        let port = addr.port();
        let mut hosts = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            for h in ["localhost", "127.0.0.1", "[::1]"] {
                hosts.push(format!("{h}:{port}"));
            }
        }
        hosts.extend(extra_hosts.iter().cloned());
        hosts.sort();
        hosts.dedup();
        let mut origins: Vec<String> = hosts
            .iter()
            .flat_map(|h| [format!("http://{h}"), format!("https://{h}")])
            .collect();
        origins.extend(extra_origins.iter().cloned());
        HostGuard { hosts, origins }
    }

    /// Exactly `host` and `origin`, nothing else (the remote page: its public name only,
    /// never the address it binds).
    pub fn exact(host: &str, origin: &str) -> HostGuard {
        HostGuard {
            hosts: vec![host.to_string()],
            origins: vec![origin.to_string()],
        }
    }

    /// Whether `host` (the `Host` header, if sent and readable) names this listener.
    pub fn host_ok(&self, host: Option<&str>) -> bool {
        host.is_some_and(|h| self.hosts.iter().any(|x| x.eq_ignore_ascii_case(h)))
    }

    /// Whether `origin` (the `Origin` header; `Some(None)` when unreadable) is accepted;
    /// an absent one is, unless `required`.
    pub fn origin_ok(&self, origin: Option<Option<&str>>, required: bool) -> bool {
        match origin {
            None => !required,
            Some(Some(o)) => self.origins.iter().any(|x| x.eq_ignore_ascii_case(o)),
            Some(None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_bind_answers_to_its_local_names_with_its_port_only() {
        let g = HostGuard::new("127.0.0.1:7777".parse().unwrap(), &[], &[]);
        for ok in [
            "localhost:7777",
            "127.0.0.1:7777",
            "[::1]:7777",
            "LOCALHOST:7777",
        ] {
            assert!(g.host_ok(Some(ok)), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7777",
            "localhost:7778",
            "localhost",
        ] {
            assert!(!g.host_ok(Some(bad)), "{bad}");
        }
        assert!(!g.host_ok(None));
        assert!(g.origin_ok(Some(Some("http://localhost:7777")), true));
        assert!(!g.origin_ok(Some(Some("http://evil.example")), false));
        assert!(!g.origin_ok(Some(Some("null")), false));
        assert!(!g.origin_ok(Some(None), false));
        assert!(g.origin_ok(None, false));
        assert!(!g.origin_ok(None, true));
    }

    #[test]
    fn configured_names_are_added_not_substituted() {
        let g = HostGuard::new(
            "0.0.0.0:443".parse().unwrap(),
            &["mcp.example.com".into()],
            &["https://app.example.com".into()],
        );
        assert!(g.host_ok(Some("mcp.example.com")));
        assert!(g.origin_ok(Some(Some("https://app.example.com")), false));
        assert!(!g.host_ok(Some("localhost:443")));
    }
}
