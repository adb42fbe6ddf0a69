//! Request states and cursors: anything but a blob sealed under the key fails to open
//! (the daemon refuses every such failure as `invalid`), and nothing panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tc_fuzz::seal::{open, SealError};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match open(&[0x42; 32], &text) {
        Ok(_) | Err(SealError::NotIssued) => {}
        Err(e) => panic!("open fails only as not issued: {e}"),
    }
});
