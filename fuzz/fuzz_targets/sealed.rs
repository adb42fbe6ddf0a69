//! Request states and cursors: anything but a blob sealed under the key is `invalid`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tcd::error::DaemonError;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match tcd::seal::open(&[0x42; 32], &text) {
        Ok(_) | Err(DaemonError::Refused { .. }) => {}
        Err(e) => panic!("not a refusal: {e}"),
    }
});
