//! Issue 29 item 4, what terminals show: a hostile model's `write_file` call as the human
//! reads it in `tcctl pending`, `tcctl approve` (its full view and the diff preview) and
//! the prompt text, through the real tc-shim, tcd, tcctl and server-filesystem.
//!
//! Held before (tests/tests/security/display.rs covers names and values; here every class at once,
//! in values, in the preview and in `--json`): ANSI CSI and OSC sequences, C1 controls,
//! bidi overrides and isolates, zero-width characters and the BOM are never raw.
//! Fixed here:
//! - a run of 10 000 spaces is one visible, counted marker (`⟨U+0020×10000⟩`), not a
//!   blank that wraps the rest of the value ~125 lines down;
//! - a stack of combining marks is cut to [`MARKS_MAX`] raw marks;
//! - many filler arguments sorted before `path` pushed its value out of the summary
//!   (`pending`, the prompt): the gate's own arguments now come first;
//! - a huge argument (or preview) scrolled the head of `tcctl approve`'s view out of
//!   sight: the view ends with a recap of the request, one short line per argument,
//!   just above the question.

use tc_tests::shim as support;

use serde_json::{json, Map, Value};
use support::*;
use tc_core::display::{escape, pretty_args, reescape, MARKS_MAX, SPACE_RUN};

/// Every hazard class in one value.
const HAZARDS: &str = "csi\u{1b}[2J osc\u{1b}]8;;https://evil.example\u{7} c1\u{9b}31m \
                       lro\u{202a}rlo\u{202e} lri\u{2066}pdi\u{2069} zw\u{200b}\u{200c}\u{200d}\u{2060} bom\u{feff}";

/// Raw characters that must never reach a person.
fn raw_hazards(s: &str) -> Vec<String> {
    s.chars()
        .filter(|&c| {
            let u = c as u32;
            (c.is_control() && c != '\n')
                || matches!(u, 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2069 | 0xFEFF)
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

/// The longest run of raw spaces in `s`.
fn longest_blank(s: &str) -> usize {
    s.split(|c| c != ' ').map(str::len).max().unwrap_or(0)
}

#[test]
fn escape_counts_blank_runs_and_cuts_mark_stacks() {
    let blank = format!("safe.txt{}; rm -rf ~", " ".repeat(10_000));
    let e = escape(&blank);
    assert_eq!(e, "safe.txt⟨U+0020×10000⟩; rm -rf ~");
    // Indentation and ordinary spacing stay as they are.
    let short = format!("a{}b", " ".repeat(SPACE_RUN - 1));
    assert_eq!(escape(&short), short);
    assert_eq!(
        escape(&" ".repeat(SPACE_RUN)),
        format!("⟨U+0020×{SPACE_RUN}⟩")
    );
    // Escaped once is final: reescape keeps a run marker, and a forged one is escaped.
    assert_eq!(reescape(&e), e);
    assert_eq!(
        escape("⟨U+0020×5⟩"),
        "⟨U+27E8⟩U+0020×5⟩",
        "a marker in the input is not taken for ours"
    );
    assert_eq!(reescape("⟨U+0041×5⟩"), "⟨U+27E8⟩U+0041×5⟩");
    // Zalgo: a base letter and 40 combining acute accents.
    let zalgo = format!("e{}", "\u{301}".repeat(40));
    let e = escape(&zalgo);
    assert_eq!(e.matches('\u{301}').count(), MARKS_MAX, "{e}");
    assert_eq!(e.matches("⟨U+0301⟩").count(), 40 - MARKS_MAX, "{e}");
    // Ordinary accented text is left alone.
    assert_eq!(
        escape("cafe\u{301} Tiê\u{301}ng"),
        "cafe\u{301} Tiê\u{301}ng"
    );
    // The page and tcctl share pretty_args: the same marker there.
    let p = pretty_args(&json!({"path": blank}).to_string(), "");
    assert!(p.contains("⟨U+0020×10000⟩"), "{p}");
    assert!(longest_blank(&p) < SPACE_RUN, "{p}");
}

fn env() -> Env {
    let mut env = Env::with(
        &Vault::fs_write_gated()
            .raw("preview = { diff = { path = \"path\", content = \"content\" } }\n"),
    );
    env.start_tcd();
    std::fs::write(env.root.join("secret.txt"), "old line\n").unwrap();
    env
}

/// The hostile call: 60 filler arguments sorted before `content` and `path`, a content
/// of every hazard, 10 000 spaces and a mark stack, and a 30 000-character value.
fn hostile() -> Value {
    let mut m = Map::new();
    for i in 0..60 {
        m.insert(format!("a{i:02}"), json!(format!("filler {i} ").repeat(6)));
    }
    m.insert(
        "content".into(),
        json!(format!(
            "{HAZARDS}\nlooks harmless{}then: the real line\ne{}\n",
            " ".repeat(10_000),
            "\u{301}".repeat(40)
        )),
    );
    m.insert("big".into(), json!("x".repeat(30_000)));
    m.insert("path".into(), json!("secret.txt"));
    Value::Object(m)
}

/// Raises the hostile call; its request id.
fn raised(env: &Env) -> String {
    let mut c = RawClient::start(&env.shim_argv("fs"));
    c.initialize();
    let r = c.call_tool(1, "write_file", hostile());
    assert_eq!(code(&r).as_deref(), Some("elicit_required"), "{r}");
    // The refusal the agent reads names the path too (it is the summary).
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(raw_hazards(text).is_empty(), "{text:?}");
    request_id(&r)
}

fn out(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn pending_shows_the_gated_path_whatever_comes_before_it() {
    let env = env();
    let id = raised(&env);
    let text = out(&env.tcd.tcctl(&["pending"]));
    assert!(raw_hazards(&text).is_empty(), "{:?}", raw_hazards(&text));
    assert!(text.contains(&id), "{text}");
    assert!(
        text.contains(r#"path="secret.txt""#),
        "60 fillers sorted first pushed the path's value out of the summary: {text}"
    );
    assert!(
        longest_blank(&text) < SPACE_RUN,
        "a raw blank run in: {text}"
    );
    // --json: the exact value for scripts, every hazard a JSON escape.
    let text = out(&env.tcd.tcctl(&["pending", "--json"]));
    assert!(raw_hazards(&text).is_empty(), "{:?}", raw_hazards(&text));
    let row: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(
        row["preview"].as_str().unwrap().contains("\u{202e}"),
        "the JSON value is exact: {row}"
    );
}

#[test]
fn approve_ends_with_a_recap_the_huge_argument_cannot_push_away() {
    let env = env();
    let id = raised(&env);
    let text = out(&env.tcd.tcctl(&["approve", &id, "--yes"]));
    assert!(raw_hazards(&text).is_empty(), "{:?}", raw_hazards(&text));
    assert!(longest_blank(&text) < SPACE_RUN, "a raw blank run");
    assert!(text.contains("⟨U+0020×10000⟩"), "the run is shown counted");
    assert!(
        !text.contains(&"\u{301}".repeat(MARKS_MAX + 1)),
        "a raw mark stack"
    );
    // The preview: the same content, escaped line by line.
    let (_, preview) = text.split_once("\npreview:\n").expect("a preview section");
    assert!(preview.contains("+csi⟨U+001B⟩[2J"), "{preview}");
    assert!(preview.contains("⟨U+202E⟩"), "{preview}");
    // What a 40-line terminal shows last: the recap, naming the request and the path,
    // each argument one short line.
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(
        tail.contains(&format!(
            "you are approving request {id}: `write_file` on vault fs"
        )),
        "the last screen does not say what is approved: {tail}"
    );
    assert!(tail.contains(r#""path" = "secret.txt""#), "{tail}");
    assert!(
        tail.contains("… and 39 more arguments (all 63 are shown in full above)"),
        "{tail}"
    );
    let (_, recap) = tail.split_once("=== you are approving").unwrap();
    assert!(recap.lines().all(|l| l.chars().count() < 300), "{recap}");
}
