//! Who is on the other end of the socket: the peer's uid from `SO_PEERCRED`, as every
//! RPC sees it, and what that uid may do: one tower layer in front of the service.
//!
//! - Personal mode: the uid tcd runs as, nobody else (as it always was).
//! - Guarded mode: [`WHO`], the one table of gRPC method → who may call it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tonic::transport::server::UdsConnectInfo;
use tonic::Request;

use crate::ledger::Ledger;

/// The peer of one connection, as the kernel reported it at connect time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<i32>,
}

/// The peer of `req`, if the transport knows it (always, on tcd's Unix socket).
pub fn peer<T>(req: &Request<T>) -> Option<Peer> {
    peer_of(req.extensions())
}

fn peer_of(ext: &http::Extensions) -> Option<Peer> {
    let cred = ext.get::<UdsConnectInfo>().and_then(|i| i.peer_cred)?;
    Some(Peer {
        uid: cred.uid(),
        pid: cred.pid(),
    })
}

/// Who may call a method in guarded mode (root may call every method).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The uids of `[guarded] humans`, and root.
    Humans,
    /// Root alone: enrolment, factor resets, the secret, the full audit log.
    Root,
}

/// Every tc.v1 method and who may call it in guarded mode. A method not listed here
/// (added to the proto, not to this table) is root-only.
pub const WHO: &[(&str, Who)] = &[
    ("Status", Who::Humans),
    ("Raise", Who::Humans),
    ("Mint", Who::Humans),
    ("Redeem", Who::Humans),
    ("Release", Who::Humans),
    ("RecordConsumed", Who::Humans),
    ("SealState", Who::Humans),
    ("OpenState", Who::Humans),
    ("SealCursor", Who::Humans),
    ("OpenCursor", Who::Humans),
    ("AppendEvent", Who::Humans),
    // A human sees their own requests and events only (service.rs filters).
    ("ListPending", Who::Humans),
    ("ListEvents", Who::Humans),
    ("Counters", Who::Humans),
    ("Approve", Who::Humans),
    ("Decline", Who::Humans),
    // A human's grants only (grants.rs filters); giving one is Approve's, with the
    // factor. Revoking takes a permission away, so it needs none.
    ("ListGrants", Who::Humans),
    ("RevokeGrant", Who::Humans),
    ("GetPolicy", Who::Humans),
    // The HTTP front (run by a human) checks its callers' tokens.
    ("VerifyToken", Who::Humans),
    ("EnrollFactor", Who::Root),
    ("ConfirmFactor", Who::Root),
    ("UnlockFactor", Who::Root),
    ("RotateSecret", Who::Root),
    // The page and passkeys act for the peer's own uid; a human's new passkey approves
    // nothing until that human's code (or root) confirms it.
    ("OpenPage", Who::Humans),
    ("PasskeyCode", Who::Humans),
    ("ListPasskeys", Who::Humans),
    ("ConfirmPasskey", Who::Humans),
    ("RemovePasskey", Who::Humans),
    // A bearer token names any caller it likes: minting one is root's.
    ("MintToken", Who::Root),
];

/// The gRPC path prefix of the service.
const PREFIX: &str = "/tc.v1.Confirm/";

/// Who may call the method at gRPC `path` (`/tc.v1.Confirm/Raise`).
pub fn who(path: &str) -> Who {
    path.strip_prefix(PREFIX)
        .and_then(|m| WHO.iter().find(|(name, _)| *name == m))
        .map_or(Who::Root, |(_, w)| *w)
}

/// Who tcd serves.
#[derive(Debug, Clone)]
pub enum Access {
    /// Personal mode: only this uid (tcd's own).
    OwnUid(u32),
    /// Guarded mode: root, and these uids for the methods [`WHO`] gives to humans.
    Guarded { humans: Arc<[u32]> },
}

impl Access {
    /// Whether `uid` may call the method at `path`; Err is the refusal to send.
    pub fn check(&self, uid: Option<u32>, path: &str) -> Result<(), tonic::Status> {
        let method = path.strip_prefix(PREFIX).unwrap_or(path);
        match (self, uid) {
            (Access::OwnUid(me), Some(u)) if u == *me => Ok(()),
            (Access::OwnUid(_), _) => Err(tonic::Status::permission_denied(
                "tcd only serves its own user",
            )),
            (Access::Guarded { .. }, Some(0)) => Ok(()),
            (Access::Guarded { humans }, Some(u))
                if humans.contains(&u) && who(path) == Who::Humans =>
            {
                Ok(())
            }
            (Access::Guarded { humans }, u) => {
                let why = match u {
                    Some(u) if humans.contains(&u) => {
                        format!("only root may call {method} (run it with sudo)")
                    }
                    Some(u) => format!(
                        "uid {u} is not one of the humans this guarded tcd serves \
                         ([guarded] humans in {})",
                        tc_core::guarded::SYSTEM_CONFIG
                    ),
                    None => "the caller's uid is unknown".into(),
                };
                Err(tc_proto::refusal(
                    tonic::Code::PermissionDenied,
                    tc_core::Reason::NotPermitted,
                    why,
                ))
            }
        }
    }
}

/// The layer that puts [`Access`] in front of the gRPC service.
#[derive(Clone)]
pub struct AuthLayer {
    pub access: Access,
    pub ledger: Arc<Ledger>,
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Auth<S>;
    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            layer: self.clone(),
        }
    }
}

/// [`AuthLayer`]'s service.
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    layer: AuthLayer,
}

type BoxFut<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> tower::Service<http::Request<B>> for Auth<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = BoxFut<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let peer = peer_of(req.extensions());
        let path = req.uri().path().to_string();
        match self.layer.access.check(peer.map(|p| p.uid), &path) {
            Ok(()) => {
                // The clone is the one that was not polled ready: swap so the ready one runs.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(inner.call(req))
            }
            Err(status) => {
                self.record(peer, &path);
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

impl<S> Auth<S> {
    /// Logs and audits a refusal (`tc.auth.denied`), off this task: the refusal does not
    /// wait for the store.
    fn record(&self, peer: Option<Peer>, path: &str) {
        let (uid, pid) = (peer.map(|p| p.uid), peer.and_then(|p| p.pid));
        tracing::warn!(?uid, ?pid, method = %path, "refused a caller");
        let l = self.layer.ledger.clone();
        // The path is the caller's to choose: bounded before it reaches the log.
        let method: String = path.chars().take(96).collect();
        tokio::spawn(self.layer.ledger.store.call(move || {
            l.auth_denied(uid, pid, &method);
            Ok(())
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guarded() -> Access {
        Access::Guarded {
            humans: Arc::from(vec![1000u32]),
        }
    }

    fn reason(r: Result<(), tonic::Status>) -> Option<tc_core::Reason> {
        tc_proto::reason(&r.unwrap_err())
    }

    #[test]
    fn the_table_names_every_method_of_the_service_once() {
        let proto = include_str!("../../proto/proto/tc/v1/tc.proto");
        let rpcs: Vec<&str> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .map(|l| l.split('(').next().unwrap().trim())
            .collect();
        assert!(rpcs.len() >= 21, "{rpcs:?}");
        for r in &rpcs {
            assert_eq!(
                WHO.iter().filter(|(n, _)| n == r).count(),
                1,
                "{r} must be in WHO exactly once"
            );
        }
        assert_eq!(WHO.len(), rpcs.len(), "WHO lists a method the proto lacks");
    }

    #[test]
    fn humans_root_and_everyone_else() {
        let a = guarded();
        let p = |m: &str| format!("{PREFIX}{m}");
        for (m, w) in WHO {
            assert!(a.check(Some(0), &p(m)).is_ok(), "root may {m}");
            let human = a.check(Some(1000), &p(m));
            match w {
                Who::Humans => assert!(human.is_ok(), "a human may {m}"),
                Who::Root => assert_eq!(reason(human), Some(tc_core::Reason::NotPermitted), "{m}"),
            }
            let other = a.check(Some(1001), &p(m));
            assert_eq!(reason(other), Some(tc_core::Reason::NotPermitted), "{m}");
            assert!(a.check(None, &p(m)).is_err());
        }
        for m in [
            "EnrollFactor",
            "ConfirmFactor",
            "UnlockFactor",
            "RotateSecret",
            "MintToken",
        ] {
            assert_eq!(who(&p(m)), Who::Root, "{m}");
        }
        // A human reads their own events and requests (the service filters by uid).
        for m in ["ListEvents", "ListPending", "OpenPage", "PasskeyCode"] {
            assert_eq!(who(&p(m)), Who::Humans, "{m}");
        }
        // Unknown methods, and paths outside the service, are root's alone.
        assert!(a.check(Some(1000), &p("NewThing")).is_err());
        assert!(a.check(Some(1000), "/grpc.health.v1.Health/Check").is_err());
        assert!(a.check(Some(0), &p("NewThing")).is_ok());
        let e = a.check(Some(1000), &p("RotateSecret")).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("only root"), "{}", e.message());
    }

    #[test]
    fn personal_mode_serves_its_own_uid_only() {
        let a = Access::OwnUid(1000);
        assert!(a.check(Some(1000), "/tc.v1.Confirm/RotateSecret").is_ok());
        let e = a.check(Some(0), "/tc.v1.Confirm/Status").unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(e.message(), "tcd only serves its own user");
        assert!(a.check(None, "/tc.v1.Confirm/Status").is_err());
    }
}
