//! The approval page from the terminal: `tcctl approvals open` (its URL) and `tcctl
//! passkey add` (a one-time code to type into the page; never a URL parameter).

use tc_core::config::{ApprovalsConfig, Config};
use tc_proto::v1;

use crate::client::{self, status_error, Target};
use crate::commands::{emit, rfc3339};
use crate::{exit, CliError};

/// The page's URL from `[approvals] listen`.
fn url(config: &Config) -> Result<String, CliError> {
    match config.approvals.listen_addr() {
        Ok(Some(addr)) => Ok(ApprovalsConfig::page_url(addr)),
        Ok(None) => Err(CliError::new(
            exit::CONFIG,
            "the approval page is off: set `[approvals] listen = \"127.0.0.1:7777\"` in the config and restart tcd",
        )),
        Err(e) => Err(CliError::new(exit::CONFIG, e)),
    }
}

/// Whether a desktop session is there to open a browser in.
fn desktop() -> bool {
    ["WAYLAND_DISPLAY", "DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Prints the URL; in a desktop session also hands it to `xdg-open` (best effort).
pub fn open(config: &Config, print_only: bool) -> Result<(), CliError> {
    let url = url(config)?;
    emit(&format!("{url}\n"))?;
    if !print_only && desktop() {
        let spawned = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            eprintln!("could not run xdg-open ({e}): open the URL above in your browser");
        }
    }
    Ok(())
}

/// Asks tcd for a one-time registration code and prints it with what to do.
pub async fn passkey_add(config: &Config, target: Target) -> Result<(), CliError> {
    let url = url(config)?;
    let mut d = client::connect(&target).await?;
    let r = d
        .client
        .passkey_code(v1::PasskeyCodeRequest {})
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    eprintln!(
        "Open {url} , type this code into \"Add a passkey\" and follow your browser \
         (valid once, until {}):",
        rfc3339(r.expires_at_ms)
    );
    emit(&format!("{}\n", r.code))
}
