//! What a handler checks of who asks: the request's session (every POST CSRF-checked;
//! allowed to act, or only to register a passkey), or a passkey assertion (user verified).

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use webauthn_rs::prelude::{AuthenticationResult, PasskeyAuthentication, PublicKeyCredential};

use super::answer::{bad, forbidden, Refusal};
use super::{security, Page, Viewer};

/// A POST's CSRF check: the session's token in the `x-tc-csrf` header.
fn csrf(page: &Page, h: &HeaderMap) -> Result<(), Refusal> {
    if page.sessions.csrf_ok(h) {
        Ok(())
    } else {
        Err(forbidden(
            "forbidden: missing or wrong CSRF token (reload the page)",
        ))
    }
}

/// The viewer of the request's session: every route but the shell needs one, with full
/// access (a registration-only session sees nothing).
pub(super) fn session(page: &Page, h: &HeaderMap) -> Result<Viewer, Refusal> {
    page.sessions
        .with(h, |s| {
            (s.access == security::Access::Full).then(|| page.viewer(s.uid))
        })
        .flatten()
        .ok_or_else(|| no_session(page))
}

/// No session: how to open one, on this page.
fn no_session(page: &Page) -> Refusal {
    let why = if page.remote.is_some() {
        "no page session: sign in with your passkey"
    } else {
        "no page session: run `tcctl page` on your terminal and open the link it prints"
    };
    Refusal(StatusCode::UNAUTHORIZED, why.into())
}

/// A passkey registration's session: CSRF-checked, any access (a registration-only
/// session is for this), allowed to act.
pub(super) fn registering(page: &Page, h: &HeaderMap) -> Result<Viewer, Refusal> {
    csrf(page, h)?;
    let v = page
        .sessions
        .with(h, |s| page.viewer(s.uid))
        .ok_or_else(|| no_session(page))?;
    if v.read_only {
        return Err(forbidden(
            "root's page session is read-only: each human registers their own passkeys",
        ));
    }
    Ok(v)
}

/// A POST's session: CSRF-checked, and allowed to act (root's guarded view is read-only).
pub(super) fn acting(page: &Page, h: &HeaderMap) -> Result<Viewer, Refusal> {
    csrf(page, h)?;
    let v = session(page, h)?;
    if v.read_only {
        return Err(forbidden(
            "root's page session is read-only: each human approves and declines their own requests",
        ));
    }
    Ok(v)
}

/// A passkey assertion checked against its challenge `state`, with user verification;
/// `else_` says what did not happen when it fails ("nothing was approved").
pub(super) fn verified_assertion(
    page: &Page,
    credential: Value,
    state: &PasskeyAuthentication,
    else_: &str,
) -> Result<AuthenticationResult, Refusal> {
    let cred: PublicKeyCredential =
        serde_json::from_value(credential).map_err(|_| bad("malformed assertion"))?;
    let res = page
        .webauthn
        .finish_passkey_authentication(&cred, state)
        .map_err(|e| {
            tracing::warn!(error = %e, "approval page: a passkey assertion did not verify");
            forbidden(&format!("the passkey assertion did not verify; {else_}"))
        })?;
    if !res.user_verified() {
        return Err(forbidden(&format!(
            "the passkey did not verify the user; {else_}"
        )));
    }
    Ok(res)
}
