//! Turns: a `tools/call`'s place in the barrier (`barrier.rs`), so no change made through
//! this shim lands between a call's judgment and the downstream running it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::engine::admission::lean;
use crate::engine::barrier::{Kind, Place, Ticket};
use crate::engine::judge::policy;
use crate::engine::{key, Shim};
use crate::wire::ids::IdKey;
use crate::wire::value::at;

/// How long a forwarded call the client cancelled keeps its place in the barrier when the
/// server does not answer it.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

impl Shim {
    /// The barrier place a `tools/call` takes on arrival: exclusive for a tool with a gate
    /// entry (judged against the vault's state, `when` included), none for a tool the
    /// server declares read-only, shared for any other, which may change what a judged
    /// call looked at. A tool not known yet counts as one that may change the vault.
    pub(in crate::engine) fn place_for(
        &self,
        msg: &Value,
        facade: Option<&lean::FacadeCall>,
    ) -> Option<Place> {
        let call = match facade {
            None => msg,
            Some(lean::FacadeCall::Call(inner)) => inner,
            Some(_) => return None,
        };
        let name = at(call, &["params", "name"]).and_then(Value::as_str)?;
        let kind = if self.policy.gate_entry(name).is_some() {
            Kind::Exclusive
        } else if policy::is_read_only(self.tool_def(name).as_deref()) {
            return None;
        } else {
            Kind::Shared
        };
        Some(self.barrier.place(kind))
    }

    /// Waits for the held call's turn in the barrier (see `barrier.rs`).
    pub(in crate::engine) async fn wait_turn(&self, id: &Value) {
        let ticket = self.lock().holds.ticket(&key(id));
        if let Some(t) = ticket {
            self.barrier.enter(t).await;
        }
    }

    /// Gives the held call's place up while it waits on a human, so other changes are not
    /// held for minutes, and takes a new one at the back of the queue for the judgment
    /// that follows the answer (which therefore sees every change made meanwhile).
    pub(in crate::engine) fn step_aside(&self, id: &Value) {
        self.lock().holds.set_place(&key(id), None);
    }

    /// Rejoins the barrier after [`Shim::step_aside`] and waits for the call's turn.
    pub(in crate::engine) async fn rejoin(&self, id: &Value) {
        let place = self.barrier.place(Kind::Exclusive);
        self.lock().holds.set_place(&key(id), Some(place));
        self.wait_turn(id).await;
    }

    /// A forwarded call the client cancelled keeps its place until it is answered, or for
    /// [`CANCEL_GRACE`]: a server need not answer a cancelled call, and the calls behind it
    /// must not wait forever (THREAT-MODEL: a server that goes on running a cancelled call).
    pub(in crate::engine) fn release_after_grace(self: &Arc<Self>, k: IdKey, t: Ticket) {
        let shim = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            shim.lock().out.end_grace(&k, t);
        });
    }
}
