//! ntfy targets: one JSON publish (`POST <server>/`) per push, with a `view` action that
//! opens the request's page; never an `http` action (it would approve without a sign-in).

use serde_json::json;

use super::{Attempt, Notice};

/// An ntfy topic, with its token (read from `token_file` at start) if it has one.
pub struct Ntfy {
    /// The server root (`https://ntfy.sh`): the JSON API takes the topic in the body.
    pub url: String,
    pub topic: String,
    pub token: Option<String>,
    pub priority: Option<u8>,
}

impl std::fmt::Debug for Ntfy {
    /// Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ntfy")
            .field("url", &self.url)
            .field("topic", &self.topic)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

/// A name the raiser chose, as the phone shows it: escaped like every such text
/// (`tc_core::display`), and never a link the app would make clickable (`://` is cut by
/// a marker), so the only link in a push is the page's.
fn shown(s: &str) -> String {
    tc_core::display::escape(s).replace("://", "⟨U+003A⟩//")
}

impl Ntfy {
    /// The publish message: who asks for what, and the page to answer on. The `view`
    /// action only opens the page; the approval happens there, signed in.
    pub fn body(&self, n: &Notice) -> serde_json::Value {
        let (tool, vault, caller) = (shown(&n.tool), shown(&n.vault), shown(&n.caller));
        let mut m = json!({
            "topic": self.topic,
            "title": format!("tc: {tool} on {vault} waits for you"),
            "message": format!(
                "Request {} from {caller}: {tool} on vault {vault}. Open the page to see the \
                 call and answer it.",
                n.request_id
            ),
            "tags": ["lock"],
            "click": n.link,
            "actions": [{
                "action": "view",
                "label": "Open request",
                "url": n.link,
                "clear": true,
            }],
        });
        if let Some(p) = self.priority {
            m["priority"] = json!(p);
        }
        m
    }

    /// One attempt at publishing `n`.
    pub async fn send(&self, client: &reqwest::Client, n: &Notice) -> Attempt {
        let body = serde_json::to_vec(&self.body(n)).unwrap_or_default();
        let mut req = client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        Attempt::of(req.send().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_links_the_page_and_holds_only_a_view_action() {
        let t = Ntfy {
            url: "https://ntfy.example".into(),
            topic: "tc".into(),
            token: Some("tk_secret".into()),
            priority: Some(4),
        };
        let n = Notice::sample();
        let m = t.body(&n);
        assert_eq!(m["topic"], "tc");
        assert_eq!(m["priority"], 4);
        let actions = m["actions"].as_array().unwrap();
        assert_eq!(actions.len(), 1);
        assert_eq!(actions[0]["action"], "view");
        assert_eq!(actions[0]["url"], n.link.as_str());
        let text = m.to_string();
        for s in [&n.request_id, &n.tool, &n.vault, &n.caller] {
            assert!(text.contains(s.as_str()), "{s}: {text}");
        }
        assert!(
            !text.contains("tk_secret"),
            "the token is a header, not content"
        );
        assert!(!format!("{t:?}").contains("tk_secret"));
        let hostile = Notice {
            caller: "see https://evil.example/ok\u{1b}[2J".into(),
            ..Notice::sample()
        };
        let msg = t.body(&hostile)["message"].as_str().unwrap().to_string();
        assert!(
            !msg.contains("https://evil") && !msg.contains('\u{1b}'),
            "{msg}"
        );
        assert!(msg.contains("evil.example/ok⟨U+001B⟩[2J"), "{msg}");
    }
}
