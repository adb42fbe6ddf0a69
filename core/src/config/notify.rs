//! `[notify]`: where tcd pushes "a request waits" (ntfy topics and signed webhooks), how
//! it retries, how much it queues, and the page link a push carries.

use std::path::PathBuf;

use serde::Deserialize;

use super::findings::Findings;
use super::{ApprovalsConfig, Config};

/// Default pushes kept per target while earlier ones are being sent.
pub const DEFAULT_NOTIFY_QUEUE: usize = 64;
/// Default attempts per push (the first and its retries).
pub const DEFAULT_NOTIFY_ATTEMPTS: u32 = 5;
/// Default wait before the first retry; each later one waits twice as long.
pub const DEFAULT_NOTIFY_BACKOFF_MS: u64 = 1_000;
/// Default cap on the wait between two attempts.
pub const DEFAULT_NOTIFY_BACKOFF_MAX_MS: u64 = 60_000;
/// Default time one attempt may take (connect, send, answer).
pub const DEFAULT_NOTIFY_TIMEOUT_MS: u64 = 10_000;

/// `[notify]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// The page a push links to (`<page_url>/requests/<ID>`); unset: the remote page of
    /// `[approvals] remote` (where a phone reads it), else the loopback page of
    /// `[approvals] listen`.
    pub page_url: Option<String>,
    /// Pushes queued per target; when full, the oldest is dropped (and counted).
    pub queue: usize,
    /// Attempts per push before it is given up (and `tc.push.failed` logged).
    pub attempts: u32,
    /// Wait before the first retry, doubled for each next one up to `backoff_max_ms`.
    pub backoff_ms: u64,
    pub backoff_max_ms: u64,
    /// Time one attempt may take.
    pub timeout_ms: u64,
    /// `[[notify.ntfy]]`
    pub ntfy: Vec<NtfyTarget>,
    /// `[[notify.webhook]]`
    pub webhook: Vec<WebhookTarget>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            page_url: None,
            queue: DEFAULT_NOTIFY_QUEUE,
            attempts: DEFAULT_NOTIFY_ATTEMPTS,
            backoff_ms: DEFAULT_NOTIFY_BACKOFF_MS,
            backoff_max_ms: DEFAULT_NOTIFY_BACKOFF_MAX_MS,
            timeout_ms: DEFAULT_NOTIFY_TIMEOUT_MS,
            ntfy: Vec::new(),
            webhook: Vec::new(),
        }
    }
}

/// `[[notify.ntfy]]`: a topic on an ntfy server (ntfy.sh or self-hosted).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NtfyTarget {
    /// Names the target in logs, events and metrics.
    pub name: String,
    /// The server, e.g. `https://ntfy.sh` (tcd posts to its root, the JSON publish API).
    pub url: String,
    pub topic: String,
    /// A file holding the access token (`tk_…`), sent as `Authorization: Bearer`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// ntfy's priority, 1 (min) to 5 (urgent); unset: the server's default (3).
    #[serde(default)]
    pub priority: Option<u8>,
}

/// `[[notify.webhook]]`: a JSON POST signed with HMAC-SHA256 under a shared secret.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookTarget {
    pub name: String,
    pub url: String,
    /// A file holding the shared secret the signature is keyed with (its first line).
    pub secret_file: PathBuf,
}

impl NotifyConfig {
    /// Whether any target is configured (no targets: tcd starts no push sender).
    pub fn is_on(&self) -> bool {
        !self.ntfy.is_empty() || !self.webhook.is_empty()
    }

    /// The URL of request `id`'s page: under `page_url` when set, else the remote page,
    /// else the loopback page (None when none exists; validation refuses targets then).
    pub fn request_url(&self, approvals: &ApprovalsConfig, id: &str) -> Option<String> {
        let remote = approvals.remote.as_ref().and_then(|r| r.spec().ok());
        match self.page_url.as_deref() {
            Some(base) => Some(format!("{}/requests/{id}", base.trim_end_matches('/'))),
            None if remote.is_some() => remote.map(|r| format!("{}/requests/{id}", r.origin)),
            None => match approvals.listen_addr() {
                Ok(Some(addr)) => Some(ApprovalsConfig::request_url(addr, id)),
                _ => None,
            },
        }
    }
}

/// A target name: short, and safe in a metric label and a log line.
fn name_ok(n: &str) -> bool {
    (1..=32).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// An http(s) URL with no credentials, query or fragment; plain http only to loopback
/// (a token or signed body sent in clear over a network is readable on the way).
fn check_url(url: &str) -> Result<url::Url, &'static str> {
    let u = url::Url::parse(url).map_err(|_| "must be an http:// or https:// URL")?;
    if !matches!(u.scheme(), "http" | "https") || u.host().is_none() {
        return Err("must be an http:// or https:// URL");
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("holds credentials: put a token in token_file or secret_file instead");
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err("must have no query (?…) or fragment (#…)");
    }
    let loopback = match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    };
    if u.scheme() == "http" && !loopback {
        return Err("plain http is allowed to loopback only: use https");
    }
    Ok(u)
}

impl Config {
    /// `[notify]`: sizes, targets, and a page for the links to point at.
    pub(super) fn check_notify(&self, found: &mut Findings) {
        let n = &self.notify;
        let key = |k: &str| format!("notify.{k}");
        for (k, ok, rule) in [
            (
                "queue",
                (1..=10_000).contains(&n.queue),
                "must be 1..=10000",
            ),
            ("attempts", (1..=20).contains(&n.attempts), "must be 1..=20"),
            (
                "backoff_ms",
                (10..=600_000).contains(&n.backoff_ms),
                "must be 10..=600000",
            ),
            (
                "backoff_max_ms",
                (n.backoff_ms..=3_600_000).contains(&n.backoff_max_ms),
                "must be backoff_ms..=3600000",
            ),
            (
                "timeout_ms",
                (100..=120_000).contains(&n.timeout_ms),
                "must be 100..=120000",
            ),
        ] {
            if !ok {
                found.add(key(k), rule);
            }
        }
        if let Some(p) = &n.page_url {
            if let Err(why) = check_url(p) {
                found.add(key("page_url"), why);
            }
        } else if n.is_on() && self.approvals.listen.is_none() && self.approvals.remote.is_none() {
            found.add(
                key("page_url"),
                "a push links to the request's page: set [approvals] listen (the loopback \
                 page), [approvals] remote or page_url",
            );
        }
        check_targets(n, found);
    }
}

/// `[[notify.ntfy]]` and `[[notify.webhook]]`: each target's own keys, names unique over
/// both.
fn check_targets(n: &NotifyConfig, found: &mut Findings) {
    let mut names = std::collections::HashSet::new();
    for (i, t) in n.ntfy.iter().enumerate() {
        let at = format!("notify.ntfy[{i}]");
        check_target(found, &at, &t.name, &t.url, &mut names);
        if let Some(f) = t.token_file.as_ref().filter(|f| !f.is_absolute()) {
            found.add(
                format!("{at}.token_file"),
                format!("{f:?} must be an absolute path"),
            );
        }
        let topic_ok = (1..=64).contains(&t.topic.len())
            && t.topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !topic_ok {
            found.add(format!("{at}.topic"), "must be 1..=64 of A-Z a-z 0-9 - _");
        }
        if t.priority.is_some_and(|p| !(1..=5).contains(&p)) {
            found.add(format!("{at}.priority"), "must be 1..=5");
        }
    }
    for (i, t) in n.webhook.iter().enumerate() {
        let at = format!("notify.webhook[{i}]");
        check_target(found, &at, &t.name, &t.url, &mut names);
        if !t.secret_file.is_absolute() {
            found.add(format!("{at}.secret_file"), "must be an absolute path");
        }
    }
}

/// The rules every target shares: a unique, label-safe name and a usable url.
fn check_target(
    found: &mut Findings,
    at: &str,
    name: &str,
    url: &str,
    names: &mut std::collections::HashSet<String>,
) {
    if !name_ok(name) {
        found.add(format!("{at}.name"), "must be 1..=32 of a-z 0-9 - _");
    } else if !names.insert(name.to_string()) {
        found.add(
            format!("{at}.name"),
            format!("{name:?} names another target too: names must be unique"),
        );
    }
    if let Err(why) = check_url(url) {
        found.add(format!("{at}.url"), why);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::ConfigError;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/t/config.toml"))
    }

    const PAGE: &str = "[approvals]\nlisten = \"127.0.0.1:7777\"\n";
    const NTFY: &str = "[[notify.ntfy]]\nname = \"phone\"\nurl = \"https://ntfy.sh\"\n\
                        topic = \"tc-alerts\"\ntoken_file = \"/etc/tc/ntfy.token\"\n";
    const HOOK: &str = "[[notify.webhook]]\nname = \"hook\"\nurl = \"https://h.example/tc\"\n\
                        secret_file = \"/etc/tc/hook.key\"\n";

    #[test]
    fn targets_parse_with_defaults_and_link_the_loopback_page() {
        let c = parse(&format!("{PAGE}{NTFY}{HOOK}")).unwrap();
        let n = &c.notify;
        assert!(n.is_on());
        assert_eq!(
            (n.queue, n.attempts),
            (DEFAULT_NOTIFY_QUEUE, DEFAULT_NOTIFY_ATTEMPTS)
        );
        assert_eq!(n.ntfy[0].priority, None);
        assert_eq!(
            n.request_url(&c.approvals, "abcdefgh").as_deref(),
            Some("http://localhost:7777/requests/abcdefgh")
        );
        let c = parse(&format!(
            "[notify]\npage_url = \"https://tc.example/\"\n{HOOK}"
        ))
        .unwrap();
        assert_eq!(
            c.notify.request_url(&c.approvals, "abcdefgh").as_deref(),
            Some("https://tc.example/requests/abcdefgh")
        );
        assert!(!parse("").unwrap().notify.is_on(), "off by default");
        // The remote page, when there is one, is where a phone follows the link.
        let c = parse(&format!(
            "{PAGE}remote = {{ listen = \"0.0.0.0:8443\", public_url = \"https://tc.home.arpa:8443\", tls = \"self-signed\" }}\n{HOOK}"
        ))
        .unwrap();
        assert_eq!(
            c.notify.request_url(&c.approvals, "abcdefgh").as_deref(),
            Some("https://tc.home.arpa:8443/requests/abcdefgh")
        );
    }

    #[test]
    fn bad_notify_configs_are_refused_naming_the_key() {
        for (text, key) in [
            (format!("{PAGE}[notify]\ncolour = 1\n"), "colour"),
            (format!("{PAGE}{NTFY}password = \"x\"\n"), "password"),
            (format!("{PAGE}{HOOK}token_file = \"/x\"\n"), "token_file"),
            (NTFY.to_string(), "notify.page_url"),
            (format!("{PAGE}[notify]\nqueue = 0\n"), "notify.queue"),
            (format!("{PAGE}[notify]\nattempts = 0\n"), "notify.attempts"),
            (
                format!("{PAGE}[notify]\nbackoff_ms = 5000\nbackoff_max_ms = 10\n"),
                "notify.backoff_max_ms",
            ),
            (
                format!("[notify]\npage_url = \"ftp://x/\"\n{NTFY}"),
                "notify.page_url",
            ),
            (
                format!(
                    "{PAGE}{}",
                    NTFY.replace("https://ntfy.sh", "http://ntfy.sh")
                ),
                "notify.ntfy[0].url",
            ),
            (
                format!("{PAGE}{}", NTFY.replace("https://", "https://u:p@")),
                "notify.ntfy[0].url",
            ),
            (
                format!("{PAGE}{}", NTFY.replace("tc-alerts", "a/b")),
                "notify.ntfy[0].topic",
            ),
            (
                format!("{PAGE}{NTFY}priority = 9\n"),
                "notify.ntfy[0].priority",
            ),
            (
                format!("{PAGE}{}", NTFY.replace("/etc/tc/ntfy.token", "ntfy.token")),
                "notify.ntfy[0].token_file",
            ),
            (
                format!("{PAGE}{}", HOOK.replace("\"hook\"", "\"Hook!\"")),
                "notify.webhook[0].name",
            ),
            (
                format!("{PAGE}{NTFY}{}", HOOK.replace("\"hook\"", "\"phone\"")),
                "notify.webhook[0].name",
            ),
            (
                format!("{PAGE}{}", HOOK.replace("/etc/tc/hook.key", "hook.key")),
                "notify.webhook[0].secret_file",
            ),
            (
                format!("{PAGE}[[notify.webhook]]\nname = \"h\"\nurl = \"https://h/\"\n"),
                "secret_file",
            ),
        ] {
            let e = parse(&text).expect_err(&text).to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn plain_http_is_fine_to_loopback() {
        let text = format!(
            "{PAGE}{}",
            HOOK.replace("https://h.example", "http://127.0.0.1:9")
        );
        parse(&text).unwrap();
    }
}
