//! `tc-shim`: the MCP proxy that puts a human confirmation gate in front of a downstream
//! MCP server (`tc-shim serve <vault> [-- <command…>]`); the work is in the library.

/// Every answer and request is a few short-lived buffers and futures: mimalloc's
/// per-thread free lists take about a tenth off the HTTP front's CPU per call.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(tc_shim::serve::main());
}
