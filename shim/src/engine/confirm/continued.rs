//! A re-sent call whose requestState is ours around a downstream's own round: checked
//! (a round of an approved call must be one this process sealed), spent once, and handed
//! on as a `Round` for forward to send back to the downstream.

use serde_json::json;
use tc_core::ErrorCode;

use crate::engine::refusal::Refusal;
use crate::engine::rounds::{round_is_ours, Inner};
use crate::engine::{Approval, Call, Shim};

/// A downstream round the client answered: what goes back to the downstream.
pub(in crate::engine) struct Round {
    pub(in crate::engine) state: Option<String>,
    pub(in crate::engine) approved: bool,
}

/// How a re-sent call's requestState was judged.
pub(in crate::engine) enum Resumed {
    /// Our confirmation, approved.
    Approved(Approval),
    /// A downstream's round: it goes back to the downstream.
    Continue(Round),
    /// A downstream's round of a call that went out unconfirmed, whose gate applies now:
    /// the call needs a confirmation like any new one.
    Fresh,
    /// Answered already (declined, refused, offered again).
    Answered,
}

impl Shim {
    /// A re-sent call whose state (already verified, not yet spent, sealed at `sealed_fp`)
    /// carries `inner`: a round of an approved call must be one this process sealed; the
    /// state is spent, against the approved fingerprint if the call was approved (a
    /// changed target is `replay_drift`), and the downstream's round goes on.
    pub(in crate::engine) async fn continue_round(
        &self,
        c: &Call<'_>,
        state: &str,
        inner: &[u8],
        sealed_fp: &str,
        applies: bool,
    ) -> Resumed {
        let Ok(inner) = serde_json::from_slice::<Inner>(inner) else {
            // Sealed by tcd for this very call, so only a version skew or a bug gets here.
            let text = format!(
                "The requestState of `{}` could not be read back (a tc-shim of another version sealed \
                 it?). Nothing was run. Send the call again without requestState.",
                c.shown.tool
            );
            let mut d = c.shown.details();
            d["reason"] = json!("invalid");
            self.refuse(c.id, Refusal::new(ErrorCode::InvalidInput, text, d));
            return Resumed::Answered;
        };
        // A round of an approved call runs the call again under that approval: only if
        // this process sealed it (not a state forged through tcd's socket).
        if inner.approved && !round_is_ours(c.binding, sealed_fp, &inner) {
            let text = format!(
                "The requestState of `{}` claims a downstream round of an approved call, but this \
                 tc-shim did not seal it (made through tcd's socket, or by another tc-shim \
                 process). Nothing was run. Send the call again without requestState.",
                c.shown.tool
            );
            let mut d = c.shown.details();
            d["reason"] = json!("invalid");
            self.refuse(c.id, Refusal::new(ErrorCode::InvalidInput, text, d));
            return Resumed::Answered;
        }
        let current = if inner.approved { c.shown.state_fp } else { "" };
        if let Err(e) = self
            .daemon
            .open_state(state, c.binding.clone(), true, current)
            .await
        {
            return self.state_refused(c, &e).await;
        }
        if !inner.approved && applies {
            return Resumed::Fresh;
        }
        Resumed::Continue(Round {
            state: inner.state,
            approved: inner.approved,
        })
    }
}
