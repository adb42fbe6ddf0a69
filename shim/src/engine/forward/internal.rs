//! The shim's own requests to the downstream (`tools/list` before the client asked, a
//! probe target, the era handshake): in their own id space, each awaited with a timeout.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::engine::{Shim, OWN_ID_PREFIX};

/// How long an internal request (tools/list, probe) may take.
const INTERNAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the shim's own request to the downstream got no result.
#[derive(Debug, thiserror::Error)]
pub enum InternalError {
    #[error("the downstream MCP server exited")]
    Exited,
    #[error("the downstream MCP server is not running")]
    NotRunning,
    #[error("the downstream did not answer {method} within {INTERNAL_TIMEOUT:?}")]
    Timeout { method: String },
    /// It answered with a JSON-RPC error.
    #[error("downstream {method} failed: {error}")]
    Failed { method: String, error: Value },
}

impl Shim {
    /// Sends the shim's own request downstream and waits for its result.
    pub(in crate::engine) async fn internal(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, InternalError> {
        let resp = self.internal_raw(method, params).await?;
        if let Some(e) = resp.get("error") {
            return Err(InternalError::Failed {
                method: method.to_string(),
                error: e.clone(),
            });
        }
        Ok(resp.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Sends the shim's own request downstream (in its own id space, with the modern
    /// envelope when the downstream is modern) and waits for the whole response.
    pub(in crate::engine) async fn internal_raw(
        &self,
        method: &str,
        mut params: Value,
    ) -> Result<Value, InternalError> {
        let id = format!(
            "{OWN_ID_PREFIX}{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if st.out.gone() {
                return Err(InternalError::Exited);
            }
            st.session.envelop(&mut params);
            st.out.own(id.clone(), tx);
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if !self.send_child(msg.to_string().into_bytes(), None) {
            self.lock().out.own_answered(&id);
            return Err(InternalError::NotRunning);
        }
        match tokio::time::timeout(INTERNAL_TIMEOUT, rx).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) => Err(InternalError::Exited),
            Err(_) => {
                self.lock().out.own_answered(&id);
                Err(InternalError::Timeout {
                    method: method.to_string(),
                })
            }
        }
    }
}
