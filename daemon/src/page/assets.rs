//! The page's assets, embedded in the binary (nothing is fetched from the network): the
//! HTML shell, its one script and its one stylesheet.

pub const INDEX_HTML: &str = include_str!("assets/index.html");
/// What a visitor without a session sees: how to open the page, nothing else.
pub const CLOSED_HTML: &str = include_str!("assets/closed.html");
/// What a spent, expired or forged `/open` link shows.
pub const SPENT_HTML: &str = include_str!("assets/spent.html");
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
        for shell in [CLOSED_HTML, SPENT_HTML] {
            assert!(!shell.contains("<script"), "the closed shells run nothing");
            assert!(shell.contains("tcctl page"));
        }
        for a in [INDEX_HTML, CLOSED_HTML, SPENT_HTML, PAGE_JS, PAGE_CSS] {
            assert!(
                !a.contains("https://") && !a.contains("//cdn"),
                "remote reference"
            );
        }
        assert!(!PAGE_JS.contains("innerHTML"), "text only, never HTML");
        assert!(index("ab12").contains("content=\"ab12\""));
    }
}
