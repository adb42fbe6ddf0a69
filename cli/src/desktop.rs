//! Desktop notifications for `tcctl watch`: org.freedesktop.Notifications on the user's
//! session bus (zbus, no libdbus). A nudge only: no token, no action, nothing to click.

use std::collections::HashMap;

use tc_core::display::{escape, reescape};
use tc_proto::v1;
use zbus::zvariant::Value;

const DEST: &str = "org.freedesktop.Notifications";
const PATH: &str = "/org/freedesktop/Notifications";

/// A connection to the session bus's notification server.
pub struct Desktop {
    conn: zbus::Connection,
    /// The server renders body markup (`body-markup` capability): the body is escaped.
    markup: bool,
}

impl Desktop {
    /// The session bus's notification server, or why there is none (said to the user:
    /// no bus address, a bus that cannot be reached, no server on it).
    pub async fn connect() -> Result<Desktop, String> {
        if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none() {
            return Err("DBUS_SESSION_BUS_ADDRESS is not set".into());
        }
        let conn = zbus::Connection::session()
            .await
            .map_err(|e| format!("cannot reach the session bus: {}", escape(&e.to_string())))?;
        // Ask the server who it is: no server, no notifications.
        conn.call_method(Some(DEST), PATH, Some(DEST), "GetServerInformation", &())
            .await
            .map_err(|e| {
                format!(
                    "no notification server on the session bus: {}",
                    escape(&e.to_string())
                )
            })?;
        let caps: Vec<String> = conn
            .call_method(Some(DEST), PATH, Some(DEST), "GetCapabilities", &())
            .await
            .ok()
            .and_then(|m| m.body().deserialize().ok())
            .unwrap_or_default();
        let markup = caps.iter().any(|c| c == "body-markup");
        Ok(Desktop { conn, markup })
    }

    /// Shows one notification; `Err` (why, escaped) when the server refused or went away.
    pub async fn notify(
        &mut self,
        p: &v1::PendingRequest,
        link: Option<&str>,
    ) -> Result<(), String> {
        let (title, body) = content(p, link, self.markup);
        self.show(&title, &body).await
    }

    /// Shows a notice that is not a request (a passkey registered), from escaped text.
    pub async fn notice(&mut self, title: &str, body: &str) -> Result<(), String> {
        let body = if self.markup {
            markup_escape(body)
        } else {
            body.to_string()
        };
        self.show(title, &body).await
    }

    async fn show(&mut self, title: &str, body: &str) -> Result<(), String> {
        let actions: Vec<&str> = Vec::new();
        let hints: HashMap<&str, Value<'_>> = HashMap::new();
        self.conn
            .call_method(
                Some(DEST),
                PATH,
                Some(DEST),
                "Notify",
                &(
                    "tcctl",
                    0u32,
                    "dialog-question",
                    title,
                    body,
                    actions,
                    hints,
                    -1i32,
                ),
            )
            .await
            .map(drop)
            .map_err(|e| escape(&e.to_string()).into_owned())
    }
}

/// The notification's title and body: what waits, and where to approve it. Escaped for
/// the terminal, so nothing from the agent's arguments can move or hide text. The title
/// is plain text by the specification; the body is markup-escaped only for a server that
/// renders markup (`markup`), where the agent's tags must not style or link themselves —
/// a server without it shows the body as it is, and escaping would show through.
pub fn content(p: &v1::PendingRequest, link: Option<&str>, markup: bool) -> (String, String) {
    let b = p.binding.clone().unwrap_or_default();
    let title = format!(
        "tc: {} on {} waits for you",
        escape(&b.tool),
        escape(&b.vault)
    );
    let mut body = format!(
        "{}\nRequest {}",
        reescape(&p.summary),
        escape(&p.request_id)
    );
    match link {
        Some(l) => body.push_str(&format!("\nReview it at {l}")),
        None => body.push_str(&format!(
            "\nReview it with: tcctl approve {}",
            escape(&p.request_id)
        )),
    }
    if markup {
        body = markup_escape(&body);
    }
    (title, body)
}

fn markup_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_inert() {
        let p = v1::PendingRequest {
            request_id: "k3x9".into(),
            summary: "write_file {content: \"<a href='x'>click</a>\u{1b}[2J\"}".into(),
            binding: Some(v1::Binding {
                vault: "v".into(),
                tool: "w<b>".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let link = Some("http://127.0.0.1:7777/requests/k3x9");
        let (t, b) = content(&p, link, true);
        assert!(t.contains("w<b>"), "the title is plain text: {t}");
        assert!(!b.contains('<') && !b.contains('\u{1b}'), "{b}");
        assert!(b.contains("&lt;a href='x'&gt;click&lt;/a&gt;"), "{b}");
        assert!(b.contains("http://127.0.0.1:7777/requests/k3x9"), "{b}");
        let (_, b) = content(&p, link, false);
        assert!(b.contains("<a href='x'>click</a>"), "shown as it is: {b}");
        assert!(!b.contains("&lt;") && !b.contains('\u{1b}'), "{b}");
        let (_, b) = content(&p, None, true);
        assert!(b.contains("tcctl approve k3x9"), "{b}");
    }
}
