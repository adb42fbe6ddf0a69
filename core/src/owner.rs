//! Whose a confirmation is in guarded mode: tcd appends the uid of the human whose
//! session sent the binding to its caller (`stdio` → `stdio (uid 1001)`), once, at the
//! socket, so every table keyed by the caller (raised requests, tokens, states, cursors,
//! rate limits) is per human with no second key that one query could forget.
//!
//! The suffix is parsed from the right and the uid is digits only, so two (caller, uid)
//! pairs never give the same text, whatever a caller's name contains.

/// `caller` as the ledger binds it for `uid`.
pub fn qualify(caller: &str, uid: u32) -> String {
    format!("{caller}{}", suffix(uid))
}

/// The text [`qualify`] appends for `uid`.
pub fn suffix(uid: u32) -> String {
    format!(" (uid {uid})")
}

/// The uid a qualified caller names and the caller as its client knows it; `None` for a
/// caller with no owner (personal mode).
pub fn split(caller: &str) -> Option<(&str, u32)> {
    let rest = caller.strip_suffix(')')?;
    let (name, n) = rest.rsplit_once(" (uid ")?;
    if n.is_empty() || n.len() > 10 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, n.parse().ok()?))
}

/// The uid that owns `caller`, if it is qualified.
pub fn of(caller: &str) -> Option<u32> {
    split(caller).map(|(_, u)| u)
}

/// `caller` without its owner: what the human's own client calls it.
pub fn unqualified(caller: &str) -> &str {
    split(caller).map_or(caller, |(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_callers_round_trip_and_never_collide() {
        assert_eq!(qualify("stdio", 1001), "stdio (uid 1001)");
        assert_eq!(split("stdio (uid 1001)"), Some(("stdio", 1001)));
        assert_eq!(unqualified("stdio (uid 1001)"), "stdio");
        assert_eq!(of("stdio"), None);
        assert_eq!(unqualified("stdio"), "stdio");
        // A caller that looks qualified already is qualified again, distinctly.
        let forged = qualify("stdio (uid 1001)", 1002);
        assert_eq!(split(&forged), Some(("stdio (uid 1001)", 1002)));
        assert_ne!(forged, qualify("stdio", 1001));
        for bad in ["x (uid )", "x (uid 1a)", "x (uid 99999999999)", "x uid 5)"] {
            assert_eq!(of(bad), None, "{bad}");
        }
        assert_ne!(qualify("a", 11001), qualify("a (uid 1", 1001));
        assert!(!qualify("a", 11001).ends_with(&suffix(1001)));
    }
}
