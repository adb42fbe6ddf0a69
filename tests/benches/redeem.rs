//! Benchmark placeholder; see docs/BENCHMARKS.md.
fn main() {
    eprintln!("not written yet");
    std::process::exit(1);
}
