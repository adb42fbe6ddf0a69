//! `tcctl` entry point; the commands live in the library.
fn main() -> std::process::ExitCode {
    tcctl::main()
}
