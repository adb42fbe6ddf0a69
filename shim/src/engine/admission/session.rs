//! The session admission keeps for one conversation: which era each side speaks and at
//! which version, the client's capabilities and envelope, the downstream's own handshake.

use serde_json::Value;

use crate::wire::era::{self, Era};

/// What the conversation's messages have told the shim about its two sides.
#[derive(Default)]
pub(in crate::engine) struct Session {
    /// The client's capabilities from its `initialize` (legacy era).
    client_caps: Option<Value>,
    /// The client's era and protocol version, once known (`initialize` makes it legacy).
    client_era: Option<(Era, String)>,
    /// The downstream's era and protocol version, once known.
    down_era: Option<(Era, String)>,
    /// The downstream's `initialize` result when the shim did the handshake itself.
    down_init: Option<Value>,
    /// The protocol envelope of the latest modern client request.
    envelope: Option<Value>,
    /// The eras were logged.
    eras_logged: bool,
}

impl Session {
    /// Records the client's era: an `initialize` makes it legacy for the whole process,
    /// whatever came before; otherwise the first era seen stays.
    pub(in crate::engine) fn set_client_era(&mut self, e: Era, version: String) {
        match (&self.client_era, e) {
            (None, _) | (Some((Era::Modern, _)), Era::Legacy) => {
                self.client_era = Some((e, version))
            }
            _ => {}
        }
    }

    /// The line that logs the negotiated eras, once: when both are known and it was not
    /// given out before.
    pub(in crate::engine) fn eras_to_log(&mut self) -> Option<String> {
        let (Some((c, cv)), Some((d, dv)), false) =
            (&self.client_era, &self.down_era, self.eras_logged)
        else {
            return None;
        };
        let how = if self.down_init.is_some() {
            ", handshake by tc-shim"
        } else {
            ""
        };
        let l = format!("client era: {c} ({cv}), downstream era: {d} ({dv}{how})");
        self.eras_logged = true;
        Some(l)
    }

    /// The client's `initialize` capabilities (they pick the legacy route).
    pub(in crate::engine) fn set_client_caps(&mut self, caps: Option<Value>) {
        self.client_caps = caps;
    }

    pub(in crate::engine) fn client_caps(&self) -> Option<Value> {
        self.client_caps.clone()
    }

    /// The protocol version the shim's own legacy prompts are shaped for.
    pub(in crate::engine) fn prompt_version(&self) -> String {
        match &self.client_era {
            Some((Era::Legacy, v)) => v.clone(),
            _ => era::LEGACY_VERSION.to_string(),
        }
    }

    /// Keeps the envelope of the latest modern client request (for the shim's own).
    pub(in crate::engine) fn note_envelope(&mut self, meta: &Value) {
        self.envelope = Some(era::envelope(meta));
    }

    /// The downstream's era, once known.
    pub(in crate::engine) fn down_era(&self) -> Option<Era> {
        self.down_era.as_ref().map(|(e, _)| *e)
    }

    pub(in crate::engine) fn down_legacy(&self) -> bool {
        self.down_era() == Some(Era::Legacy)
    }

    /// The downstream answered `server/discover`: it is modern.
    pub(in crate::engine) fn set_down_modern(&mut self, version: String) {
        self.down_era = Some((Era::Modern, version));
    }

    /// The shim did the legacy handshake itself and got `init`.
    pub(in crate::engine) fn set_down_handshake(&mut self, version: String, init: Value) {
        self.down_era = Some((Era::Legacy, version));
        self.down_init = Some(init);
    }

    /// The answer to the client's own `initialize` agreed to `version`: the downstream is
    /// legacy (unless known already), and the client's prompts are shaped for `version`,
    /// not the newest one it asked for.
    pub(in crate::engine) fn agreed(&mut self, version: String) {
        if self.down_era.is_none() {
            self.down_era = Some((Era::Legacy, version.clone()));
        }
        if let Some((Era::Legacy, cv)) = &mut self.client_era {
            *cv = version;
        }
    }

    /// The downstream's `initialize` result, when the shim did the handshake itself.
    pub(in crate::engine) fn down_init(&self) -> Option<Value> {
        self.down_init.clone()
    }

    /// A legacy downstream's `capabilities` (null when the client did the handshake).
    pub(in crate::engine) fn down_capabilities(&self) -> Value {
        let caps = self.down_init.as_ref().and_then(|i| i.get("capabilities"));
        caps.cloned().unwrap_or(Value::Null)
    }

    /// Puts the modern envelope on the shim's own request `params` when the downstream is
    /// modern and they carry none.
    pub(in crate::engine) fn envelop(&self, params: &mut Value) {
        if !matches!(self.down_era, Some((Era::Modern, _))) {
            return;
        }
        if let Some(p) = params.as_object_mut() {
            if !p.contains_key("_meta") {
                let env = self.envelope.clone().unwrap_or_else(era::default_envelope);
                p.insert("_meta".into(), env);
            }
        }
    }
}
