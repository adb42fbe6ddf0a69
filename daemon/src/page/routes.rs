//! The page's routes: the shell and its assets, the state (JSON and SSE), Decline,
//! Approve (passkey assertion, or TOTP in guarded mode) and passkey registration. Every
//! POST passes the CSRF check first; every decision is the ledger's.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use webauthn_rs::prelude::{PublicKeyCredential, RegisterPublicKeyCredential};

use super::{assets, codes, passkeys, security, sse, Page};
use crate::approvals::{is_request_id, Proof};
use crate::error::DaemonError;
use crate::factor::Approver;

/// Approvals under way in one page load (one per request id).
const MAX_CHALLENGES: usize = 16;

pub fn router(page: Arc<Page>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/requests/{id}", get(index))
        .route(
            "/assets/page.js",
            get(|| asset("text/javascript", assets::PAGE_JS)),
        )
        .route(
            "/assets/page.css",
            get(|| asset("text/css", assets::PAGE_CSS)),
        )
        .route("/api/state", get(state))
        .route("/api/events", get(events))
        .route("/api/requests/{id}/decline", post(decline))
        .route("/api/requests/{id}/approve/start", post(approve_start))
        .route("/api/requests/{id}/approve/finish", post(approve_finish))
        .route("/api/requests/{id}/approve/totp", post(approve_totp))
        .route("/api/passkeys/start", post(passkey_start))
        .route("/api/passkeys/finish", post(passkey_finish))
        .layer(middleware::from_fn_with_state(
            page.clone(),
            security::front_door,
        ))
        .with_state(page)
}

/// A refusal as the page shows it: a status and a message (JSON `{"error": …}`).
pub struct Refusal(StatusCode, String);

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
                format!("{}: {message}", reason.as_str()),
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

type Answer = Result<Response, Refusal>;

fn forbidden(why: &str) -> Refusal {
    Refusal(StatusCode::FORBIDDEN, why.into())
}

fn bad(why: &str) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, why.into())
}

fn csrf(page: &Page, h: &HeaderMap) -> Result<(), Refusal> {
    if page.sessions.csrf_ok(h) {
        Ok(())
    } else {
        Err(forbidden(
            "forbidden: missing or wrong CSRF token (reload the page)",
        ))
    }
}

fn session(page: &Page, h: &HeaderMap) -> Result<(), Refusal> {
    page.sessions
        .with(h, |_| ())
        .ok_or_else(|| forbidden("forbidden: no page session (reload the page)"))
}

fn request_id(id: &str) -> Result<(), Refusal> {
    if is_request_id(id) {
        Ok(())
    } else {
        Err(bad("not a request id"))
    }
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The shell (also for `/requests/<ID>`, which the script scrolls to): a new session.
async fn index(State(page): State<Arc<Page>>) -> Response {
    let (sid, token) = page.sessions.open();
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::SET_COOKIE, security::set_cookie(&sid)),
        ],
        assets::index(&token),
    )
        .into_response()
}

async fn state(State(page): State<Arc<Page>>, h: HeaderMap) -> Answer {
    session(&page, &h)?;
    Ok(Json(sse::snapshot(&page).await?).into_response())
}

async fn events(State(page): State<Arc<Page>>, h: HeaderMap) -> Answer {
    session(&page, &h)?;
    Ok(sse::feed(page).into_response())
}

/// Runs a ledger call on the store thread.
async fn ledger<T: Send + 'static>(
    page: &Page,
    f: impl FnOnce(&crate::ledger::Ledger) -> Result<T, DaemonError> + Send + 'static,
) -> Result<T, Refusal> {
    let l = page.ledger.clone();
    Ok(page.ledger.store.call(move || f(&l)).await?)
}

#[derive(Deserialize)]
struct DeclineBody {
    #[serde(default)]
    reason: String,
}

async fn decline(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(b): Json<DeclineBody>,
) -> Answer {
    csrf(&page, &h)?;
    request_id(&id)?;
    let i = id.clone();
    ledger(&page, move |l| l.decline(&i, &b.reason, None)).await?;
    Ok(Json(json!({ "declined": id })).into_response())
}

/// A WebAuthn challenge for approving `id`, kept in this session for `id` alone.
async fn approve_start(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
) -> Answer {
    csrf(&page, &h)?;
    request_id(&id)?;
    let keys = ledger(&page, passkeys::all).await?;
    if keys.is_empty() {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "no passkey is registered: run `tcctl passkey add` and add one on this page".into(),
        ));
    }
    let (options, state) = page
        .webauthn
        .start_passkey_authentication(&keys)
        .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, format!("webauthn: {e}")))?;
    page.sessions
        .with(&h, |s| {
            if s.approving.len() >= MAX_CHALLENGES && !s.approving.contains_key(&id) {
                s.approving.clear();
            }
            s.approving.insert(id, state);
        })
        .ok_or_else(|| forbidden("forbidden: no page session"))?;
    Ok(Json(options).into_response())
}

#[derive(Deserialize)]
struct AssertionBody {
    credential: Value,
}

/// Verifies the assertion against the challenge issued for `id` (spent either way), then
/// approves `id` in the ledger.
async fn approve_finish(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(b): Json<AssertionBody>,
) -> Answer {
    csrf(&page, &h)?;
    request_id(&id)?;
    let state = page
        .sessions
        .with(&h, |s| s.approving.remove(&id))
        .flatten()
        .ok_or_else(|| bad("no passkey challenge is open for this request (start again)"))?;
    let cred: PublicKeyCredential =
        serde_json::from_value(b.credential).map_err(|_| bad("malformed assertion"))?;
    let res = page
        .webauthn
        .finish_passkey_authentication(&cred, &state)
        .map_err(|e| {
            tracing::warn!(error = %e, "approval page: a passkey assertion did not verify");
            forbidden("the passkey assertion did not verify; nothing was approved")
        })?;
    if !res.user_verified() {
        return Err(forbidden(
            "the passkey did not verify the user; nothing was approved",
        ));
    }
    let i = id.clone();
    let approved = ledger(&page, move |l| {
        passkeys::used(l, &res)?;
        l.approve_with(&i, Proof::Passkey)
    })
    .await?;
    Ok(Json(json!({ "approved": id, "expires_at_ms": approved.expires_at_ms })).into_response())
}

#[derive(Deserialize)]
struct TotpBody {
    code: String,
}

/// Guarded mode: approves `id` with the TOTP code of the uid that raised it (the ledger's
/// factor check applies: delays, lockout, replays).
async fn approve_totp(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(b): Json<TotpBody>,
) -> Answer {
    csrf(&page, &h)?;
    request_id(&id)?;
    if page.ledger.mode() != tc_core::config::Mode::Guarded {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "personal mode has no codes: approve with a passkey".into(),
        ));
    }
    let i = id.clone();
    let approved = ledger(&page, move |l| {
        let uid = l
            .pending("")?
            .into_iter()
            .find(|p| p.request_id == i)
            .and_then(|p| p.raised_by_uid);
        let Some(uid) = uid else {
            return Err(DaemonError::refused(
                tc_core::Reason::Unknown,
                "no request with this id and a known uid is waiting",
            ));
        };
        l.approve(
            &i,
            &Approver {
                uid,
                code: Some(b.code),
            },
        )
    })
    .await?;
    Ok(Json(json!({ "approved": id, "expires_at_ms": approved.expires_at_ms })).into_response())
}

#[derive(Deserialize)]
struct CodeBody {
    code: String,
}

/// Spends a registration code from `tcctl passkey add` and starts a registration.
async fn passkey_start(
    State(page): State<Arc<Page>>,
    h: HeaderMap,
    Json(b): Json<CodeBody>,
) -> Answer {
    csrf(&page, &h)?;
    if page.code_failures.load(Ordering::SeqCst) >= codes::MAX_FAILURES {
        return Err(forbidden(
            "too many wrong codes: registration is closed until tcd restarts",
        ));
    }
    if !ledger(&page, move |l| codes::redeem(l, &b.code)).await? {
        if page.code_failures.fetch_add(1, Ordering::SeqCst) + 1 >= codes::MAX_FAILURES {
            ledger(&page, codes::void_all).await?;
        }
        return Err(forbidden(
            "wrong or expired code (get one with `tcctl passkey add`)",
        ));
    }
    let keys = ledger(&page, passkeys::all).await?;
    let exclude = keys.iter().map(|k| k.cred_id().clone()).collect();
    let (options, state) = page
        .webauthn
        .start_passkey_registration(passkeys::USER, "tc", "tc approver", Some(exclude))
        .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, format!("webauthn: {e}")))?;
    page.sessions
        .with(&h, |s| s.registering = Some(state))
        .ok_or_else(|| forbidden("forbidden: no page session"))?;
    Ok(Json(options).into_response())
}

#[derive(Deserialize)]
struct RegisterBody {
    credential: Value,
    #[serde(default)]
    name: String,
}

async fn passkey_finish(
    State(page): State<Arc<Page>>,
    h: HeaderMap,
    Json(b): Json<RegisterBody>,
) -> Answer {
    csrf(&page, &h)?;
    let state = page
        .sessions
        .with(&h, |s| s.registering.take())
        .flatten()
        .ok_or_else(|| bad("no registration is under way (type the code again)"))?;
    let cred: RegisterPublicKeyCredential =
        serde_json::from_value(b.credential).map_err(|_| bad("malformed credential"))?;
    let pk = page
        .webauthn
        .finish_passkey_registration(&cred, &state)
        .map_err(|e| {
            tracing::warn!(error = %e, "approval page: a passkey registration did not verify");
            forbidden("the passkey registration did not verify")
        })?;
    let name = if b.name.trim().is_empty() {
        "passkey".to_string()
    } else {
        b.name
    };
    ledger(&page, move |l| passkeys::add(l, &pk, &name)).await?;
    Ok(Json(json!({ "registered": true })).into_response())
}
