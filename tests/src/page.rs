//! The approval page as a client sees it over raw HTTP/1.1 on loopback: one exchange, and
//! a page session opened the only way there is, from a `tcctl page` link (the link's
//! `/open` answers 303 with the session cookie; the shell then carries the CSRF token).
//!
//! tcd honours a link or a session only from a socket of its own uid. A root test acts
//! as a human by creating the socket under that human's fsuid: the kernel records the
//! creating thread's fsuid as the socket's owner (what `/proc/net/tcp` shows tcd), and
//! `setfsuid` changes only the calling thread.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

/// A loopback connection to the page's `port` from a socket owned by `uid` (None: this
/// process's own uid).
pub fn connect_as(port: u16, uid: Option<u32>) -> TcpStream {
    let Some(uid) = uid else {
        return TcpStream::connect(("127.0.0.1", port)).expect("connect to the page");
    };
    let before = nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
    let s = TcpStream::connect(("127.0.0.1", port));
    nix::unistd::setfsuid(before);
    s.expect("connect to the page")
}

/// One exchange on the page's `port`: (status, response head and body).
pub fn http(port: u16, req: &str) -> (u16, String) {
    http_as(port, None, req)
}

/// [`http`] from a socket owned by `uid`.
pub fn http_as(port: u16, uid: Option<u32>, req: &str) -> (u16, String) {
    let mut s = connect_as(port, uid);
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// The body of a response as JSON (Null when it is not).
pub fn json_body(out: &str) -> Value {
    out.split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null)
}

/// The port and path+query of a page link `http://localhost:PORT/open?t=…`.
pub fn link_parts(link: &str) -> (u16, String) {
    let rest = link
        .trim()
        .strip_prefix("http://localhost:")
        .unwrap_or_else(|| panic!("not a page link: {link:?}"));
    let (port, path) = rest.split_once('/').expect("a path");
    (port.parse().expect("a port"), format!("/{path}"))
}

/// A page session: its cookie (`tc_page=…`) and CSRF token.
#[derive(Debug, Clone)]
pub struct PageSession {
    pub port: u16,
    pub cookie: String,
    pub csrf: String,
    /// The uid its connections come from (None: this process's).
    pub uid: Option<u32>,
}

impl PageSession {
    /// Spends `link` (from `tcctl page --print`); panics unless it opens a session.
    pub fn open(link: &str) -> PageSession {
        Self::open_as(link, None)
    }

    /// [`PageSession::open`] from sockets owned by `uid` (the link's minter, for a
    /// session that works).
    pub fn open_as(link: &str, uid: Option<u32>) -> PageSession {
        Self::try_open_as(link, uid)
            .unwrap_or_else(|(st, out)| panic!("the link opened nothing ({st}):\n{out}"))
    }

    /// Spends `link`: the session, or the status and response it got instead.
    pub fn try_open(link: &str) -> Result<PageSession, (u16, String)> {
        Self::try_open_as(link, None)
    }

    /// [`PageSession::try_open`] from sockets owned by `uid`.
    pub fn try_open_as(link: &str, uid: Option<u32>) -> Result<PageSession, (u16, String)> {
        let (port, path) = link_parts(link);
        let host = format!("localhost:{port}");
        let (st, out) = http_as(
            port,
            uid,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        let cookie = out
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .and_then(|c| c.split(';').next())
            .map(str::to_string);
        let Some(cookie) = cookie.filter(|_| st == 303) else {
            return Err((st, out));
        };
        let (st, shell) = http_as(
            port,
            uid,
            &format!(
                "GET / HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(st, 200, "the session's shell: {shell}");
        let csrf = shell
            .split("name=\"tc-csrf\" content=\"")
            .nth(1)
            .expect("the CSRF token in the shell")[..64]
            .to_string();
        Ok(PageSession {
            port,
            cookie,
            csrf,
            uid,
        })
    }

    /// GET `path` with the session's cookie: (status, response).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_as(
            self.port,
            self.uid,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: localhost:{}\r\nCookie: {}\r\nConnection: close\r\n\r\n",
                self.port, self.cookie
            ),
        )
    }

    /// The session's `/api/state` as JSON.
    pub fn state(&self) -> Value {
        let (st, out) = self.get("/api/state");
        assert_eq!(st, 200, "{out}");
        json_body(&out)
    }

    /// POST `path` with `body` as the page's own script would (Host, Origin, cookie and
    /// CSRF token): (status, JSON body).
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        post_as(
            self.port,
            self.uid,
            path,
            body,
            Some(&self.cookie),
            Some(&self.csrf),
        )
    }
}

/// A POST from the page's own origin with whatever cookie and CSRF token are given (an
/// outsider has none): (status, JSON body).
pub fn post(
    port: u16,
    path: &str,
    body: &Value,
    cookie: Option<&str>,
    csrf: Option<&str>,
) -> (u16, Value) {
    post_as(port, None, path, body, cookie, csrf)
}

/// [`post`] from a socket owned by `uid`.
pub fn post_as(
    port: u16,
    uid: Option<u32>,
    path: &str,
    body: &Value,
    cookie: Option<&str>,
    csrf: Option<&str>,
) -> (u16, Value) {
    let body = body.to_string();
    let host = format!("localhost:{port}");
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    let csrf = csrf
        .map(|c| format!("x-tc-csrf: {c}\r\n"))
        .unwrap_or_default();
    let (st, out) = http_as(
        port,
        uid,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n{cookie}{csrf}\
             content-type: application/json\r\ncontent-length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    (st, json_body(&out))
}

impl PageSession {
    /// Opens the session's `/api/events` stream and reads it until its first event is
    /// complete (or 10 s pass, or the server closes): (status, all that was read).
    pub fn first_event(&self) -> (u16, String) {
        let port = self.port;
        let mut s = connect_as(port, self.uid);
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("read timeout");
        s.write_all(
            format!(
                "GET /api/events HTTP/1.1\r\nHost: localhost:{port}\r\nCookie: {}\r\n\
                 Accept: text/event-stream\r\nConnection: close\r\n\r\n",
                self.cookie
            )
            .as_bytes(),
        )
        .expect("send");
        let (mut buf, mut chunk) = (Vec::new(), [0u8; 8192]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            let text = String::from_utf8_lossy(&buf);
            let done = text
                .split_once("\ndata:")
                .is_some_and(|(_, rest)| rest.contains("\n\n"));
            if done {
                break;
            }
        }
        let out = String::from_utf8_lossy(&buf).into_owned();
        let status = out
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, out)
    }
}
