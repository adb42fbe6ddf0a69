//! What the targets in `fuzz_targets/` fuzz: the shim's parsers (`tc-shim` without its
//! `serve` feature: no network stack) and the sealed-blob codec (`tc-seal`, without the
//! daemon's tree and its SQLite).

pub use tc_seal as seal;
pub use tc_shim::vault::gitindex;
pub use tc_shim::wire::{framing, scan};

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
