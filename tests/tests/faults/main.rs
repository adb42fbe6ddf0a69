//! Faults: a daemon that dies or hangs, a full or read-only disk, a shim's child that
//! misbehaves.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod daemon;
mod disk;
mod shim;
