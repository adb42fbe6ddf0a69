//! Who is on the other end of the socket: the peer's uid from `SO_PEERCRED`, as every
//! RPC sees it, and (guarded mode) what that uid may do.

use tonic::transport::server::UdsConnectInfo;
use tonic::Request;

/// The peer of one connection, as the kernel reported it at connect time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<i32>,
}

/// The peer of `req`, if the transport knows it (always, on tcd's Unix socket).
pub fn peer<T>(req: &Request<T>) -> Option<Peer> {
    let cred = req
        .extensions()
        .get::<UdsConnectInfo>()
        .and_then(|i| i.peer_cred)?;
    Some(Peer {
        uid: cred.uid(),
        pid: cred.pid(),
    })
}
