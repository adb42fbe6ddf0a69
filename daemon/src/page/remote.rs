//! The page off the machine (`[approvals] remote`): the same page over HTTPS on a
//! network address, answering only to its `public_url`, behind a passkey sign-in.
//!
//! No socket there names a uid, so: a session is opened by a passkey assertion (user
//! verified; the session is its owner's) or, for registering a passkey only, by a
//! `tcctl page --remote` link. Without a session it shows the sign-in and nothing else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand::RngCore;
use serde::Deserialize;
use serde_json::{json, Value};
use tc_core::config::RemoteSpec;
use webauthn_rs::prelude::{PasskeyAuthentication, Url};
use webauthn_rs::{Webauthn, WebauthnBuilder};

use super::answer::{bad, html, ledger, Answer, Refusal};
use super::checks::verified_assertion;
use super::security::{self, Access};
use super::{assets, links, passkeys, Page};
use crate::error::DaemonError;
use crate::ledger::Ledger;
use crate::record::NewEvent;

/// Sign-ins under way at once (the oldest goes first): anyone who reaches the page may
/// start one, so they are few and short-lived.
const MAX_SIGNINS: usize = 32;
const SIGNIN_TTL: Duration = Duration::from_secs(120);

/// What only the remote page has.
pub struct Remote {
    pub origin: String,
    /// Sign-in challenges issued, by a random id the page sends back (no session yet).
    signins: Mutex<HashMap<String, (PasskeyAuthentication, Instant)>>,
}

impl Remote {
    /// The remote page's own state, answering to `origin`.
    pub fn new(origin: String) -> Remote {
        Remote {
            origin,
            signins: Mutex::default(),
        }
    }
}

/// The relying party: `public_url`'s host, its origin, user verification required.
pub fn webauthn(spec: &RemoteSpec) -> anyhow::Result<Webauthn> {
    let origin = Url::parse(&spec.origin)?;
    Ok(WebauthnBuilder::new(&spec.rp_id, &origin)?
        .rp_name("tc approvals")
        .build()?)
}

/// `/` and `/requests/<ID>`: the page for a signed-in session; the registration form for
/// a registration link's session; else the sign-in, with nothing of tc's state in it.
pub fn index(page: &Page, h: &HeaderMap) -> Response {
    match page.sessions.with(h, |s| (s.access, s.csrf.clone())) {
        Some((Access::Full, csrf)) => html(StatusCode::OK, assets::index(&csrf)),
        Some((Access::Register, csrf)) => html(StatusCode::OK, assets::remote("register", &csrf)),
        None => html(StatusCode::UNAUTHORIZED, assets::remote("signin", "")),
    }
}

/// `/open?t=UID-SECRET`: a `tcctl page --remote` link opens a registration-only session.
pub async fn open(page: &Page, t: String) -> Response {
    let uid = match ledger(page, move |l| links::spend_remote(l, &t)).await {
        Ok(u) => u,
        Err(r) => return r.into_response(),
    };
    let Some(uid) = uid else {
        return html(StatusCode::FORBIDDEN, assets::remote_spent());
    };
    let (sid, _) = page.sessions.open_with(uid, Access::Register);
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, security::set_cookie(&sid, true)),
            (header::LOCATION, "/".to_string()),
        ],
    )
        .into_response()
}

fn remote(page: &Page) -> Result<&Remote, Refusal> {
    page.remote
        .as_ref()
        .ok_or_else(|| Refusal(StatusCode::NOT_FOUND, "not found".into()))
}

fn random_id() -> String {
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// Every active passkey (any human's: the assertion says whose session it opens).
fn all_active(l: &Ledger) -> Result<Vec<webauthn_rs::prelude::Passkey>, DaemonError> {
    let texts = l.store.read(|c| Ok(c.usable_passkeys(false, 0)?))?;
    texts
        .iter()
        .map(|t| {
            serde_json::from_str(t)
                .map_err(|e| DaemonError::Internal(format!("passkey store: {e}")))
        })
        .collect()
}

/// `POST /api/signin/start`: a challenge over the active passkeys, kept under a random id.
pub async fn signin_start(State(page): State<Arc<Page>>) -> Answer {
    let r = remote(&page)?;
    let keys = ledger(&page, all_active).await?;
    if keys.is_empty() {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "no passkey is registered yet: run `tcctl page --remote` on your computer and open its link here".into(),
        ));
    }
    let (options, state) = page
        .webauthn
        .start_passkey_authentication(&keys)
        .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, format!("webauthn: {e}")))?;
    let id = random_id();
    let mut m = r.signins.lock().unwrap_or_else(|p| p.into_inner());
    m.retain(|_, (_, at)| at.elapsed() < SIGNIN_TTL);
    while m.len() >= MAX_SIGNINS {
        let oldest = m
            .iter()
            .min_by_key(|(_, (_, at))| *at)
            .map(|(k, _)| k.clone());
        oldest.map(|k| m.remove(&k));
    }
    m.insert(id.clone(), (state, Instant::now()));
    Ok(Json(json!({ "id": id, "options": options })).into_response())
}

#[derive(Deserialize)]
pub struct SigninBody {
    id: String,
    credential: Value,
}

/// `POST /api/signin/finish`: the assertion over the challenge `id` (spent either way),
/// user verified, from an active passkey: a full session of its owner.
pub async fn signin_finish(State(page): State<Arc<Page>>, Json(b): Json<SigninBody>) -> Answer {
    let r = remote(&page)?;
    let state = {
        let mut m = r.signins.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&b.id)
            .filter(|(_, at)| at.elapsed() < SIGNIN_TTL)
            .map(|(s, _)| s)
    };
    let state = state.ok_or_else(|| bad("no sign-in is under way (start again)"))?;
    let res = verified_assertion(&page, b.credential, &state, "not signed in")?;
    let guarded = page.ledger.mode() == tc_core::config::Mode::Guarded;
    let uid = ledger(&page, move |l| {
        let credential = hex::encode::<&[u8]>(res.cred_id().as_ref());
        let owner = match passkeys::owner(l, &credential)? {
            Some(Some(uid)) => uid,
            // Registered before owners were recorded: personal mode's one human.
            Some(None) if !guarded => nix::unistd::getuid().as_raw(),
            _ => {
                return Err(DaemonError::refused(
                    tc_core::Reason::NotPermitted,
                    "this passkey is not registered or not confirmed; not signed in",
                ))
            }
        };
        passkeys::used(l, &res)?;
        signed_in(l, owner)?;
        Ok(owner)
    })
    .await?;
    let (sid, _) = page.sessions.open(uid);
    tracing::info!(uid, origin = %r.origin, "approval page (remote): signed in");
    Ok((
        [(header::SET_COOKIE, security::set_cookie(&sid, true))],
        Json(json!({ "signed_in": true })),
    )
        .into_response())
}

/// Records a remote sign-in (a new page session of `uid`) in the audit log.
fn signed_in(l: &Ledger, uid: u32) -> Result<(), DaemonError> {
    l.store.write(|_, evs| {
        evs.push(NewEvent {
            kind: tc_core::codes::events::PAGE_OPENED,
            detail: json!({ "uid": uid, "remote": true, "access": "full" }),
            owner: Some(uid),
            ..Default::default()
        });
        Ok(Ok(()))
    })
}
