//! `tc-pg -- COMMAND [ARGS…]`: runs COMMAND with a fresh PostgreSQL cluster of its own
//! (`tc_tests::postgres::Cluster`) named in `TC_TEST_POSTGRES_URL`, then stops it. How
//! `scripts/test` runs the daemon's ledger suite a second time, on PostgreSQL.

use std::process::{exit, Command};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => &args[..],
    };
    if cmd.is_empty() {
        eprintln!("usage: tc-pg -- COMMAND [ARGS...]");
        exit(2);
    }
    if let Some(why) = tc_tests::postgres::unavailable() {
        eprintln!("tc-pg: cannot start PostgreSQL: {why}");
        exit(2);
    }
    let cluster = tc_tests::postgres::Cluster::start_fast();
    eprintln!("tc-pg: PostgreSQL on 127.0.0.1:{}", cluster.port);
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("TC_TEST_POSTGRES_URL", cluster.url_with_password())
        .status()
        .unwrap_or_else(|e| {
            eprintln!("tc-pg: cannot run {}: {e}", cmd[0]);
            exit(2)
        });
    drop(cluster);
    exit(status.code().unwrap_or(1));
}
