//! The git index reader: entries or a named IndexError.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tc_fuzz::gitindex::parse_index(data);
});
