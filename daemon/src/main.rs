//! `tcd` entry point; everything lives in the library so tests can drive it.
fn main() -> anyhow::Result<()> {
    tcd::run()
}
