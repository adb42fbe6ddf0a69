//! The approval page in a real browser: Debian's chromium driven by playwright-core
//! (tests/browser/approval_page.mjs) with a CDP virtual authenticator (user verification
//! on), one JSON command per line.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

use crate::guarded::{as_user, User};
use crate::shim::peers;

/// The browser script, one JSON command per line; killed on drop.
pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

const CHROMIUM: &str = "/usr/bin/chromium";

fn playwright() -> std::path::PathBuf {
    peers().join("npm/node_modules/playwright-core")
}

impl Browser {
    /// Whether chromium and playwright-core are installed (scripts/install-peers).
    pub fn available() -> bool {
        Path::new(CHROMIUM).exists() && playwright().exists()
    }

    /// The browser, run as this process, opening `url`.
    pub fn open(url: &str) -> Browser {
        Self::start(Command::new("node"), json!({ "url": url }))
    }

    /// The browser as a phone (small touch screen) opening the remote page at `url`, whose
    /// name `resolve` maps (`--host-resolver-rules`) and whose certificate `spki` pins
    /// (`--ignore-certificate-errors-spki-list`); ready when `wait_for` shows.
    pub fn open_phone(url: &str, resolve: &str, spki: &str, wait_for: &str) -> Browser {
        let opts = json!({
            "url": url, "mobile": true, "resolve": resolve, "spki": spki, "waitFor": wait_for,
        });
        Self::start(Command::new("node"), opts)
    }

    /// The browser run as `who` (the page honours a link and a session only from sockets
    /// of the uid that minted the link), opening `url`.
    pub fn open_as(who: (&User, &Path), url: &str) -> Browser {
        Self::start(as_user(who.0, who.1, "node"), json!({ "url": url }))
    }

    fn start(mut node: Command, open: Value) -> Browser {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: run scripts/install-peers (apt-get install chromium)"
        );
        let pw = playwright();
        assert!(
            pw.exists(),
            "{} is missing: run scripts/install-peers",
            pw.display()
        );
        let mut child = node
            .arg(crate::workspace().join("tests/browser/approval_page.mjs"))
            .env("TC_PLAYWRIGHT_CORE", &pw)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut b = Browser {
            child,
            stdin,
            stdout,
        };
        let mut open = open;
        open["op"] = "open".into();
        b.cmd(open);
        b
    }

    /// Runs one command; panics with the script's error when it failed.
    /// The page was never reloaded and fetched nothing from elsewhere (everything it
    /// showed came over its own SSE stream and API).
    #[track_caller]
    pub fn assert_one_page_load(&mut self) {
        let n = self.cmd(serde_json::json!({"op": "reloadCount"}));
        assert_eq!(n["navigations"], 1, "the page was reloaded: {n}");
        assert_eq!(
            n["remote"],
            serde_json::json!([]),
            "the page fetched from elsewhere: {n}"
        );
    }

    pub fn cmd(&mut self, c: Value) -> Value {
        writeln!(self.stdin, "{c}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("browser said {line:?}"));
        assert_eq!(v["ok"], true, "browser command {c} failed: {}", v["error"]);
        v
    }

    /// The message the page showed for command `c`.
    pub fn msg(&mut self, c: Value) -> String {
        self.cmd(c)["msg"].as_str().unwrap().to_string()
    }

    /// A fetch from the page (its cookie; `csrf: false` leaves the token out): (status,
    /// body).
    pub fn request(&mut self, method: &str, path: &str, body: Value, csrf: bool) -> (u16, String) {
        let v = self.cmd(
            json!({"op": "request", "method": method, "path": path, "body": body, "csrf": csrf}),
        );
        (
            v["status"].as_u64().unwrap() as u16,
            v["body"].as_str().unwrap().to_string(),
        )
    }

    /// A POST from the page (its cookie and CSRF token): (status, body as JSON, or
    /// `{"raw": body}` when it is not).
    pub fn post(&mut self, path: &str, body: Value) -> (u16, Value) {
        let (st, body) = self.request("POST", path, body, true);
        let v = serde_json::from_str(&body).unwrap_or_else(|_| json!({ "raw": body }));
        (st, v)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
