//! Unit tests of the display escaping, one per class of character.

use super::*;
use std::io::Write as _;

fn e(s: &str) -> String {
    escape(s).into_owned()
}

#[test]
fn plain_text_is_untouched_and_borrowed() {
    for s in ["write_file", "a b/c.md", "café 東京 ✓ \"q\" \\ ⟩", ""] {
        assert!(matches!(escape(s), Cow::Borrowed(_)), "{s}");
    }
}

#[test]
fn c0_del_and_c1_controls() {
    assert_eq!(e("a\rb\nc\td\0"), "a⟨U+000D⟩b⟨U+000A⟩c⟨U+0009⟩d⟨U+0000⟩");
    assert_eq!(e("\x7f"), "⟨U+007F⟩");
    assert_eq!(
        e("\u{85}\u{9b}\u{80}\u{9f}"),
        "⟨U+0085⟩⟨U+009B⟩⟨U+0080⟩⟨U+009F⟩"
    );
}

#[test]
fn ansi_sequences_lose_their_escape() {
    let s = e("path\r\x1b[2K\x1b]0;title\x07 \u{9b}31m");
    assert!(!s.chars().any(|c| c.is_control()), "{s}");
    assert_eq!(
        s,
        "path⟨U+000D⟩⟨U+001B⟩[2K⟨U+001B⟩]0;title⟨U+0007⟩ ⟨U+009B⟩31m"
    );
}

#[test]
fn bidi_overrides_isolates_and_marks() {
    for c in [
        '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}',
        '\u{2068}', '\u{2069}', '\u{200e}', '\u{200f}', '\u{061c}',
    ] {
        assert_eq!(e(&c.to_string()), format!("⟨U+{:04X}⟩", c as u32));
    }
}

#[test]
fn zero_width_and_other_invisible_characters() {
    for c in [
        '\u{200b}',
        '\u{200c}',
        '\u{200d}',
        '\u{2060}',
        '\u{2061}',
        '\u{2064}',
        '\u{2065}',
        '\u{feff}',
        '\u{00ad}',
        '\u{180e}',
        '\u{034f}',
        '\u{115f}',
        '\u{1160}',
        '\u{3164}',
        '\u{ffa0}',
        '\u{17b4}',
        '\u{180b}',
        '\u{fe0f}',
        '\u{1d173}',
        '\u{e0001}',
        '\u{e0041}',
        '\u{e007f}',
        '\u{e0100}',
        '\u{fff9}',
    ] {
        assert_eq!(
            e(&c.to_string()),
            format!("⟨U+{:04X}⟩", c as u32),
            "{:x}",
            c as u32
        );
    }
}

#[test]
fn separators_odd_spaces_private_use_and_unassigned() {
    assert_eq!(e("\u{2028}\u{2029}"), "⟨U+2028⟩⟨U+2029⟩");
    // Only U+0020 is shown as a space: the others pass for it.
    assert_eq!(e("a\u{a0}b\u{3000}\u{2007}"), "a⟨U+00A0⟩b⟨U+3000⟩⟨U+2007⟩");
    assert_eq!(e("\u{e000}\u{10fffd}"), "⟨U+E000⟩⟨U+10FFFD⟩");
    assert_eq!(
        e("\u{fdd0}\u{fffe}\u{10ffff}"),
        "⟨U+FDD0⟩⟨U+FFFE⟩⟨U+10FFFF⟩"
    );
}

#[test]
fn a_marker_cannot_be_forged() {
    assert_eq!(e("⟨U+202E⟩"), "⟨U+27E8⟩U+202E⟩");
    // Every `⟨` in escaped text starts a real marker.
    let s = e("x⟨⟨y\u{202e}");
    for (i, _) in s.match_indices(OPEN) {
        assert!(s[i..].starts_with("⟨U+"), "{s}");
    }
}

#[test]
fn escaped_text_has_nothing_left_to_escape() {
    let all: String = (0..0x11_0000u32).filter_map(char::from_u32).collect();
    let s = e(&all);
    assert!(s.chars().all(|c| c == OPEN || !needs_escape(c)));
    assert!(!s.chars().any(|c| c.is_control()));
}

#[test]
fn json_stays_the_same_value() {
    let v = serde_json::json!({"k\u{202e}": "a\u{9b}b\u{e0041}\u{200b}"});
    let raw = v.to_string();
    let safe = json_safe(&raw);
    assert!(!safe.chars().any(needs_escape), "{safe}");
    assert!(
        safe.contains("\\u202e") && safe.contains("\\udb40\\udc41"),
        "{safe}"
    );
    assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
}

#[test]
fn clip_says_what_it_shortened_and_keeps_markers_whole() {
    assert_eq!(clip("short", 10), "short");
    let long = "x".repeat(500);
    let c = clip(&long, 100);
    assert!(
        c.contains('…') && c.ends_with("(500 characters in all)"),
        "{c}"
    );
    assert!(c.chars().count() <= 100, "{}", c.chars().count());
    // Markers straddling either cut are dropped whole, never left half-open.
    let s = e(&"\u{202e}".repeat(100));
    for max in 40..80 {
        let c = clip(&s, max);
        let (head, rest) = c.split_once('…').unwrap();
        let tail = rest.rsplit_once(" (").unwrap().0;
        for part in [head, tail] {
            assert_eq!(part.matches(OPEN).count(), part.matches('⟩').count(), "{c}");
            assert!(
                part.is_empty() || part.starts_with(OPEN) && part.ends_with('⟩'),
                "{c}"
            );
        }
    }
}

#[test]
fn log_lines_keep_only_their_newline() {
    let mut w = LogWriter(Vec::new());
    w.write_all(b"WARN tool=\x1b[2Kfake\rline\ninjected\n")
        .unwrap();
    let out = String::from_utf8(w.0).unwrap();
    assert_eq!(
        out,
        "WARN tool=⟨U+001B⟩[2Kfake⟨U+000D⟩line⟨U+000A⟩injected\n"
    );
}

#[test]
fn reescape_keeps_markers_and_escapes_the_rest() {
    let once = e("a\u{202e}⟨U+0041⟩\x1b");
    assert_eq!(reescape(&once), once);
    assert_eq!(
        reescape("⟨U+202E⟩\u{202e}⟨U+12⟩⟨"),
        "⟨U+202E⟩⟨U+202E⟩⟨U+27E8⟩U+12⟩⟨U+27E8⟩"
    );
    assert!(!reescape("x\u{9b}").contains('\u{9b}'));
}

#[test]
fn arguments_are_pretty_printed_escaped_or_shown_raw() {
    assert_eq!(pretty_args(r#"{"a":1}"#, "s"), "{\n  \"a\": 1\n}");
    assert_eq!(
        pretty_args("{cut… (cut: 9 bytes in all)", "s"),
        "{cut… (cut: 9 bytes in all)"
    );
    assert!(pretty_args("", "t {..}").contains("t {..}"));
    // A control character inside a string value is shown as a marker, never raw.
    assert_eq!(
        pretty_args("{\"a\":\"x\\u001b[2Jy\"}", "s"),
        "{\n  \"a\": \"x\\u001b[2Jy\"\n}"
    );
    assert!(pretty_args("raw\u{202e}text", "s").contains("⟨U+202E⟩"));
}
