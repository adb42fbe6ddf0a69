//! `tcctl approve [ID]` and `tcctl decline ID`: the human's answer to a raised request,
//! shown in full first, confirmed on the terminal (and, in guarded mode, with their code).

use std::fmt::Write as _;
use std::io::Write as _;

use clap::Args;
use tc_core::display::{escape, reescape};
use tc_proto::v1;

use crate::client::{self, status_error, Target};
use crate::output::rfc3339;
use crate::{exit, tty, CliError};

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The request id from the refusal or `tcctl pending` (none: pick from the waiting
    /// requests on the terminal, newest first).
    pub id: Option<String>,
    /// Only requests of this vault (when picking).
    #[arg(long)]
    pub vault: Option<String>,
    /// Do not ask for confirmation (personal mode only; refused in guarded mode).
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub grant: crate::grants::GrantArgs,
}

#[derive(Debug, Args)]
pub struct DeclineArgs {
    /// The request id from the refusal or `tcctl pending`.
    pub id: String,
    /// Why, for the agent (it is shown its reason with the refusal).
    #[arg(long)]
    pub reason: Option<String>,
}

fn tty_error(e: tty::TtyError) -> CliError {
    CliError::new(exit::FAILURE, format!("nothing was approved: {e}"))
}

/// Approves one raised request after showing it in full.
pub async fn approve(target: Target, a: ApproveArgs) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let socket = &target.path;
    let st = d
        .client
        .status(v1::StatusRequest {})
        .await
        .map_err(|s| status_error(socket, &s))?
        .into_inner();
    let guarded = st.mode != "personal";
    if a.yes && guarded {
        return Err(CliError::new(
            exit::FAILURE,
            "--yes is refused in guarded mode: an approval is confirmed on the terminal, with your code",
        ));
    }
    let all = d
        .client
        .list_pending(v1::ListPendingRequest {
            vault: a.vault.clone().unwrap_or_default(),
        })
        .await
        .map_err(|s| status_error(socket, &s))?
        .into_inner()
        .requests;
    let now = tc_core::now_ms();
    let chosen = match &a.id {
        Some(id) => {
            let p = all
                .into_iter()
                .find(|p| &p.request_id == id)
                .ok_or_else(|| {
                    CliError::new(
                        exit::REFUSED,
                        format!("no request {} is waiting (see `tcctl pending`)", escape(id)),
                    )
                })?;
            if p.status != "pending" {
                return Err(CliError::new(
                    exit::REFUSED,
                    format!(
                        "request {} is {}, not pending",
                        escape(id),
                        escape(&p.status)
                    ),
                ));
            }
            print_request(&p, now);
            if !a.yes && !tty::confirm(&question(&a, &p)).map_err(tty_error)? {
                return Err(CliError::new(exit::FAILURE, "not approved"));
            }
            p
        }
        None => pick(all, now, &a)?,
    };
    let factor = if guarded {
        let code = tty::read_code("Code from your authenticator app: ").map_err(tty_error)?;
        Some(v1::Factor { totp: code })
    } else {
        None
    };
    let r = d
        .client
        .approve(v1::ApproveRequest {
            request_id: chosen.request_id.clone(),
            factor,
            grant: a.grant.scope(),
        })
        .await
        .map_err(|s| status_error(socket, &s))?
        .into_inner();
    eprintln!(
        "approved {}: the agent's identical retry runs it once (until {})",
        escape(&chosen.request_id),
        rfc3339(r.expires_at_ms)
    );
    if !r.grant_id.is_empty() {
        eprintln!(
            "granted {}: similar calls run without asking until it ends (tcctl grants; tcctl revoke {})",
            escape(&r.grant_id),
            escape(&r.grant_id)
        );
    }
    Ok(())
}

/// What the human is asked: the call, and with `--grant`, what similar calls it lets through.
fn question(a: &ApproveArgs, p: &v1::PendingRequest) -> String {
    if a.grant.grant {
        format!("Approve this call, {}?", a.grant.describe(p))
    } else {
        "Approve this call?".into()
    }
}

/// Guarded mode's `tcctl elicit`: the raised request the token would be minted for,
/// shown in full as `approve` shows it, and confirmed on the terminal, before any code is
/// read. A hash alone is nothing a human can check: the agent could relay the line of a
/// call it chose and describe it as another.
pub async fn confirm_for_elicit(
    d: &mut client::Daemon,
    socket: &std::path::Path,
    b: &v1::Binding,
) -> Result<(), CliError> {
    let all = d
        .client
        .list_pending(v1::ListPendingRequest {
            vault: b.vault.clone(),
        })
        .await
        .map_err(|s| status_error(socket, &s))?
        .into_inner()
        .requests;
    let p = all
        .into_iter()
        .find(|p| p.binding.as_ref() == Some(b) && p.status == "pending")
        .ok_or_else(|| {
            CliError::new(
                exit::REFUSED,
                "no blocked call with this hash, tool and caller is waiting in this vault (see \
                 `tcctl pending`); nothing was asked and nothing minted",
            )
        })?;
    // No terminal is a refusal, as for the code itself, before anything is shown; the
    // request goes to stderr (stdout carries the token and nothing else).
    if !tty::available() {
        return Err(crate::factor::tty_error(tty::TtyError::NoTerminal(
            std::io::Error::new(std::io::ErrorKind::NotFound, "/dev/tty cannot be opened"),
        )));
    }
    eprint!("{}", render_request(&p, tc_core::now_ms()));
    if !tty::confirm("Mint a single-use token for this call?").map_err(crate::factor::tty_error)? {
        return Err(CliError::new(exit::FAILURE, "not approved"));
    }
    Ok(())
}

/// No id given: offers the waiting requests one by one, newest first.
fn pick(
    all: Vec<v1::PendingRequest>,
    now: i64,
    a: &ApproveArgs,
) -> Result<v1::PendingRequest, CliError> {
    let waiting: Vec<_> = all.into_iter().filter(|p| p.status == "pending").collect();
    if waiting.is_empty() {
        return Err(CliError::new(
            exit::FAILURE,
            "nothing is waiting for confirmation",
        ));
    }
    if !tty::available() {
        return Err(CliError::new(
            exit::FAILURE,
            "no request id given and no terminal to pick one on: run `tcctl approve ID`",
        ));
    }
    let n = waiting.len();
    for (i, p) in waiting.into_iter().enumerate() {
        eprintln!("--- {} of {n} (newest first) ---", i + 1);
        print_request(&p, now);
        if tty::confirm(&question(a, &p)).map_err(tty_error)? {
            return Ok(p);
        }
    }
    Err(CliError::new(exit::FAILURE, "nothing was approved"))
}

/// Shows a request in full: every argument, escaped as everything tcctl shows.
fn print_request(p: &v1::PendingRequest, now: i64) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(render_request(p, now).as_bytes())
        .and_then(|()| out.flush());
}

/// A request as `approve` shows it, every text escaped.
fn render_request(p: &v1::PendingRequest, now: i64) -> String {
    let b = p.binding.clone().unwrap_or_default();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "request {} · {}",
        escape(&p.request_id),
        escape(&p.status)
    );
    let _ = writeln!(o, "tool:      {}", escape(&b.tool));
    let _ = writeln!(o, "vault:     {}", escape(&b.vault));
    let _ = writeln!(o, "caller:    {}", escape(&b.caller));
    let _ = writeln!(
        o,
        "raised:    {} ({} s ago) · time left: {} s",
        rfc3339(p.raised_at_ms),
        (now - p.raised_at_ms).max(0) / 1000,
        (p.expires_at_ms - now).max(0) / 1000
    );
    let covers = if p.covers.is_empty() {
        "(not given)"
    } else {
        &p.covers
    };
    let _ = writeln!(o, "covers:    {}", escape(covers));
    let _ = writeln!(o, "state:     {}", escape(&p.state_fp));
    let _ = writeln!(o, "arguments:");
    // Pretty-printed and escaped line by line, as on the approval page.
    for line in tc_core::display::pretty_args(&p.args_json, &p.summary).lines() {
        let _ = writeln!(o, "  {line}");
    }
    if !p.preview.is_empty() {
        let _ = writeln!(o, "preview:");
        o.push_str(&preview(&p.preview, colour()));
    }
    o.push_str(&recap(p, &b));
    o
}

/// Arguments listed one a line in [`recap`]; past that it says how many it left out.
const RECAP_ARGS: usize = 24;
/// The longest value [`recap`] shows (escaped characters; longer ones are clipped and
/// give their length).
const RECAP_VALUE: usize = 100;

/// What is approved, once more, just above the question: the full view can be long
/// enough (a huge value, a blank run, a long preview) to scroll the request's head and
/// its other arguments out of sight, so they are repeated here, each argument on one
/// short line. Read from the arguments tcd checked against the hash, not the summary.
/// (The page shows one request per card, its head always in view.)
fn recap(p: &v1::PendingRequest, b: &v1::Binding) -> String {
    use tc_core::display::clip;
    let mut o = format!(
        "=== you are approving request {}: `{}` on vault {}, caller {}\n",
        escape(&p.request_id),
        escape(&b.tool),
        escape(&b.vault),
        escape(&b.caller)
    );
    if p.args_json.is_empty() {
        o.push_str("    (the arguments were not sent: the approval binds their hash only)\n");
        return o;
    }
    let args = serde_json::from_str::<serde_json::Value>(&p.args_json).ok();
    let Some(serde_json::Value::Object(map)) = args else {
        // Cut by tcd (over its size limit), or not an object: the raiser's summary,
        // which names every argument and puts the gate's first.
        let _ = writeln!(
            o,
            "    (the arguments are too long to recap one by one; the raiser's summary:)\n    {}",
            reescape(&p.summary)
        );
        return o;
    };
    // The arguments the approval covers first (named in `covers`, as the shim writes
    // them), so filler arguments cannot push them out of the recap. `covers` is the
    // raiser's text: it only orders what is shown; every argument is above in full.
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| (!p.covers.contains(&format!("`{}`", escape(k))), *k));
    for k in keys.iter().take(RECAP_ARGS) {
        let name = escape(&serde_json::Value::String((*k).clone()).to_string()).into_owned();
        let value = escape(&tc_core::hash::canonical_json(&map[*k])).into_owned();
        let _ = writeln!(
            o,
            "    {} = {}",
            clip(&name, RECAP_VALUE),
            clip(&value, RECAP_VALUE)
        );
    }
    if keys.len() > RECAP_ARGS {
        let _ = writeln!(
            o,
            "    … and {} more arguments (all {} are shown in full above)",
            keys.len() - RECAP_ARGS,
            keys.len()
        );
    }
    o
}

/// Colour only on a terminal, and not when `NO_COLOR` is set.
fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The gate's preview, indented, each line escaped (`tc_core::preview::lines`); removed
/// lines red, added green, hunks cyan when `colour`.
fn preview(text: &str, colour: bool) -> String {
    use tc_core::preview::LineKind;
    let mut o = String::new();
    for (kind, line) in tc_core::preview::lines(text) {
        let sgr = match kind {
            LineKind::Removed => "31",
            LineKind::Added => "32",
            LineKind::Hunk => "36",
            LineKind::Header => "1",
            LineKind::Note | LineKind::Context => "",
        };
        if colour && !sgr.is_empty() {
            let _ = writeln!(o, "  \x1b[{sgr}m{line}\x1b[0m");
        } else {
            let _ = writeln!(o, "  {line}");
        }
    }
    o
}

/// Declines one raised request.
pub async fn decline(target: Target, a: DeclineArgs) -> Result<(), CliError> {
    let mut d = client::connect(&target).await?;
    let socket = &target.path;
    d.client
        .decline(v1::DeclineRequest {
            request_id: a.id.clone(),
            reason: a.reason.unwrap_or_default(),
        })
        .await
        .map_err(|s| status_error(socket, &s))?;
    eprintln!(
        "declined {}: the agent's retries of that call are refused",
        escape(&a.id)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preview_is_escaped_and_coloured_only_when_asked() {
        let p = "--- a\n+++ a (after the write)\n@@ -1 +1 @@\n-old\n+new\u{1b}[2J\n";
        assert_eq!(
            preview(p, false),
            "  --- a\n  +++ a (after the write)\n  @@ -1 +1 @@\n  -old\n  +new⟨U+001B⟩[2J\n"
        );
        let c = preview(p, true);
        assert!(c.contains("  \x1b[31m-old\x1b[0m\n"), "{c:?}");
        assert!(c.contains("  \x1b[32m+new⟨U+001B⟩[2J\x1b[0m\n"), "{c:?}");
    }
}
