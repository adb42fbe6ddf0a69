//! `tcd` entry point; everything lives in the library so tests can drive it.
fn main() -> std::process::ExitCode {
    match tcd::run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tc_core::eprint_failure("tcd", &e);
            std::process::ExitCode::FAILURE
        }
    }
}
