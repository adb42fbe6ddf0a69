//! Downstream stdout: lines over the limit go through the id scanner, split anywhere.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tc_fuzz::framing::{read_down, Down};
use tc_fuzz::scan::Scanner;

fuzz_target!(|data: &[u8]| {
    let mut r = tokio::io::BufReader::with_capacity(5, data);
    let mut limit = || 64;
    while !matches!(
        tc_fuzz::block(read_down(&mut r, &mut limit)).unwrap(),
        Down::Eof
    ) {}
    let mut whole = Scanner::new();
    whole.feed(data);
    let mut split = Scanner::new();
    for c in data.chunks(3) {
        split.feed(c);
    }
    assert_eq!(whole.finish(), split.finish());
});
