//! Connecting to `tcd` from the CLI, checking the protocol handshake, and turning
//! transport and daemon errors into [`CliError`]s a person can act on.

use std::path::{Path, PathBuf};

use tc_proto::v1::confirm_client::ConfirmClient;
use tonic::transport::Channel;

use crate::{exit, CliError};

/// A connected client and the socket it talks to.
pub struct Daemon {
    pub client: ConfirmClient<Channel>,
    pub socket: PathBuf,
}

/// What to tell a person when the daemon cannot be reached at `socket`.
pub fn not_running(socket: &Path) -> String {
    format!(
        "tcd is not running at {} (start it with `systemctl --user start tcd`, or run `tcd` in a terminal)",
        socket.display()
    )
}

/// Connects and checks that the daemon speaks our protocol.
pub async fn connect(socket: &Path) -> Result<Daemon, CliError> {
    let channel = tc_proto::connect(socket)
        .await
        .map_err(|_| CliError::new(exit::UNAVAILABLE, not_running(socket)))?;
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
    })
}

/// Classifies a failed RPC.
pub fn status_error(socket: &Path, s: &tonic::Status) -> CliError {
    if let Some(reason) = tc_proto::reason(s) {
        return CliError::new(
            exit::REFUSED,
            format!("refused ({reason}): {}", s.message()),
        );
    }
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown => {
            CliError::new(exit::UNAVAILABLE, not_running(socket))
        }
        tonic::Code::PermissionDenied => CliError::new(
            exit::REFUSED,
            format!(
                "tcd at {} refused this user: {}",
                socket.display(),
                s.message()
            ),
        ),
        _ => CliError::new(exit::FAILURE, format!("tcd: {}", s.message())),
    }
}
