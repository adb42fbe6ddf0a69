//! The tc.v1 gRPC API: generated client and server code, plus the single Unix-socket
//! connector every client (tc-shim, tcctl, tests) uses.
//!
//! - [`v1`]: generated messages, `confirm_client::ConfirmClient`, `confirm_server`.
//! - [`connect`]: a `Channel` over a Unix socket path; [`connect_checked`]: the same,
//!   only to a listener running as the expected uid (guarded mode).
//! - [`PROTOCOL`]: the integer compared in the `Status` handshake.

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("tc.v1");
}

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Bumped whenever a message or RPC changes meaning; clients refuse a mismatch.
pub const PROTOCOL: u32 = 1;

/// Metadata key carrying the machine-readable refusal reason on an error `Status`.
pub const REASON_KEY: &str = "tc-reason";

/// Opens a gRPC channel to `tcd` over the Unix socket at `path`.
///
/// Connects eagerly so "daemon not running" surfaces here, not on the first RPC.
pub async fn connect(path: impl AsRef<Path>) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.as_ref().to_path_buf();
    // The URI is ignored by the connector; it only has to parse.
    Endpoint::from_static("http://tcd.local")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// [`connect`], but each connection is used only if the kernel says (`SO_PEERCRED`) the
/// process listening on `path` runs as `expected_uid`: guarded mode's clients refuse a
/// daemon planted on the socket by anyone but the `tc` user.
pub async fn connect_checked(
    path: impl AsRef<Path>,
    expected_uid: u32,
) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.as_ref().to_path_buf();
    Endpoint::from_static("http://tcd.local")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                let uid = stream.peer_cred()?.uid();
                if uid != expected_uid {
                    return Err(std::io::Error::other(WrongDaemon {
                        path,
                        uid,
                        expected_uid,
                    }));
                }
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

/// The socket is served by another uid than the guarded daemon's.
#[derive(Debug)]
pub struct WrongDaemon {
    pub path: PathBuf,
    pub uid: u32,
    pub expected_uid: u32,
}

impl std::fmt::Display for WrongDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is served by uid {}, not by the guarded daemon's user (uid {}): refusing to \
             trust it (another process holds tcd's socket)",
            self.path.display(),
            self.uid,
            self.expected_uid
        )
    }
}

impl std::error::Error for WrongDaemon {}

/// The machine-readable refusal reason a `tcd` error carries, if any.
///
/// `None` means the error is not a domain refusal (transport, auth, internal).
pub fn reason(status: &tonic::Status) -> Option<tc_core::Reason> {
    status
        .metadata()
        .get(REASON_KEY)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Builds the error `Status` for a refusal: the reason in metadata, the message for people.
pub fn refusal(
    code: tonic::Code,
    reason: tc_core::Reason,
    message: impl Into<String>,
) -> tonic::Status {
    let mut status = tonic::Status::new(code, message);
    status.metadata_mut().insert(
        REASON_KEY,
        tonic::metadata::MetadataValue::from_static(reason.as_str()),
    );
    status
}
