//! The TOML config: a config, a parse error or a rule naming its key.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tc_core::config::ConfigError;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match tc_core::Config::parse(text, std::path::Path::new("/fuzz.toml")) {
            Ok(_) | Err(ConfigError::Parse { .. }) | Err(ConfigError::Invalid { .. }) => {}
            Err(e) => panic!("unexpected error kind: {e}"),
        }
    }
});
