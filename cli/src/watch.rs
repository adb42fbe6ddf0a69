//! Knowing that something waits: `tcctl pending --watch` (one JSON line per new request)
//! and `tcctl watch` (a desktop notification, else a live list), following the audit log.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use tc_core::codes::events;
use tc_core::display::{escape, json_safe, reescape};
use tc_proto::v1::{self, confirm_client::ConfirmClient};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::client::{self, status_error, Target};
use crate::output::rfc3339;
use crate::{exit, CliError};

/// Follows tcd for newly raised requests. The event stream is opened before the first
/// `ListPending`, so a request raised between the two is seen in the stream; every id is
/// yielded at most once.
pub struct Follower {
    client: ConfirmClient<Channel>,
    socket: Target,
    vault: String,
    stream: Streaming<v1::Event>,
    /// The latest `ListPending` answer, by request id.
    known: HashMap<String, v1::PendingRequest>,
    /// Ids already yielded or judged not pending.
    done: HashSet<String>,
    /// Ids yielded: only these get an end line.
    yielded: HashSet<String>,
    /// Pending at start, oldest first, not yet yielded.
    queue: Vec<v1::PendingRequest>,
    ttl_ms: i64,
    /// When following began: passkey events before it are history, not news.
    started_ms: i64,
}

/// What the follower saw.
pub enum Seen {
    Raised(Box<v1::PendingRequest>),
    /// A request already yielded was approved, declined or expired (`kind`, `id`).
    Ended(String, String),
    /// Since the follower started, a passkey was registered, confirmed or removed, or a
    /// grant was given, revoked or ended: a title and the line that says so (escaped).
    Notice(&'static str, String),
}

impl Follower {
    pub async fn start(socket: &Target, vault: Option<String>) -> Result<Follower, CliError> {
        let mut d = client::connect(socket).await?;
        let err = |s: tonic::Status| status_error(&socket.path, &s);
        let ttl_ms = i64::from(
            d.client
                .status(v1::StatusRequest {})
                .await
                .map_err(err)?
                .into_inner()
                .elicit_ttl_seconds,
        ) * 1000;
        let stream = d
            .client
            .list_events(v1::ListEventsRequest {
                after_id: 0,
                limit: 0,
                follow: true,
            })
            .await
            .map_err(err)?
            .into_inner();
        let mut f = Follower {
            client: d.client,
            socket: socket.clone(),
            vault: vault.unwrap_or_default(),
            stream,
            known: HashMap::new(),
            done: HashSet::new(),
            yielded: HashSet::new(),
            queue: Vec::new(),
            ttl_ms,
            started_ms: now_ms(),
        };
        f.refresh().await?;
        let mut waiting: Vec<_> = f
            .known
            .values()
            .filter(|p| p.status == "pending")
            .cloned()
            .collect();
        waiting.sort_by_key(|p| std::cmp::Reverse(p.raised_at_ms)); // popped oldest first
        f.queue = waiting;
        Ok(f)
    }

    async fn refresh(&mut self) -> Result<(), CliError> {
        let reqs = self
            .client
            .list_pending(v1::ListPendingRequest {
                vault: self.vault.clone(),
            })
            .await
            .map_err(|s| status_error(&self.socket.path, &s))?
            .into_inner()
            .requests;
        self.known = reqs
            .into_iter()
            .map(|p| (p.request_id.clone(), p))
            .collect();
        Ok(())
    }

    /// The next new request (or the end of one already yielded); `None` when tcd closed
    /// the stream (it stopped).
    pub async fn next(&mut self) -> Result<Option<Seen>, CliError> {
        loop {
            if let Some(p) = self.queue.pop() {
                if self.done.insert(p.request_id.clone()) {
                    self.yielded.insert(p.request_id.clone());
                    return Ok(Some(Seen::Raised(Box::new(p))));
                }
                continue;
            }
            let Some(item) = self.stream.next().await else {
                return Ok(None);
            };
            let e = item.map_err(|s| status_error(&self.socket.path, &s))?;
            if !self.vault.is_empty() && e.vault != self.vault {
                continue;
            }
            let detail: serde_json::Value =
                serde_json::from_str(&e.detail_json).unwrap_or_default();
            if e.at_ms >= self.started_ms {
                if let Some(line) = passkey_line(&e.kind, &detail) {
                    return Ok(Some(Seen::Notice("tc: a passkey changed", line)));
                }
                if let Some(line) = grant_line(&e, &detail) {
                    return Ok(Some(Seen::Notice("tc: a grant changed", line)));
                }
            }
            let Some(id) = detail.get("request_id").and_then(|v| v.as_str()) else {
                continue;
            };
            match e.kind.as_str() {
                events::REQUESTED => {
                    if let Some(p) = self.judge(id, e.at_ms).await? {
                        self.yielded.insert(p.request_id.clone());
                        return Ok(Some(Seen::Raised(Box::new(p))));
                    }
                }
                events::APPROVED | events::DECLINED | events::EXPIRED
                    if self.yielded.contains(id) =>
                {
                    return Ok(Some(Seen::Ended(e.kind.clone(), id.to_string())));
                }
                _ => {}
            }
        }
    }

    /// A request event: the request if it is new and still pending.
    async fn judge(
        &mut self,
        id: &str,
        at_ms: i64,
    ) -> Result<Option<v1::PendingRequest>, CliError> {
        if self.done.contains(id) {
            return Ok(None);
        }
        // Older than the TTL (the replayed log): expired, whatever else is true.
        if at_ms + self.ttl_ms < now_ms() {
            return Ok(None);
        }
        if !self.known.contains_key(id) {
            self.refresh().await?;
        }
        self.done.insert(id.to_string());
        Ok(self
            .known
            .get(id)
            .filter(|p| p.status == "pending")
            .cloned())
    }
}

/// What `tcctl watch` says of a grant given, revoked or ended; `None` for other kinds
/// (each use is in `tcctl events`, not a notification).
pub fn grant_line(e: &v1::Event, d: &serde_json::Value) -> Option<String> {
    let s = |k: &str| d.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
    let what = match e.kind.as_str() {
        events::GRANT_GIVEN => {
            let until = d.get("expires_at_ms").and_then(|v| v.as_i64()).unwrap_or(0);
            let uses = match d.get("uses").and_then(|v| v.as_i64()) {
                Some(n) => format!(", {n} use(s)"),
                None => String::new(),
            };
            format!(
                "given: {} until {}{uses}; tcctl revoke {} ends it",
                escape(&s("scope")),
                rfc3339(until),
                escape(&s("grant_id"))
            )
        }
        events::GRANT_REVOKED => "revoked".to_string(),
        events::GRANT_ENDED => format!("ended ({})", escape(&s("why"))),
        _ => return None,
    };
    Some(format!(
        "grant {} for {} in {} by {} {what}",
        escape(&s("grant_id")),
        escape(&e.tool),
        escape(&e.vault),
        escape(&e.caller)
    ))
}

/// What `tcctl watch` says of a passkey event (a registration the human did not make is
/// how an agent with a leaked code would show itself); `None` for other kinds.
pub fn passkey_line(kind: &str, d: &serde_json::Value) -> Option<String> {
    let what = match kind {
        events::PASSKEY_ADDED => "registered on the page",
        events::PASSKEY_CONFIRMED => "confirmed: it now approves on the page",
        events::PASSKEY_REMOVED => "removed",
        _ => return None,
    };
    let cred = d.get("credential").and_then(|v| v.as_str()).unwrap_or("?");
    let short = &cred[..cred.len().min(16)];
    let name = d.get("name").and_then(|v| v.as_str()).unwrap_or("");
    let mut line = format!(
        "passkey {} {}{what}",
        escape(short),
        if name.is_empty() {
            String::new()
        } else {
            format!("({}) ", escape(name))
        }
    );
    if kind == events::PASSKEY_ADDED {
        line.push_str(&format!(
            "; if that was not you: tcctl passkey remove {}",
            escape(short)
        ));
    }
    Some(line)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The approval page's link for request `id`, when `[approvals] listen` is set.
pub fn page_link(listen: Option<&str>, id: &str) -> Option<String> {
    let addr: std::net::SocketAddr = listen?.trim().parse().ok()?;
    let safe = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (safe && !id.is_empty()).then(|| format!("http://{addr}/requests/{id}"))
}

/// The JSON line of `tcctl pending --watch`.
pub fn json_line(p: &v1::PendingRequest, link: Option<&str>) -> String {
    let b = p.binding.clone().unwrap_or_default();
    let mut v = serde_json::json!({
        "id": p.request_id, "vault": b.vault, "tool": b.tool, "caller": b.caller,
        "summary": p.summary, "raised_at_ms": p.raised_at_ms, "expires_at_ms": p.expires_at_ms,
        "expires": rfc3339(p.expires_at_ms),
    });
    if let Some(l) = link {
        v["url"] = serde_json::json!(l);
    }
    json_safe(&v.to_string()).into_owned()
}

/// The terminal line of `tcctl watch` for a new request.
pub fn text_line(p: &v1::PendingRequest, link: Option<&str>) -> String {
    let b = p.binding.clone().unwrap_or_default();
    format!(
        "[{id}] {tool} on {vault} · caller {caller} · expires {exp}\n  {summary}\n  approve: tcctl approve {id} · decline: tcctl decline {id}{page}",
        id = escape(&p.request_id),
        tool = escape(&b.tool),
        vault = escape(&b.vault),
        caller = escape(&b.caller),
        exp = rfc3339(p.expires_at_ms),
        summary = reescape(&p.summary),
        page = link.map(|l| format!(" · page: {l}")).unwrap_or_default(),
    )
}

/// Writes one line to stdout; `false` when the reader went away.
fn out(line: &str) -> bool {
    let mut o = std::io::stdout().lock();
    writeln!(o, "{line}").and_then(|()| o.flush()).is_ok()
}

/// `tcctl pending --watch`: the requests waiting now, then each new one, as JSON lines.
pub async fn pending_watch(
    socket: Target,
    vault: Option<String>,
    listen: Option<String>,
) -> Result<(), CliError> {
    let mut f = Follower::start(&socket, vault).await?;
    while let Some(seen) = f.next().await? {
        if let Seen::Notice(_, line) = seen {
            eprintln!("tcctl: {line}");
        } else if let Seen::Raised(p) = seen {
            let link = page_link(listen.as_deref(), &p.request_id);
            if !out(&json_line(&p, link.as_deref())) {
                return Ok(());
            }
        }
    }
    Err(stopped(&socket))
}

/// `tcctl watch`: a desktop notification per new request, or (no session bus, or
/// `--terminal`) a live list on the terminal.
pub async fn watch(socket: Target, terminal: bool, listen: Option<String>) -> Result<(), CliError> {
    let mut f = Follower::start(&socket, None).await?;
    let mut desktop = if terminal {
        None
    } else {
        match crate::desktop::Desktop::connect().await {
            Ok(d) => Some(d),
            Err(why) => {
                eprintln!(
                    "tcctl watch: no desktop notifications ({why}); listing requests here as they arrive"
                );
                None
            }
        }
    };
    if desktop.is_some() {
        eprintln!("tcctl watch: desktop notifications on; waiting for requests");
    } else if terminal {
        eprintln!("tcctl watch: listing requests here as they arrive");
    }
    while let Some(seen) = f.next().await? {
        match seen {
            Seen::Raised(p) => {
                let link = page_link(listen.as_deref(), &p.request_id);
                if let Some(d) = desktop.as_mut() {
                    match d.notify(&p, link.as_deref()).await {
                        Ok(()) => continue,
                        Err(why) => {
                            eprintln!("tcctl watch: the desktop notification failed ({why}); listing here");
                            desktop = None;
                        }
                    }
                }
                if !out(&text_line(&p, link.as_deref())) {
                    return Ok(());
                }
            }
            Seen::Ended(kind, id) if desktop.is_none() => {
                let what = kind.rsplit('.').next().unwrap_or("ended");
                if !out(&format!("[{}] {what}", escape(&id))) {
                    return Ok(());
                }
            }
            Seen::Ended(..) => {}
            Seen::Notice(title, line) => {
                if let Some(d) = desktop.as_mut() {
                    if d.notice(title, &line).await.is_ok() {
                        continue;
                    }
                }
                if !out(&line) {
                    return Ok(());
                }
            }
        }
    }
    Err(stopped(&socket))
}

fn stopped(socket: &Target) -> CliError {
    CliError::new(
        exit::UNAVAILABLE,
        format!(
            "tcd at {} closed the event stream (it stopped)",
            socket.path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links() {
        assert_eq!(
            page_link(Some("127.0.0.1:7777"), "k3x9").as_deref(),
            Some("http://127.0.0.1:7777/requests/k3x9")
        );
        assert_eq!(page_link(None, "k3x9"), None);
        assert_eq!(page_link(Some("127.0.0.1:7777"), "a/b"), None);
        assert_eq!(page_link(Some("nowhere"), "k3x9"), None);
    }

    #[test]
    fn passkey_events_are_announced_escaped() {
        let d = serde_json::json!({"credential": "0123456789abcdef0123", "name": "k\u{1b}[2J"});
        let l = passkey_line(events::PASSKEY_ADDED, &d).unwrap();
        assert!(l.starts_with("passkey 0123456789abcdef (k"), "{l}");
        assert!(l.contains("tcctl passkey remove 0123456789abcdef"), "{l}");
        assert!(!l.contains('\u{1b}'), "{l}");
        assert_eq!(passkey_line(events::REQUESTED, &d), None);
    }

    #[test]
    fn grant_events_are_announced_escaped_and_uses_are_not() {
        let e = |kind: &str| v1::Event {
            kind: kind.into(),
            tool: "write_file".into(),
            vault: "fs".into(),
            caller: "ali\u{1b}[2Jce".into(),
            ..Default::default()
        };
        let d = serde_json::json!({"grant_id": "g-2345678923", "scope": "path under notes/**",
            "expires_at_ms": 0, "uses": 3, "why": "expired"});
        let given = grant_line(&e(events::GRANT_GIVEN), &d).unwrap();
        assert!(
            given.contains("g-2345678923") && given.contains("notes/**"),
            "{given}"
        );
        assert!(
            given.contains("3 use(s)") && given.contains("tcctl revoke"),
            "{given}"
        );
        assert!(!given.contains('\u{1b}'), "{given}");
        let ended = grant_line(&e(events::GRANT_ENDED), &d).unwrap();
        assert!(ended.contains("ended (expired)"), "{ended}");
        assert!(grant_line(&e(events::GRANT_USED), &d).is_none());
    }

    #[test]
    fn lines_are_escaped() {
        let p = v1::PendingRequest {
            request_id: "k3x9".into(),
            summary: "write_file {path: \"a\u{1b}[2J\"}".into(),
            binding: Some(v1::Binding {
                vault: "v".into(),
                tool: "t\u{202e}".into(),
                caller: "stdio".into(),
                args_hash: "h".into(),
            }),
            expires_at_ms: 0,
            ..Default::default()
        };
        let j = json_line(&p, Some("http://127.0.0.1:1/requests/k3x9"));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["id"], "k3x9");
        assert_eq!(v["url"], "http://127.0.0.1:1/requests/k3x9");
        assert!(!j.contains('\u{1b}') && !j.contains('\u{202e}'), "{j}");
        let t = text_line(&p, None);
        assert!(!t.contains('\u{1b}') && !t.contains('\u{202e}'), "{t}");
        assert!(t.contains("tcctl approve k3x9"), "{t}");
    }
}
