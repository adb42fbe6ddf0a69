//! End to end (issue 15, "Also"): a user-facing error is one clear message and a
//! non-zero exit, never a stack backtrace, whatever RUST_BACKTRACE says. Each real
//! binary, with backtraces requested, is given a config that is missing or invalid.

use std::process::Command;

use tc_tests::bin;

/// Runs `argv` (a binary of target/debug and its arguments) with backtraces on.
fn run(argv: &[&str]) -> (i32, String) {
    let out = Command::new(bin(argv[0]))
        .args(&argv[1..])
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .env_remove("TC_CONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

fn assert_one_message(what: &str, code: i32, stderr: &str, expect: &str) {
    assert_ne!(code, 0, "{what}: exited 0: {stderr}");
    assert!(
        !stderr.to_lowercase().contains("backtrace"),
        "{what}: a backtrace: {stderr}"
    );
    assert!(stderr.contains(expect), "{what}: {stderr}");
    assert!(stderr.lines().count() <= 8, "{what}: {stderr}");
}

#[test]
fn a_missing_or_invalid_config_is_one_message_in_every_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.toml");
    let invalid = tmp.path().join("bad.toml");
    std::fs::write(&invalid, "[daemon]\nsockett = \"/x\"\n").unwrap();
    for (config, expect) in [(&missing, "does not exist"), (&invalid, "sockett")] {
        let c = config.to_str().unwrap();
        for argv in [
            vec!["tcd", "--ephemeral", "--config", c],
            vec!["tc-shim", "serve", "v", "--config", c],
            vec!["tcctl", "--config", c, "status"],
        ] {
            let (code, stderr) = run(&argv);
            assert_one_message(&format!("{argv:?}"), code, &stderr, expect);
        }
    }
}

/// A config breaking several rules is refused with every one of them, each naming its
/// key and vault: on its own line from tcd and tc-shim (tcctl escapes its whole message,
/// line breaks included, as it escapes everything it prints).
#[test]
fn an_invalid_config_is_refused_with_every_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[daemon]\nelicit_ttl_seconds = 0\n[governor]\nmax_response_bytes = 1\n\
         [[vaults]]\nid = \"v\"\nroot = \"rel\"\n",
    )
    .unwrap();
    let c = bad.to_str().unwrap();
    for argv in [
        vec!["tcd", "--ephemeral", "--config", c],
        vec!["tc-shim", "serve", "v", "--config", c],
        vec!["tcctl", "--config", c, "status"],
    ] {
        let (code, stderr) = run(&argv);
        assert_one_message(&format!("{argv:?}"), code, &stderr, "3 problems:");
        for problem in [
            "  daemon.elicit_ttl_seconds: must be at least 1",
            "  governor.max_response_bytes: must be at least 1024",
            "  vaults[0].root (vault \"v\"): must be an absolute path",
        ] {
            let own_line = stderr.lines().any(|l| l == problem);
            assert!(
                own_line || (argv[0] == "tcctl" && stderr.contains(problem)),
                "{argv:?}: {stderr}"
            );
        }
    }
}
