//! What a page handler answers: a response or a [`Refusal`] (a status and an escaped message,
//! what a [`DaemonError`] becomes too); [`ledger`] runs a ledger call on the store thread.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::Page;
use crate::error::DaemonError;
use crate::ledger::Ledger;

/// A refusal as the page shows it: a status and a message (JSON `{"error": …}`, escaped:
/// a refusal may quote what the agent sent, a path or an argument's name).
pub struct Refusal(pub(super) StatusCode, pub(super) String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<DaemonError> for Refusal {
    fn from(e: DaemonError) -> Self {
        match e {
            DaemonError::Refused { reason, message } => Refusal(
                StatusCode::CONFLICT,
                tc_core::display::escape(&format!("{}: {message}", reason.as_str())).into_owned(),
            ),
            other => {
                tracing::warn!(error = %other, "approval page: internal error");
                Refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error (see tcd's log)".into(),
                )
            }
        }
    }
}

/// What a handler answers.
pub(super) type Answer = Result<Response, Refusal>;

/// 403, with why.
pub(super) fn forbidden(why: &str) -> Refusal {
    Refusal(StatusCode::FORBIDDEN, why.into())
}

/// 400, with why.
pub(super) fn bad(why: &str) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, why.into())
}

/// An HTML page with `status`.
pub(super) fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Runs a ledger call on the store thread.
pub(super) async fn ledger<T: Send + 'static>(
    page: &Page,
    f: impl FnOnce(&Ledger) -> Result<T, DaemonError> + Send + 'static,
) -> Result<T, Refusal> {
    let l = page.ledger.clone();
    Ok(page.ledger.store.call(move || f(&l)).await?)
}
