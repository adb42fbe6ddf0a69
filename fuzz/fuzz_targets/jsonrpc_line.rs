//! Client stdin: framing at a small cap, then each line parsed or rejected by name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tc_fuzz::framing::{parse_message, read_frame, Frame};

fuzz_target!(|data: &[u8]| {
    let mut r = tokio::io::BufReader::with_capacity(7, data);
    loop {
        match tc_fuzz::block(read_frame(&mut r, 4096)).unwrap() {
            Frame::Line(l) => {
                let _ = parse_message(&l).map_err(|e| e.code());
            }
            Frame::TooLong(_) => {}
            Frame::Eof => break,
        }
    }
});
