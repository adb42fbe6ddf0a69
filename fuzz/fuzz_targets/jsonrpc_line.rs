//! Client stdin: framing at a small cap, then each line parsed or rejected by name; what
//! the proxy would forward holds no line break any common reader splits on.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tc_fuzz::framing::{escape_breaks, parse_message, read_frame, Frame};

fuzz_target!(|data: &[u8]| {
    let mut r = tokio::io::BufReader::with_capacity(7, data);
    loop {
        match tc_fuzz::block(read_frame(&mut r, 4096)).unwrap() {
            Frame::Line(l) => {
                assert!(!l.contains(&b'\r') && !l.contains(&b'\n'));
                if let Ok(v) = parse_message(&l) {
                    let out = escape_breaks(&l);
                    let text = std::str::from_utf8(&out).expect("parsed lines are UTF-8");
                    assert!(!text.contains(['\r', '\n', '\u{85}', '\u{2028}', '\u{2029}']));
                    assert_eq!(serde_json::from_str::<serde_json::Value>(text).unwrap(), v);
                }
            }
            Frame::InnerCr(l) => assert!(l.contains(&b'\r')),
            Frame::TooLong(_) => {}
            Frame::Eof => break,
        }
    }
});
