//! The approval page from the terminal: `tcctl page` (a one-time link that opens a page
//! session of your own) and `tcctl passkey add|list|confirm|remove` (a one-time code to
//! type into the page, never a URL parameter; in guarded mode a new passkey approves
//! nothing until you confirm it here with your authenticator code).

use std::fmt::Write as _;

use tc_core::display::{escape, json_safe};
use tc_proto::v1;

use crate::client::{self, status_error, Target};
use crate::output::{emit, rfc3339};
use crate::{exit, CliError};

/// Whether a desktop session is there to open a browser in.
fn desktop() -> bool {
    ["WAYLAND_DISPLAY", "DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// `tcctl page`: asks tcd for a link that opens one page session of this user (once,
/// within a minute), prints it, and in a desktop session hands it to `xdg-open`.
pub async fn open(
    target: Target,
    request: Option<String>,
    print_only: bool,
) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let r = d
        .client
        .open_page(v1::OpenPageRequest {
            request_id: request.unwrap_or_default(),
            remote: false,
        })
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    emit(&format!("{}\n", r.url))?;
    if !print_only && desktop() {
        let spawned = std::process::Command::new("xdg-open")
            .arg(&r.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            eprintln!("could not run xdg-open ({e}): open the link above in your browser");
        }
    }
    Ok(())
}

/// `tcctl page --remote`: a link that opens a registration-only session on the remote
/// page, printed on stdout, with its QR code and what to do on stderr.
pub async fn open_remote(target: Target) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let r = d
        .client
        .open_page(v1::OpenPageRequest {
            request_id: String::new(),
            remote: true,
        })
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!("{}", crate::factor::qr(&r.url)?);
    }
    eprintln!(
        "Open this link on your phone (once, until {}), type the code from `tcctl passkey add` \
         into \"Add a passkey\", then sign in with it. The link registers a passkey and shows nothing else.",
        rfc3339(r.expires_at_ms)
    );
    emit(&format!("{}\n", r.url))
}

/// Asks tcd for a one-time registration code (for `user`, when root names one) and
/// prints it with what to do.
pub async fn passkey_add(target: Target, user: Option<String>) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let r = d
        .client
        .passkey_code(v1::PasskeyCodeRequest {
            user: user.unwrap_or_default(),
        })
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    let confirm = if d.guarded() {
        " It approves nothing until its owner confirms it: `tcctl passkey confirm ID` \
         (with their authenticator code), or root does."
    } else {
        ""
    };
    eprintln!(
        "Open the page with `tcctl page`, type this code into \"Add a passkey\" and follow \
         your browser (valid once, until {}).{confirm}",
        rfc3339(r.expires_at_ms)
    );
    emit(&format!("{}\n", r.code))
}

async fn passkeys(d: &mut client::Daemon, target: &Target) -> Result<Vec<v1::Passkey>, CliError> {
    Ok(d.client
        .list_passkeys(v1::ListPasskeysRequest {})
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner()
        .passkeys)
}

fn owner(p: &v1::Passkey) -> String {
    match p.owner_uid {
        u32::MAX => "unknown".into(),
        u => u.to_string(),
    }
}

fn line(p: &v1::Passkey) -> String {
    format!(
        "{} {:<9} uid {:<6} {:<24} added {} · last used {}",
        escape(&p.credential[..p.credential.len().min(16)]),
        if p.active { "active" } else { "UNCONFIRMED" },
        owner(p),
        escape(&p.name),
        rfc3339(p.created_at_ms),
        if p.last_used_at_ms == 0 {
            "never".into()
        } else {
            rfc3339(p.last_used_at_ms)
        }
    )
}

/// `tcctl passkey list`: yours (root: everyone's).
pub async fn passkey_list(target: Target, json: bool) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let all = passkeys(&mut d, &target).await?;
    let mut out = String::new();
    if !json && all.is_empty() {
        out.push_str("no passkey is registered\n");
    }
    for p in &all {
        if json {
            let v = serde_json::json!({
                "credential": p.credential, "name": p.name,
                "owner_uid": (p.owner_uid != u32::MAX).then_some(p.owner_uid),
                "active": p.active, "created_at_ms": p.created_at_ms,
                "last_used_at_ms": (p.last_used_at_ms != 0).then_some(p.last_used_at_ms),
            });
            let _ = writeln!(out, "{}", json_safe(&v.to_string()));
        } else {
            let _ = writeln!(out, "{}", line(p));
        }
    }
    emit(&out)
}

/// The one passkey `prefix` names among those listed (for showing it before acting).
fn named<'a>(all: &'a [v1::Passkey], prefix: &str) -> Option<&'a v1::Passkey> {
    let prefix = prefix.trim().to_ascii_lowercase();
    let mut hits = all.iter().filter(|p| p.credential.starts_with(&prefix));
    match (hits.next(), hits.next()) {
        (Some(p), None) => Some(p),
        _ => None,
    }
}

/// `tcctl passkey confirm ID`: shows the passkey, then (a human) reads their code from
/// the terminal; root confirms without one.
pub async fn passkey_confirm(target: Target, credential: String) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    if !d.guarded() {
        return Err(CliError::new(
            exit::FAILURE,
            "personal mode: a passkey is active once registered; nothing to confirm",
        ));
    }
    let all = passkeys(&mut d, &target).await?;
    let p = named(&all, &credential).ok_or_else(|| {
        CliError::new(
            exit::REFUSED,
            "no single passkey of yours starts with that id (see `tcctl passkey list`); nothing was confirmed",
        )
    })?;
    eprintln!("{}", line(p));
    let factor = if nix_uid() == 0 {
        None
    } else {
        Some(crate::factor::read_code_for(&format!(
            "confirm the passkey {} ({}) registered {}: from now on it approves your requests on the page",
            escape(&p.credential[..p.credential.len().min(16)]),
            escape(&p.name),
            rfc3339(p.created_at_ms)
        ))?)
    };
    let r = d
        .client
        .confirm_passkey(v1::ConfirmPasskeyRequest {
            credential: p.credential.clone(),
            factor,
        })
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    emit(&format!("confirmed {}\n", escape(&r.credential)))
}

/// `tcctl passkey remove ID`.
pub async fn passkey_remove(target: Target, credential: String) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let r = d
        .client
        .remove_passkey(v1::RemovePasskeyRequest { credential })
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    emit(&format!("removed {}\n", escape(&r.credential)))
}

fn nix_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}
