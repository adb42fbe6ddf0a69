//! Eras: which protocol era the client and the downstream speak (an `initialize` makes a
//! side legacy; a modern client request makes the shim probe the downstream's).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::engine::forward::internal::InternalError;
use crate::engine::forward::table::Pending;
use crate::engine::Shim;
use crate::wire::era::{self, Era};
use crate::wire::jsonrpc;

impl Shim {
    /// Records the client's era (an `initialize` selects legacy for the whole process).
    pub(in crate::engine) fn set_client_era(&self, e: Era, version: String) {
        self.lock().session.set_client_era(e, version);
        self.note_eras();
    }

    /// Logs the negotiated eras once both are known.
    pub(in crate::engine) fn note_eras(&self) {
        let line = self.lock().session.eras_to_log();
        if let Some(l) = line {
            tracing::info!("{l}");
        }
    }

    /// A legacy downstream's `capabilities` (which `list_changed` notifications it sends
    /// unasked; null when the client did the handshake itself), or None for a 2026-07-28
    /// one; found out first on behalf of a modern request with envelope `meta`.
    pub async fn legacy_capabilities(&self, meta: &Value) -> Result<Option<Value>, InternalError> {
        if self.ensure_down_era(meta).await? != Era::Legacy {
            return Ok(None);
        }
        Ok(Some(self.lock().session.down_capabilities()))
    }

    /// Finds out (once) which era the downstream speaks, on behalf of a modern client
    /// request with envelope `meta`: probes `server/discover`; on an error answer it does
    /// the legacy `initialize` handshake itself, in its own id space.
    pub(in crate::engine) async fn ensure_down_era(
        &self,
        meta: &Value,
    ) -> Result<Era, InternalError> {
        if let Some(e) = self.lock().session.down_era() {
            return Ok(e);
        }
        // Boxed: the probe's state would otherwise sit in every call's task, known era or not.
        Box::pin(self.probe_down_era(meta)).await
    }

    /// [`Shim::ensure_down_era`] once the era is not known yet.
    async fn probe_down_era(&self, meta: &Value) -> Result<Era, InternalError> {
        let _probe = self.probe.lock().await;
        if let Some(e) = self.lock().session.down_era() {
            return Ok(e);
        }
        let probe = self
            .internal_raw("server/discover", json!({"_meta": era::envelope(meta)}))
            .await?;
        if probe.get("result").is_some_and(Value::is_object) {
            let v = era::meta_version(meta);
            self.lock().session.set_down_modern(v);
            self.note_eras();
            return Ok(Era::Modern);
        }
        let refusal = probe.get("error").cloned().unwrap_or_default();
        tracing::debug!(
            "downstream refused server/discover ({refusal}); doing the legacy handshake"
        );
        let init = self
            .internal("initialize", era::initialize_params())
            .await?;
        let version = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(era::LEGACY_VERSION)
            .to_string();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.send_child(note.to_string().into_bytes(), None);
        self.lock().session.set_down_handshake(version, init);
        self.note_eras();
        Ok(Era::Legacy)
    }

    /// Handles a client's `server/discover`: forwarded to a modern downstream, answered by
    /// the shim for a legacy one.
    pub(in crate::engine) async fn handle_discover(
        self: Arc<Self>,
        id: Value,
        meta: Value,
        line: Vec<u8>,
    ) {
        match self.ensure_down_era(&meta).await {
            Ok(Era::Modern) => self.forward_request(&id, Pending::Plain, None, line),
            Ok(Era::Legacy) => {
                let init = self.lock().session.down_init();
                match init {
                    Some(init) => {
                        self.send_client(&jsonrpc::response(&id, era::discover_result(&init)))
                    }
                    // The client did the handshake itself: let the downstream answer.
                    None => self.forward_request(
                        &id,
                        Pending::Plain,
                        Some("server/discover".into()),
                        line,
                    ),
                }
            }
            Err(e) => self.send_client(&jsonrpc::error(
                &id,
                jsonrpc::INTERNAL_ERROR,
                format!("cannot reach the downstream MCP server: {e}"),
            )),
        }
    }

    /// Forwards a modern client request once the downstream's era is known.
    pub(in crate::engine) async fn forward_modern(
        self: Arc<Self>,
        id: Value,
        kind: Pending,
        meta: Value,
        method: String,
        line: Vec<u8>,
    ) {
        if let Err(e) = self.ensure_down_era(&meta).await {
            tracing::warn!("could not find out the downstream's era: {e}");
        }
        self.forward_request(&id, kind, Some(method), line);
    }
}
