//! The page's routes: `/open` (a `tcctl page` link becomes a session), the shell and its
//! assets, the state (JSON and SSE), Decline, Approve (passkey assertion, or TOTP in
//! guarded mode), with a grant when asked (`grants.rs`), Revoke of a grant and passkey
//! registration; on the remote page also the passkey sign-in (`remote.rs`). Everything
//! but the assets, the closed shell and the sign-in needs a session; every POST passes
//! the CSRF check too (`checks.rs`); every decision is the ledger's (`answer.rs`).

use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use webauthn_rs::prelude::RegisterPublicKeyCredential;

use super::answer::{bad, forbidden, html, ledger, Answer, Refusal};
use super::checks::{acting, registering, session, verified_assertion};
use super::{assets, codes, grants, links, passkeys, remote, security, sse, Page};
use crate::approvals::{is_request_id, Proof};
use crate::error::DaemonError;
use crate::factor::Approver;

/// Approvals under way in one page load (one per request id).
const MAX_CHALLENGES: usize = 16;

pub fn router(page: Arc<Page>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/requests/{id}", get(index))
        .route("/open", get(open))
        .route(
            "/assets/page.js",
            get(|| asset("text/javascript", assets::PAGE_JS)),
        )
        .route(
            "/assets/page.css",
            get(|| asset("text/css", assets::PAGE_CSS)),
        )
        .route(
            "/assets/remote.js",
            get(|| asset("text/javascript", assets::REMOTE_JS)),
        )
        .route("/api/signin/start", post(remote::signin_start))
        .route("/api/signin/finish", post(remote::signin_finish))
        .route("/api/state", get(state))
        .route("/api/events", get(events))
        .route("/api/requests/{id}/decline", post(decline))
        .route("/api/requests/{id}/approve/start", post(approve_start))
        .route("/api/requests/{id}/approve/finish", post(approve_finish))
        .route("/api/requests/{id}/approve/totp", post(approve_totp))
        .route("/api/grants/{id}/revoke", post(grants::revoke))
        .route("/api/passkeys/start", post(passkey_start))
        .route("/api/passkeys/finish", post(passkey_finish))
        .layer(middleware::from_fn_with_state(
            page.clone(),
            security::front_door,
        ))
        .with_state(page)
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

/// The shell (also for `/requests/<ID>`, which the script scrolls to) for a session;
/// without one, only how to open the page.
async fn index(State(page): State<Arc<Page>>, h: HeaderMap) -> Response {
    if page.remote.is_some() {
        return remote::index(&page, &h);
    }
    match page.sessions.with(&h, |s| s.csrf.clone()) {
        Some(csrf) => html(StatusCode::OK, assets::index(&csrf)),
        None => html(StatusCode::UNAUTHORIZED, assets::closed()),
    }
}

#[derive(Deserialize)]
pub(super) struct OpenQuery {
    #[serde(default)]
    t: String,
}

/// A `tcctl page` link: spent once, from a socket of the uid that minted it, it opens a
/// session of that uid and goes on to the page (or the request it named).
async fn open(
    State(page): State<Arc<Page>>,
    Extension(security::PeerUid(peer)): Extension<security::PeerUid>,
    Query(q): Query<OpenQuery>,
) -> Response {
    if page.remote.is_some() {
        return remote::open(&page, q.t).await;
    }
    let Some(peer) = peer else {
        tracing::warn!("approval page: the uid of a client socket could not be read (/proc/self/net/tcp); no session opened");
        return html(StatusCode::FORBIDDEN, assets::spent());
    };
    let t = q.t;
    let opened = match ledger(&page, move |l| links::spend(l, &t, peer)).await {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    let Some(o) = opened else {
        return html(StatusCode::FORBIDDEN, assets::spent());
    };
    let (sid, _) = page.sessions.open(o.uid);
    let to = match o.request_id {
        Some(id) if is_request_id(&id) => format!("/requests/{id}"),
        _ => "/".into(),
    };
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, security::set_cookie(&sid, false)),
            (header::LOCATION, to),
        ],
    )
        .into_response()
}

async fn state(State(page): State<Arc<Page>>, h: HeaderMap) -> Answer {
    let v = session(&page, &h)?;
    Ok(Json(sse::snapshot(&page, v).await?).into_response())
}

async fn events(State(page): State<Arc<Page>>, h: HeaderMap) -> Answer {
    let v = session(&page, &h)?;
    Ok(sse::feed(page, v).into_response())
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
    let v = acting(&page, &h)?;
    request_id(&id)?;
    let i = id.clone();
    ledger(&page, move |l| l.decline(&i, &b.reason, Some(v.uid))).await?;
    Ok(Json(json!({ "declined": id })).into_response())
}

/// An approval's body: with `grant`, the grant the human asks for with it.
#[derive(Deserialize)]
struct StartBody {
    #[serde(default)]
    grant: Option<Value>,
}

/// The grant asked in a body, checked for shape (`None`: a plain approval).
fn grant_ask(g: Option<Value>) -> Result<Option<crate::grants::GrantAsk>, Refusal> {
    let Some(g) = g.filter(|g| !g.is_null()) else {
        return Ok(None);
    };
    let body: grants::GrantBody = serde_json::from_value(g)
        .map_err(|e| bad(&format!("malformed grant: {e}; nothing was approved")))?;
    body.ask().map(Some)
}

/// A WebAuthn challenge for approving `id` (with the grant asked, if any), kept in this
/// session for `id` alone.
async fn approve_start(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(b): Json<StartBody>,
) -> Answer {
    let v = acting(&page, &h)?;
    request_id(&id)?;
    let ask = grant_ask(b.grant)?;
    let keys = ledger(&page, move |l| passkeys::usable(l, v.uid)).await?;
    if keys.is_empty() {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "no passkey of yours is registered and confirmed: run `tcctl passkey add` and add one on this page".into(),
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
            s.approving.insert(id, (state, ask));
        })
        .ok_or_else(|| forbidden("forbidden: no page session"))?;
    Ok(Json(options).into_response())
}

#[derive(Deserialize)]
struct AssertionBody {
    credential: Value,
}

/// Verifies the assertion against the challenge issued for `id` (spent either way), then
/// approves `id` in the ledger, giving the grant asked with the challenge, if any.
async fn approve_finish(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(b): Json<AssertionBody>,
) -> Answer {
    acting(&page, &h)?;
    request_id(&id)?;
    let (state, ask) = page
        .sessions
        .with(&h, |s| s.approving.remove(&id))
        .flatten()
        .ok_or_else(|| bad("no passkey challenge is open for this request (start again)"))?;
    let res = verified_assertion(&page, b.credential, &state, "nothing was approved")?;
    let i = id.clone();
    let approved = ledger(&page, move |l| {
        let credential = hex::encode::<&[u8]>(res.cred_id().as_ref());
        // Only an active credential approves, for the human it belongs to.
        let Some(owner) = passkeys::owner(l, &credential)? else {
            return Err(DaemonError::refused(
                tc_core::Reason::NotPermitted,
                "this passkey is not registered or not confirmed; nothing was approved",
            ));
        };
        passkeys::used(l, &res)?;
        let proof = Proof::Passkey {
            owner,
            credential: &credential,
        };
        l.approve_granting(&i, proof, ask.as_ref())
    })
    .await?;
    Ok(approved_json(&id, &approved))
}

fn approved_json(id: &str, a: &crate::approvals::Approved) -> Response {
    let grant = a.grant_id.as_deref().map(tc_core::display::escape);
    Json(json!({ "approved": id, "expires_at_ms": a.expires_at_ms, "grant": grant }))
        .into_response()
}

#[derive(Deserialize)]
struct TotpBody {
    code: String,
    #[serde(default)]
    grant: Option<Value>,
}

/// Guarded mode: approves `id` with the session's human's TOTP code (the ledger's checks
/// apply: only the human who raised it, delays, lockout, replays).
async fn approve_totp(
    State(page): State<Arc<Page>>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(b): Json<TotpBody>,
) -> Answer {
    let v = acting(&page, &h)?;
    request_id(&id)?;
    if page.ledger.mode() != tc_core::config::Mode::Guarded {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "personal mode has no codes: approve with a passkey".into(),
        ));
    }
    let ask = grant_ask(b.grant)?;
    let i = id.clone();
    let approved = ledger(&page, move |l| {
        let who = Approver {
            uid: v.uid,
            code: Some(b.code),
        };
        l.approve_granting(&i, Proof::Code(&who), ask.as_ref())
    })
    .await?;
    Ok(approved_json(&id, &approved))
}

#[derive(Deserialize)]
struct CodeBody {
    code: String,
}

/// Spends a registration code of the session's human from `tcctl passkey add` and starts
/// a registration. Wrong codes count per session and per human: nobody else's.
async fn passkey_start(
    State(page): State<Arc<Page>>,
    h: HeaderMap,
    Json(b): Json<CodeBody>,
) -> Answer {
    let v = registering(&page, &h)?;
    let spent = page
        .sessions
        .with(&h, |s| s.code_failures >= codes::MAX_SESSION_FAILURES)
        .unwrap_or(true);
    if spent {
        return Err(forbidden(
            "too many wrong codes in this session: open a new one with `tcctl page`",
        ));
    }
    if !ledger(&page, move |l| codes::redeem(l, &b.code, v.uid)).await? {
        page.sessions.with(&h, |s| s.code_failures += 1);
        if page.code_failure(v.uid) {
            ledger(&page, move |l| codes::void(l, v.uid)).await?;
        }
        return Err(forbidden(
            "wrong or expired code (get one with `tcctl passkey add`)",
        ));
    }
    let keys = ledger(&page, move |l| passkeys::usable(l, v.uid)).await?;
    let exclude = keys.iter().map(|k| k.cred_id().clone()).collect();
    let label = format!("tc approver (uid {})", v.uid);
    let (options, state) = page
        .webauthn
        .start_passkey_registration(passkeys::user(v.uid), &label, &label, Some(exclude))
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
    let v = registering(&page, &h)?;
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
    let id = ledger(&page, move |l| passkeys::add(l, &pk, &name, v.uid)).await?;
    // Guarded mode: it approves nothing until its human confirms it with their code.
    let confirm = (page.ledger.mode() == tc_core::config::Mode::Guarded)
        .then(|| format!("tcctl passkey confirm {}", &id[..id.len().min(16)]));
    Ok(Json(json!({ "registered": true, "credential": id, "confirm": confirm })).into_response())
}
