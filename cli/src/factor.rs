//! Guarded mode's second factor from the CLI: `tcctl enroll totp` and `tcctl unlock`
//! (root), and the code an approving command reads from the controlling terminal.

use tc_core::Reason;
use tc_proto::v1;

use crate::client::{self, status_error, Target};
use crate::tty::{self, TtyError};
use crate::{exit, CliError};

/// How many codes `tcctl enroll totp` asks for before giving up.
const CONFIRM_TRIES: u32 = 3;

/// A terminal failure as a CLI error: no terminal, or no code, refuses the approval.
pub(crate) fn tty_error(e: TtyError) -> CliError {
    match e {
        TtyError::NoTerminal(_) | TtyError::NoCode => {
            CliError::new(exit::REFUSED, format!("refused: no code, no approval: {e}"))
        }
        TtyError::Io(_) => CliError::new(exit::FAILURE, e.to_string()),
    }
}

/// Reads the human's code for an approval from the controlling terminal (never from an
/// argument, the environment or a pipe); `what` says what is being approved.
pub fn read_approval_code(what: &str) -> Result<v1::Factor, CliError> {
    read_code_for(&format!("approve {what}"))
}

/// Reads the human's code from the controlling terminal to `action` (a verb phrase).
pub fn read_code_for(action: &str) -> Result<v1::Factor, CliError> {
    let totp = tty::read_code(&format!(
        "tc (guarded mode): {action}?\nEnter the 6-digit code from your authenticator app to go ahead (Ctrl-C to refuse): "
    ))
    .map_err(tty_error)?;
    Ok(v1::Factor { totp })
}

/// The otpauth URI as a QR code of Unicode half blocks, light on dark (terminals' usual
/// colours; scanners read either polarity).
pub(crate) fn qr(uri: &str) -> Result<String, CliError> {
    use qrcode::render::unicode::Dense1x2;
    let code = qrcode::QrCode::new(uri.as_bytes())
        .map_err(|e| CliError::new(exit::FAILURE, format!("cannot draw the QR code: {e}")))?;
    Ok(code
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build())
}

/// `tcctl enroll totp --user NAME`: a new secret (replacing the user's factor), shown
/// once, confirmed with one code typed on this terminal.
pub async fn enroll_totp(target: &Target, user: &str) -> Result<(), CliError> {
    let socket = target.path.as_path();
    let shown_user = tc_core::display::escape(user);
    // The confirmation code is read from the terminal: check for one before tcd makes
    // (and replaces the user's factor with) a secret nobody could confirm.
    if !tty::available() {
        return Err(tty_error(TtyError::NoTerminal(std::io::Error::from(
            std::io::ErrorKind::NotFound,
        ))));
    }
    let mut d = client::connect(target).await?;
    let r = d
        .client
        .enroll_factor(v1::EnrollFactorRequest { user: user.into() })
        .await
        .map_err(|s| status_error(socket, &s))?
        .into_inner();
    let shown = format!(
        "Scan this QR code with the authenticator app of {shown_user} (shown once; tcd keeps the secret):\n\n{}\n\n{}\nsecret (base32, to type in instead): {}\n\n",
        qr(&r.otpauth_uri)?,
        r.otpauth_uri,
        r.secret_base32
    );
    crate::output::emit(&shown)?;
    for n in 1..=CONFIRM_TRIES {
        let code = match tty::read_code(&format!(
            "code shown by the app, to confirm ({n} of {CONFIRM_TRIES}): "
        )) {
            Ok(c) => c,
            Err(TtyError::NoCode) => {
                eprintln!("tcctl: six digits expected");
                continue;
            }
            Err(e) => return Err(tty_error(e)),
        };
        let sent = d
            .client
            .confirm_factor(v1::ConfirmFactorRequest {
                user: user.into(),
                factor: Some(v1::Factor { totp: code }),
            })
            .await;
        match sent {
            Ok(_) => {
                return crate::output::emit(&format!(
                    "enrolled: approvals by {shown_user} now need a code from this app\n"
                ))
            }
            Err(s)
                if matches!(
                    tc_proto::reason(&s),
                    Some(Reason::FactorInvalid | Reason::FactorDelay | Reason::FactorReplayed)
                ) =>
            {
                eprintln!("tcctl: {}", tc_core::display::escape(s.message()));
            }
            Err(s) => return Err(status_error(socket, &s)),
        }
    }
    Err(CliError::new(
        exit::REFUSED,
        format!(
            "not confirmed: {shown_user} has no working factor; run `tcctl enroll totp --user {shown_user}` again"
        ),
    ))
}

/// `tcctl unlock --user NAME`: lifts a lock after too many wrong codes.
pub async fn unlock(target: &Target, user: &str) -> Result<(), CliError> {
    let socket = target.path.as_path();
    let mut d = client::connect(target).await?;
    d.client
        .unlock_factor(v1::UnlockFactorRequest { user: user.into() })
        .await
        .map_err(|s| status_error(socket, &s))?;
    crate::output::emit(&format!(
        "unlocked: the factor of {} accepts codes again\n",
        tc_core::display::escape(user)
    ))
}
