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
}

impl Desktop {
    /// `None` without a session bus (no `DBUS_SESSION_BUS_ADDRESS`) or without a
    /// notification server on it.
    pub async fn connect() -> Option<Desktop> {
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS")?;
        let conn = zbus::Connection::session().await.ok()?;
        // Ask the server who it is: no server, no notifications.
        conn.call_method(Some(DEST), PATH, Some(DEST), "GetServerInformation", &())
            .await
            .ok()?;
        Some(Desktop { conn })
    }

    /// Shows one notification; `false` when the server refused or went away.
    pub async fn notify(&mut self, p: &v1::PendingRequest, link: Option<&str>) -> bool {
        let (title, body) = content(p, link);
        let actions: Vec<&str> = Vec::new();
        let hints: HashMap<&str, Value<'_>> = HashMap::new();
        let r = self
            .conn
            .call_method(
                Some(DEST),
                PATH,
                Some(DEST),
                "Notify",
                &(
                    "tcctl",
                    0u32,
                    "dialog-question",
                    title.as_str(),
                    body.as_str(),
                    actions,
                    hints,
                    -1i32,
                ),
            )
            .await;
        r.is_ok()
    }
}

/// The notification's title and body: what waits, and where to approve it. Escaped for
/// the terminal and for the body markup some servers render (`<b>`, `<a href>`), so
/// nothing from the agent's arguments can style or link itself.
pub fn content(p: &v1::PendingRequest, link: Option<&str>) -> (String, String) {
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
    (markup_escape(&title), markup_escape(&body))
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
        let (t, b) = content(&p, Some("http://127.0.0.1:7777/requests/k3x9"));
        assert!(t.contains("w&lt;b&gt;"), "{t}");
        assert!(!b.contains('<') && !b.contains('\u{1b}'), "{b}");
        assert!(b.contains("http://127.0.0.1:7777/requests/k3x9"), "{b}");
        let (_, b) = content(&p, None);
        assert!(b.contains("tcctl approve k3x9"), "{b}");
    }
}
