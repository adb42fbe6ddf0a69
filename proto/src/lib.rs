//! The tc.v1 gRPC API: generated client and server code, plus the single Unix-socket
//! connector every client (tc-shim, tcctl, tests) uses.
//!
//! - [`v1`]: generated messages, `confirm_client::ConfirmClient`, `confirm_server`.
//! - [`connect`]: a `Channel` over a Unix socket path.
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
