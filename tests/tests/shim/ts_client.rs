//! End to end: the TypeScript SDK client (`@modelcontextprotocol/sdk` 1.32.2, legacy
//! era, no elicitation capability) → real tc-shim → real server-filesystem, with a real
//! tcd: `elicit_token` advertised, gated `write_file` → `elicit_required`, mint, re-call
//! with the token → written exactly once.

use tc_tests::shim as support;

use serde_json::json;
use support::*;

#[test]
fn shim_ts_client_filesystem_cli_token_route() {
    let mut env = Env::with(&Vault::filesystem("fs").gate("write_file", r#"{ paths = ["path"] }"#));
    env.start_tcd();
    let note = env.root.join("note.txt");
    std::fs::write(&note, "v0").unwrap();
    let (argv, log) = env.shim_argv_logged("fs");
    let mut c = PyClient::start_ts(&argv);
    assert_eq!(
        c.hello["server"]["name"], "secure-filesystem-server",
        "{}",
        c.hello
    );
    // The TS SDK 1.32.2 is legacy only: it initializes at 2025-11-25.
    let want = "client era: legacy (2025-11-25), downstream era: legacy (2025-11-25)";
    let text = wait_log(&log, want);
    assert!(text.contains(want), "shim log:\n{text}");

    assert_fs_scene_listed_and_readable(&mut c);

    let args = json!({"path": "note.txt", "content": "from ts"});
    let r = c.call("write_file", args.clone());
    // write_file declares an outputSchema, which the TS SDK validates even on isError
    // results: the refusal object travels in `_meta["tc/refusal"]` instead.
    assert!(r.get("structuredContent").is_none(), "{r}");
    assert_eq!(r["_meta"]["tc/refusal"]["code"], "elicit_required", "{r}");
    assert_elicit_required(&r, "write_file", "fs", &args);
    assert_eq!(sc(&r)["details"]["caller"], "stdio");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "v0");

    // Exactly once: the spent token writes nothing.
    assert_redeemed_once(&mut c, &env, ("write_file", &args), &r, &note, "from ts");
}
