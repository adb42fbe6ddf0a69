//! The in-protocol prompts: the 2025-era form, the 2026-07-28 round trip, a server's own
//! rounds, URL mode to the approval page, and progress while a call waits on a human.
//!
//! One test binary; each module is one behaviour (tests/tests/README.md).

mod legacy_form;
mod modern_round_trip;
mod server_rounds;
mod url_legacy;
mod url_modern;
mod waiting;
