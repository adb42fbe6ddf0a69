//! The page's assets, embedded in the binary (nothing is fetched from the network): the
//! HTML shell, its one script and its one stylesheet.

pub const INDEX_HTML: &str = include_str!("assets/index.html");
/// The shell of a page with nothing in it but a message (no script, no data).
const CLOSED_HTML: &str = include_str!("assets/closed.html");

const NO_SESSION: &str = "    <h2>Open this page from your terminal</h2>
    <p>This page shows your requests only to you. Run</p>
    <pre><code>tcctl page</code></pre>
    <p>(or <code>tcctl page --request ID</code>) and open the link it prints. A link opens the page once, within a minute, for the user who ran it.</p>";

const SPENT_LINK: &str = "    <h2>This link is spent, expired or not from tc</h2>
    <p>A link from <code>tcctl page</code> opens the page once, within a minute, for the user who ran it. Run</p>
    <pre><code>tcctl page</code></pre>
    <p>again and open the new link.</p>";

/// What a visitor without a session sees: how to open the page, nothing else.
pub fn closed() -> String {
    CLOSED_HTML.replace("{{MESSAGE}}", NO_SESSION)
}

/// What a spent, expired, forged or another user's `/open` link shows.
pub fn spent() -> String {
    CLOSED_HTML.replace("{{MESSAGE}}", SPENT_LINK)
}
/// The remote page's sign-in and registration shell (`remote.rs`).
const REMOTE_HTML: &str = include_str!("assets/remote.html");
pub const REMOTE_JS: &str = include_str!("assets/remote.js");

const SPENT_REMOTE_LINK: &str = "    <h2>This link is spent, expired or not from tc</h2>
    <p>A link from <code>tcctl page --remote</code> opens this page once, within five minutes, to register a passkey. Run it again on your computer, or sign in if you have a passkey here:</p>
    <p><a href=\"/\">sign in</a></p>";

/// The remote page without a signed-in session: `view` is `signin` (nothing but the
/// sign-in) or `register` (a registration link's session, with its CSRF token).
pub fn remote(view: &str, csrf: &str) -> String {
    debug_assert!(csrf.bytes().all(|b| b.is_ascii_hexdigit()));
    REMOTE_HTML.replace("{{CSRF}}", csrf).replace(
        "{{VIEW}}",
        if view == "register" {
            "register"
        } else {
            "signin"
        },
    )
}

/// What a spent, expired or forged remote `/open` link shows.
pub fn remote_spent() -> String {
    CLOSED_HTML.replace("{{MESSAGE}}", SPENT_REMOTE_LINK)
}

pub const PAGE_JS: &str = include_str!("assets/page.js");
pub const PAGE_CSS: &str = include_str!("assets/page.css");

/// The shell with this page load's CSRF token (64 hex digits: nothing to escape).
pub fn index(csrf: &str) -> String {
    debug_assert!(csrf.bytes().all(|b| b.is_ascii_hexdigit()));
    INDEX_HTML.replace("{{CSRF}}", csrf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_inline_script_and_nothing_remote() {
        assert!(!INDEX_HTML.contains("<script>"), "inline script");
        let handler = INDEX_HTML.split(" on").skip(1).any(|rest| {
            rest.split('=')
                .next()
                .is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
        });
        assert!(!handler, "inline event handler");
        assert!(!INDEX_HTML.contains("style="), "inline style");
        for shell in [closed(), spent()] {
            assert!(!shell.contains("<script"), "the closed shells run nothing");
            assert!(shell.contains("tcctl page") && !shell.contains("{{"));
        }
        for shell in [remote("signin", ""), remote("register", "ab12")] {
            assert!(!shell.contains("<script>") && !shell.contains("style="));
            assert!(!shell.contains("{{") && !shell.contains("tc-requests"));
        }
        assert!(!remote_spent().contains("<script"));
        assert!(!REMOTE_JS.contains("innerHTML"), "text only, never HTML");
        for a in [
            INDEX_HTML,
            CLOSED_HTML,
            REMOTE_HTML,
            PAGE_JS,
            REMOTE_JS,
            PAGE_CSS,
        ] {
            assert!(
                !a.contains("https://") && !a.contains("//cdn"),
                "remote reference"
            );
        }
        assert!(!PAGE_JS.contains("innerHTML"), "text only, never HTML");
        assert!(index("ab12").contains("content=\"ab12\""));
    }
}
