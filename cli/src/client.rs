//! Connecting to `tcd` from the CLI (and which vault a command means), checking the protocol
//! handshake, and turning transport and daemon errors into [`CliError`]s a person can act on.

use std::path::{Path, PathBuf};

use tc_core::Config;
use tc_proto::v1::confirm_client::ConfirmClient;
use tonic::transport::Channel;

use crate::{exit, CliError};

/// A connected client and the socket it talks to.
pub struct Daemon {
    pub client: ConfirmClient<Channel>,
    pub socket: PathBuf,
    /// The daemon's mode from its `Status` reply ("personal", "guarded").
    pub mode: String,
}

impl Daemon {
    /// Whether the daemon says it runs in guarded mode (approvals need a factor).
    pub fn guarded(&self) -> bool {
        self.mode == tc_core::config::Mode::Guarded.as_str()
    }
}

/// What to tell a person when the daemon cannot be reached at `socket`.
pub fn not_running(socket: &Path) -> String {
    format!(
        "tcd is not running at {} (start it with `systemctl --user start tcd`, or run `tcd` in a terminal)",
        socket.display()
    )
}

/// Where tcd is, and (guarded mode) the uid it must run as.
#[derive(Debug, Clone)]
pub struct Target {
    pub path: PathBuf,
    pub daemon_uid: Option<u32>,
}

/// The config and the daemon to use. Personal mode: `--config`/`$TC_CONFIG`/the XDG
/// file and `--socket`/`daemon.socket`. Guarded mode (`/etc/tc/config.toml` says so):
/// the system config with the user's file merged over it tighten-only, and
/// `/run/tc/tcd.sock` served by the daemon user; every override is refused by name.
pub fn target(
    config_flag: Option<&Path>,
    socket_flag: Option<&Path>,
) -> Result<(Config, Target), CliError> {
    use tc_core::guarded;
    let config_err = |e: &dyn std::fmt::Display| CliError::new(exit::CONFIG, e.to_string());
    match guarded::client(config_flag, socket_flag).map_err(|e| config_err(&e))? {
        Some(g) => {
            let config = g
                .policy(&g.system_text, Path::new(guarded::SYSTEM_CONFIG))
                .map_err(|e| config_err(&e))?;
            let path = PathBuf::from(guarded::SYSTEM_SOCKET);
            let daemon_uid = Some(g.daemon_uid);
            Ok((config, Target { path, daemon_uid }))
        }
        None => {
            let config = Config::load(config_flag).map_err(|e| config_err(&e))?;
            let path = match socket_flag {
                Some(s) => s.to_path_buf(),
                None => config.socket().map_err(|e| config_err(&e))?,
            };
            Ok((
                config,
                Target {
                    path,
                    daemon_uid: None,
                },
            ))
        }
    }
}

/// The vault a command means: the one given, else the config's only vault.
pub(crate) fn vault_for(config: &Config, given: Option<String>) -> Result<String, CliError> {
    if let Some(v) = given {
        return Ok(v);
    }
    match config.vaults.as_slice() {
        [only] => Ok(only.id.clone()),
        [] => Err(CliError::new(
            exit::FAILURE,
            "--vault is required: the config lists no vaults (copy the command from the refusal, it names the vault)",
        )),
        many => Err(CliError::new(
            exit::FAILURE,
            format!(
                "--vault is required: the config lists {} vaults ({})",
                many.len(),
                many.iter().map(|v| v.id.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Connects and checks that the daemon speaks our protocol (and, guarded, runs as the
/// daemon user).
pub async fn connect(target: &Target) -> Result<Daemon, CliError> {
    let socket = target.path.as_path();
    let channel = match target.daemon_uid {
        Some(uid) => tc_proto::connect_checked(socket, uid).await,
        None => tc_proto::connect(socket).await,
    }
    .map_err(|e| connect_error(socket, &e))?;
    let mut client = ConfirmClient::new(channel);
    let status = client
        .status(tc_proto::v1::StatusRequest {})
        .await
        .map_err(|s| status_error(socket, &s))?
        .into_inner();
    if status.protocol != tc_proto::PROTOCOL {
        return Err(CliError::new(
            exit::FAILURE,
            format!(
                "tcd at {} speaks protocol {} (version {}), this tcctl speaks {}; restart tcd after upgrading",
                socket.display(),
                status.protocol,
                status.version,
                tc_proto::PROTOCOL
            ),
        ));
    }
    Ok(Daemon {
        client,
        socket: socket.to_path_buf(),
        mode: status.mode,
    })
}

/// The I/O error under a transport failure, if the failure is one.
fn io_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = e.source();
    }
    None
}

/// Nothing listening, or a connection that broke: what "tcd is not running" means.
fn connection_failed(io: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        io.kind(),
        NotFound
            | ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | BrokenPipe
            | UnexpectedEof
            | NotConnected
    )
}

/// What an I/O failure talking to the socket means: no socket or nobody accepting on
/// it is "not running"; a connection that broke says so too; permission denied names the
/// other user's socket (starting a tcd would not help); anything else says what it is.
fn io_failure(socket: &Path, io: &std::io::Error) -> CliError {
    use std::io::ErrorKind::*;
    let message = match io.kind() {
        NotFound | ConnectionRefused => not_running(socket),
        _ if connection_failed(io) => {
            format!("the connection failed ({io}): {}", not_running(socket))
        }
        PermissionDenied => format!(
            "cannot connect to tcd at {}: permission denied (the socket or its directory \
             belongs to another user; tcd serves only the user it runs as, so check \
             --socket / daemon.socket)",
            socket.display()
        ),
        _ => format!("cannot connect to tcd at {}: {io}", socket.display()),
    };
    CliError::new(exit::UNAVAILABLE, message)
}

/// Why connecting failed (see [`io_failure`]).
fn connect_error(socket: &Path, e: &tonic::transport::Error) -> CliError {
    match io_cause(e) {
        Some(io) => io_failure(socket, io),
        None => CliError::new(
            exit::UNAVAILABLE,
            format!("cannot connect to tcd at {}: {e}", socket.display()),
        ),
    }
}

/// Classifies a failed RPC. Only a connection that failed under the call is reported as
/// tcd not running; a status that was *answered* (whatever its code) is shown as such.
pub fn status_error(socket: &Path, s: &tonic::Status) -> CliError {
    use std::error::Error;
    if let Some(reason) = tc_proto::reason(s) {
        return CliError::new(
            exit::REFUSED,
            format!("refused ({reason}): {}", s.message()),
        );
    }
    // Transport failures carry their cause as the status's source; answers do not.
    if let Some(io) = s.source().and_then(io_cause) {
        return io_failure(socket, io);
    }
    match s.code() {
        tonic::Code::PermissionDenied => CliError::new(
            exit::REFUSED,
            format!(
                "tcd at {} refused this user: {}",
                socket.display(),
                s.message()
            ),
        ),
        // A transport failure without an I/O cause: h2/hyper saw the connection close
        // before an answer (tcd killed mid-call, or a listener that is not tcd).
        code if s.source().is_some() => CliError::new(
            exit::UNAVAILABLE,
            format!(
                "the connection closed before an answer ({code:?}: {}): {}",
                s.message(),
                not_running(socket)
            ),
        ),
        tonic::Code::Unavailable => CliError::new(
            exit::UNAVAILABLE,
            format!(
                "tcd at {} is unavailable: {}",
                socket.display(),
                s.message()
            ),
        ),
        code => CliError::new(
            exit::FAILURE,
            format!(
                "tcd at {} answered {code:?}: {}",
                socket.display(),
                s.message()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOCK: &str = "/run/user/1000/tc/tcd.sock";

    fn classify(s: tonic::Status) -> CliError {
        status_error(Path::new(SOCK), &s)
    }

    /// A status tcd (or whatever answered) sent itself, with no transport failure behind
    /// it, is reported as that answer: it proves something is running on the socket.
    #[test]
    fn an_answered_unknown_is_not_tcd_is_not_running() {
        let e = classify(tonic::Status::unknown("handler exploded"));
        assert!(!e.message.contains("not running"), "{}", e.message);
        assert!(e.message.contains("handler exploded"), "{}", e.message);
        assert!(e.message.contains(SOCK), "{}", e.message);
        assert_eq!(e.code, exit::FAILURE);
    }

    /// tcd's own `unavailable` (a follow stream ended by a shutdown) says what tcd said.
    #[test]
    fn an_answered_unavailable_keeps_the_daemons_message() {
        let e = classify(tonic::Status::unavailable("tcd is shutting down"));
        assert!(!e.message.contains("not running"), "{}", e.message);
        assert!(e.message.contains("tcd is shutting down"), "{}", e.message);
        assert_eq!(e.code, exit::UNAVAILABLE);
    }

    /// A connection that broke under the call (tcd crashed or was killed mid-RPC) is a
    /// real connection failure: socket and how to start tcd, exit 3.
    #[test]
    fn a_broken_connection_says_how_to_start_tcd() {
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e = classify(tonic::Status::from_error(Box::new(std::io::Error::from(
                kind,
            ))));
            assert_eq!(e.code, exit::UNAVAILABLE, "{kind:?}: {}", e.message);
            assert!(e.message.contains(SOCK), "{}", e.message);
            assert!(
                e.message.contains("systemctl --user start tcd"),
                "{}",
                e.message
            );
        }
    }

    /// Refusals keep their reason and exit 4, whatever their gRPC code.
    #[test]
    fn refusals_are_refusals() {
        let e = classify(tc_proto::refusal(
            tonic::Code::NotFound,
            tc_core::Reason::NoRaisedRequest,
            "run it again",
        ));
        assert_eq!(e.code, exit::REFUSED);
        assert!(e.message.contains("no_raised_request"), "{}", e.message);
    }
}
