//! The OIDC issuer fixture of the HTTP tests: the real npm `oauth2-mock-server` 8.2.3
//! (a main issuer and a rogue one), tokens from its token endpoint, keys rotated on demand.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::{peers_dir, wait_timeout};
use serde_json::{json, Value};

/// The audience the fixture's tokens carry unless asked for another (`resource`).
pub const AUD: &str = "tc-notes";

/// The issuer fixture: the mock server with an RS256 and an ES256 key, and a "rogue"
/// one (its own key) whose tokens claim the main issuer. The token endpoint takes
/// `resource` (→ `aud`), `exp_in` (→ `exp` = now + seconds) and `iss` (→ `iss`), as
/// real issuers take a resource or audience parameter. A stdin line `{"cmd":"rotate",
/// "claims":{…}}` adds an RS256 key and answers a token signed with it.
const SCRIPT: &str = r#"
import { pathToFileURL } from 'node:url';
import readline from 'node:readline';
const { OAuth2Server } = await import(pathToFileURL(process.env.O2M_PATH).href);
const hook = (srv, forcedIss) => srv.service.on('beforeTokenSigning', (token, req) => {
  const b = req.body || {};
  if (b.resource) token.payload.aud = b.resource;
  if (b.exp_in !== undefined) token.payload.exp = Math.floor(Date.now() / 1000) + Number(b.exp_in);
  if (b.iss) token.payload.iss = b.iss;
  if (forcedIss) token.payload.iss = forcedIss();
});
const main = new OAuth2Server();
await main.issuer.keys.generate('RS256');
await main.issuer.keys.generate('ES256');
const rogue = new OAuth2Server();
await rogue.issuer.keys.generate('RS256');
hook(main);
hook(rogue, () => main.issuer.url);
await main.start(0, '127.0.0.1');
await rogue.start(0, '127.0.0.1');
console.log(JSON.stringify({ issuer: main.issuer.url, rogue: rogue.issuer.url }));
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', async (line) => {
  const req = JSON.parse(line);
  if (req.cmd === 'rotate') {
    const key = await main.issuer.keys.generate('RS256');
    const token = await main.issuer.buildToken({
      kid: key.kid, scopesOrTransform: (h, p) => Object.assign(p, req.claims),
    });
    console.log(JSON.stringify({ kid: key.kid, token }));
  }
});
rl.on('close', async () => { await main.stop(); await rogue.stop(); process.exit(0); });
"#;

/// The running fixture; stopped (stdin closed, then killed) on drop.
pub struct Issuer {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    /// The main issuer's URL (its `iss`).
    pub url: String,
    /// The rogue server's URL: its tokens claim `url` as issuer, signed with its own key.
    pub rogue: String,
    _dir: tempfile::TempDir,
}

impl Issuer {
    /// None (and a note) when the peer is not installed (`scripts/install-peers`).
    pub fn start() -> Option<Issuer> {
        let o2m = peers_dir().join("npm/node_modules/oauth2-mock-server/dist/index.mjs");
        if !o2m.exists() {
            eprintln!(
                "SKIP: {} missing (run scripts/install-peers)",
                o2m.display()
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("issuer.mjs");
        std::fs::write(&script, SCRIPT).unwrap();
        let mut child = Command::new("node")
            .arg(&script)
            .env("O2M_PATH", &o2m)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run node");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let hello: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        Some(Issuer {
            child,
            stdin,
            out,
            url: hello["issuer"].as_str().unwrap().into(),
            rogue: hello["rogue"].as_str().unwrap().into(),
            _dir: dir,
        })
    }

    /// A token from `server`'s token endpoint (password grant: `sub` = username).
    pub async fn token(&self, server: &str, sub: &str, extra: &[(&str, &str)]) -> String {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", sub),
            ("scope", "mcp:tools"),
            ("resource", AUD),
        ];
        form.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        form.extend_from_slice(extra);
        let r: Value = reqwest::Client::new()
            .post(format!("{server}/token"))
            .form(&form)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string()
    }

    /// [`Issuer::token`] for synchronous tests (its own runtime for the one request).
    pub fn token_blocking(&self, server: &str, sub: &str, extra: &[(&str, &str)]) -> String {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(self.token(server, sub, extra))
    }

    /// Adds a key to the main issuer; a token for `sub` signed with it.
    pub fn rotate(&mut self, sub: &str) -> String {
        let req =
            json!({"cmd": "rotate", "claims": {"sub": sub, "aud": AUD, "scope": "mcp:tools"}});
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{req}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        v["token"].as_str().unwrap().to_string()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.stdin.take();
        if wait_timeout(&mut self.child, Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
