//! The shim's input parsers, compiled from the shim's own sources (tc-shim is a binary
//! crate), and the daemon's sealed-blob codec, compiled from its file (so the fuzz build
//! does not build the daemon's tree, SQLite included), for the targets in `fuzz_targets/`.
#![allow(dead_code)]

#[path = "../../shim/src/framing.rs"]
pub mod framing;
#[path = "../../shim/src/ids.rs"]
pub mod ids;
#[path = "../../shim/src/gitindex.rs"]
pub mod gitindex;
#[path = "../../shim/src/names.rs"]
pub mod names;
#[path = "../../shim/src/regular.rs"]
pub mod regular;
#[path = "../../shim/src/results.rs"]
pub mod results;
#[path = "../../shim/src/scan.rs"]
pub mod scan;
#[path = "../../shim/src/unique.rs"]
pub mod unique;
#[path = "../../daemon/src/seal.rs"]
pub mod seal;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Drives a future over an in-memory reader (always ready).
pub fn block<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an in-memory reader never waits"),
    }
}
