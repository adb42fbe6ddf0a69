//! Downstream stdout: lines over the limit go through the id scanner, split anywhere.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tc_fuzz::framing::{read_down, Down};
use tc_fuzz::scan::Scanner;

fuzz_target!(|data: &[u8]| {
    let mut r = tokio::io::BufReader::with_capacity(5, data);
    let mut limit = || 64;
    loop {
        match tc_fuzz::block(read_down(&mut r, &mut limit)).unwrap() {
            // What may be passed on never holds a raw `\r` or `\n`.
            Down::Line(l) => assert!(!l.contains(&b'\r') && !l.contains(&b'\n')),
            Down::InnerCr(l) => assert!(l.contains(&b'\r')),
            Down::Oversize { .. } => {}
            Down::Eof => break,
        }
    }
    let mut whole = Scanner::new();
    whole.feed(data);
    let mut split = Scanner::new();
    for c in data.chunks(3) {
        split.feed(c);
    }
    assert_eq!(whole.finish(), split.finish());
});
