//! End to end: the response governor. Python `mcp` client → real tc-shim → real
//! server-filesystem, with a real tcd: paging `read_multiple_files` over a folder of
//! mixed sizes until `next_cursor` is null, each cursor refusal, an ACL change between
//! pages, the byte cap's `overflow`, its counter and events.

use tc_tests::shim as support;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use support::*;

const CAP: usize = 32 * 1024;

fn fs_env(deny: &[&str]) -> Env {
    let vault = Vault::filesystem("fs")
        .paged("read_multiple_files", "paths")
        .acl_deny(deny);
    Env::new(&vault.governed(CAP))
}

/// A file whose content is marked so a page shows whether it holds all of it.
fn marked(root: &Path, rel: &str, size: usize) -> String {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let head = format!("BEGIN {rel}\n");
    let tail = format!("END {rel}\n");
    let body = "abcdefghij\n".repeat((size.saturating_sub(head.len() + tail.len())) / 11 + 1);
    let text = format!(
        "{head}{}{tail}",
        &body[..size.saturating_sub(head.len() + tail.len())]
    );
    std::fs::write(&p, &text).unwrap();
    text
}

fn ok(r: Value) -> Value {
    assert_eq!(r["ok"], true, "client op failed: {r}");
    r["result"].clone()
}

fn call(c: &mut PyClient, tool: &str, args: Value) -> Value {
    ok(c.op(json!({"op": "call", "name": tool, "args": args})))
}

fn paging(r: &Value) -> &Value {
    &r["_meta"]["tc/paging"]
}

/// One page's text as the tool returned it (structuredContent, which the SDK validated
/// against the tool's outputSchema); empty for a page that served nothing.
fn page_text(r: &Value) -> String {
    if r["isError"] == true {
        return String::new();
    }
    r["structuredContent"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no structuredContent.content: {r}"))
        .to_string()
}

/// Pages `read_multiple_files` over `paths` until next_cursor is null.
fn page_all(c: &mut PyClient, paths: &[String]) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut cursor = Value::Null;
    for _ in 0..200 {
        let mut args = json!({ "paths": paths });
        if !cursor.is_null() {
            args["cursor"] = cursor.clone();
        }
        let r = call(c, "read_multiple_files", args);
        let p = paging(&r).clone();
        assert!(
            p.is_object(),
            "a paged result carries _meta[tc/paging]: {r}"
        );
        cursor = p["next_cursor"].clone();
        pages.push(r);
        if cursor.is_null() {
            return pages;
        }
    }
    panic!("paging did not finish in 200 pages");
}

/// What each item came to over all pages: how many pages served it, and its skips.
fn outcomes(pages: &[Value], paths: &[String]) -> BTreeMap<String, (usize, Vec<Value>)> {
    let mut out: BTreeMap<String, (usize, Vec<Value>)> = BTreeMap::new();
    for p in paths {
        let served = pages
            .iter()
            .filter(|r| {
                page_text(r).contains(&format!("BEGIN {p}\n"))
                    || page_text(r).contains(&format!("{p}: Error"))
            })
            .count();
        let skipped: Vec<Value> = pages
            .iter()
            .flat_map(|r| paging(r)["skipped"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["item"] == p.as_str())
            .collect();
        out.insert(p.clone(), (served, skipped));
    }
    out
}

/// `item` was never served and skipped once as too_large by its answer, with the size
/// that was over the budget.
fn too_large_answer(item: &str, served: usize, skipped: &[Value]) {
    assert_eq!((served, skipped.len()), (0, 1), "{item}: {skipped:?}");
    let e = &skipped[0];
    assert_eq!(
        (e["code"].clone(), e["size_of"].clone()),
        (json!("too_large"), json!("response")),
        "{e}"
    );
    assert!(
        e["size"].as_u64().unwrap() > CAP as u64,
        "a too_large entry's size is over its budget: {e}"
    );
}

#[test]
fn shim_governor_pages_a_folder_of_mixed_sizes_until_next_cursor_is_null() {
    let mut env = fs_env(&["private/**"]);
    env.start_tcd();
    let root = env.root.clone();
    let mut paths = Vec::new();
    let mut texts = BTreeMap::new();
    for i in 0..30 {
        let rel = format!("notes/small-{i:02}.txt");
        texts.insert(rel.clone(), marked(&root, &rel, 200 + (i * 97) % 2800));
        paths.push(rel);
    }
    for i in 0..8 {
        let rel = format!("docs/medium {i}.md");
        texts.insert(rel.clone(), marked(&root, &rel, 6000 + i * 1000));
        paths.push(rel);
    }
    // Over the cap by stat(): never asked for.
    for i in 0..2 {
        let rel = format!("media/huge-{i}.txt");
        marked(&root, &rel, 100_000);
        paths.insert(10 + i * 17, rel);
    }
    // Under the cap by stat(), but its answer is not: 12 000 control bytes come back as
    // `\u0001` escapes (6 bytes each), twice. Only the downstream's answer shows it.
    std::fs::write(root.join("notes/escapes.bin"), vec![1u8; 12_000]).unwrap();
    paths.insert(5, "notes/escapes.bin".into());
    marked(&root, "private/secret.txt", 300);
    paths.insert(20, "private/secret.txt".into());
    paths.push("notes/missing.txt".into());

    let mut c = PyClient::start_gov(false, &env.shim_argv("fs"));
    let list = ok(c.op(json!({"op": "list"})));
    let rmf = tool(&list, "read_multiple_files").expect("read_multiple_files listed");
    assert_eq!(
        rmf["inputSchema"]["properties"]["cursor"]["type"], "string",
        "{rmf}"
    );

    let pages = page_all(&mut c, &paths);
    assert!(
        pages.len() >= 4,
        "a folder of ~150 KB pages at a 32 KiB cap: {} pages",
        pages.len()
    );
    let mut expect_from = 0;
    for (k, r) in pages.iter().enumerate() {
        let p = paging(r);
        assert_eq!(
            p["from"], expect_from,
            "page {k} starts where the last one ended: {p}"
        );
        let served = p["served"].as_u64().unwrap();
        let skipped = p["skipped"].as_array().unwrap().len() as u64;
        assert!(served + skipped >= 1, "page {k} made no progress: {p}");
        assert!(p["next"].as_u64().unwrap() > expect_from, "page {k}: {p}");
        assert_eq!(p["total"], paths.len());
        assert_eq!(p["budget"], CAP);
        let size = serde_json::to_string(r).unwrap().len();
        assert!(
            size <= CAP,
            "page {k} is {size} bytes, over the {CAP}-byte cap"
        );
        if !p["next_cursor"].is_null() {
            let cur = p["next_cursor"].as_str().unwrap();
            let all_text: String = r["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect();
            assert!(
                all_text.contains(&format!("\"cursor\": \"{cur}\"")),
                "page {k} tells how to go on: {all_text}"
            );
        }
        expect_from = p["next"].as_u64().unwrap();
    }
    assert_eq!(
        expect_from as usize,
        paths.len(),
        "the walk reached the end"
    );

    for (item, (served, skipped)) in outcomes(&pages, &paths) {
        match item.as_str() {
            "media/huge-0.txt" | "media/huge-1.txt" => {
                assert_eq!((served, skipped.len()), (0, 1), "{item}: {skipped:?}");
                let e = &skipped[0];
                assert_eq!(
                    (
                        e["code"].clone(),
                        e["size"].clone(),
                        e["size_of"].clone(),
                        e["budget"].clone()
                    ),
                    (
                        json!("too_large"),
                        json!(100_000),
                        json!("file"),
                        json!(CAP)
                    ),
                    "{e}"
                );
            }
            "notes/escapes.bin" => too_large_answer(&item, served, &skipped),
            "private/secret.txt" => {
                assert_eq!((served, skipped.len()), (0, 1), "{item}: {skipped:?}");
                assert_eq!(skipped[0]["code"], "acl_denied", "{}", skipped[0]);
                assert_eq!(skipped[0]["glob"], "private/**");
            }
            _ => {
                assert_eq!(
                    (served, skipped.len()),
                    (1, 0),
                    "{item} must be served exactly once"
                );
                if let Some(t) = texts.get(&item) {
                    assert!(
                        pages.iter().any(|r| page_text(r).contains(t.as_str())),
                        "{item} served whole"
                    );
                }
            }
        }
    }
    for r in &pages {
        assert!(
            !page_text(r).contains("BEGIN private/"),
            "a denied file was served"
        );
    }

    // The modern era (mcp.Client auto, 2026-07-28) pages the same way.
    drop(c);
    let mut m = PyClient::start_gov(true, &env.shim_argv("fs"));
    assert_eq!(m.hello["era"], "modern", "{}", m.hello);
    let small: Vec<String> = paths[..12].to_vec();
    let mpages = page_all(&mut m, &small);
    let got = outcomes(&mpages, &small);
    assert!(got.values().all(|(s, k)| s + k.len() == 1), "{got:?}");
    assert!(
        mpages
            .iter()
            .all(|r| r["resultType"] == "complete" || r["isError"] == true),
        "{}",
        mpages[0]
    );
    // Paging refuses nothing: no overflow was recorded.
    let overflows = all_events(&env.socket)
        .iter()
        .filter(|e| e.kind == "tc.governor.overflow")
        .count();
    assert_eq!(overflows, 0);
}

/// Items whose answers come close to the cap. One that fits with its page's cursor is
/// served on a page of its own, after the skipped files the first estimate (no ratio
/// learned yet) packed it behind; one that does not is too_large, with the size that
/// was over the budget.
#[test]
fn shim_governor_serves_an_item_close_to_the_cap_on_its_own_page() {
    let mut env = fs_env(&[]);
    env.start_tcd();
    let root = env.root.clone();
    let mut paths = Vec::new();
    for i in 0..8 {
        let rel = format!("media/huge-{i}.txt");
        marked(&root, &rel, 100_000);
        paths.push(rel);
    }
    let mut texts = BTreeMap::new();
    // server-filesystem answers with the text twice (content and structuredContent):
    // ≈ 30 400 bytes with JSON escaping, over cap − 3 072 (the reserve) but under the cap
    // with a cursor.
    let near = "notes/near-cap.txt".to_string();
    texts.insert(near.clone(), marked(&root, &near, 13_800));
    paths.push(near.clone());
    // Its answer (≈ 31 800 bytes) is under the cap too, but not with the paging text
    // and cursor a page needs: it never fits, and the entry reports the size that was
    // over the budget, not the smaller answer.
    let over = "notes/over-with-cursor.txt".to_string();
    marked(&root, &over, 15_100);
    paths.push(over.clone());
    for i in 0..2 {
        let rel = format!("notes/small-{i}.txt");
        texts.insert(rel.clone(), marked(&root, &rel, 2_000));
        paths.push(rel);
    }

    let mut c = PyClient::start_gov(false, &env.shim_argv("fs"));
    ok(c.op(json!({"op": "list"})));
    let pages = page_all(&mut c, &paths);

    for r in &pages {
        let size = serde_json::to_string(r).unwrap().len();
        assert!(size <= CAP, "a {size}-byte page, over the {CAP}-byte cap");
    }
    for (item, (served, skipped)) in outcomes(&pages, &paths) {
        if item.starts_with("media/huge-") {
            assert_eq!((served, skipped.len()), (0, 1), "{item}: {skipped:?}");
            assert_eq!(skipped[0]["size_of"], "file", "{}", skipped[0]);
            continue;
        }
        if item == over {
            too_large_answer(&item, served, &skipped);
            continue;
        }
        assert_eq!(
            (served, skipped.len()),
            (1, 0),
            "{item} must be served exactly once, not skipped: {skipped:?}"
        );
        assert!(
            pages
                .iter()
                .any(|r| page_text(r).contains(texts[&item].as_str())),
            "{item} served whole"
        );
    }
    let near_page = pages
        .iter()
        .find(|r| page_text(r).contains(&format!("BEGIN {near}\n")))
        .unwrap();
    assert!(
        paging(near_page)["next_cursor"].is_string(),
        "the item is not the last one, so its page carries a cursor: {}",
        paging(near_page)
    );
}

/// The first page's cursor of `paths`.
fn first_cursor(c: &mut PyClient, paths: &[String]) -> String {
    let r = call(c, "read_multiple_files", json!({ "paths": paths }));
    paging(&r)["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("expected more than one page: {r}"))
        .to_string()
}

fn refused_reason(r: &Value) -> String {
    assert_eq!(code(r).as_deref(), Some("invalid_input"), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("without `cursor`"), "{text}");
    sc(r)["details"]["reason"].as_str().unwrap().to_string()
}

#[test]
fn shim_governor_cursor_refusals() {
    let mut env = fs_env(&[]);
    env.start_tcd_keyed();
    let mut a = Vec::new();
    for i in 0..12 {
        let rel = format!("a/f{i}.txt");
        marked(&env.root, &rel, 8000);
        a.push(rel);
    }
    let b: Vec<String> = a.iter().rev().cloned().collect();
    let mut c = PyClient::start_gov(false, &env.shim_argv("fs"));
    let cur = first_cursor(&mut c, &a);
    let with = |paths: &[String], cursor: &str| json!({"paths": paths, "cursor": cursor});

    // invalid: garbage, and a tampered cursor.
    let r = call(&mut c, "read_multiple_files", with(&a, "not-a-cursor"));
    assert_eq!(refused_reason(&r), "invalid");
    let mut t: Vec<char> = cur.chars().collect();
    let i = cur.find('.').unwrap() + 8;
    t[i] = if t[i] == 'A' { 'B' } else { 'A' };
    let r = call(
        &mut c,
        "read_multiple_files",
        with(&a, &t.into_iter().collect::<String>()),
    );
    assert_eq!(refused_reason(&r), "invalid");
    // request_mismatch: a cursor of one request presented with other arguments.
    let r = call(&mut c, "read_multiple_files", with(&b, &cur));
    assert_eq!(refused_reason(&r), "request_mismatch");
    // foreign: a cursor the daemon sealed for another caller of the same request.
    let foreign = seal_cursor(
        &env.socket,
        tc_proto::v1::Binding {
            vault: "fs".into(),
            tool: "read_multiple_files".into(),
            caller: "http:someone-else".into(),
            args_hash: tc_core::hash::args_hash("read_multiple_files", &json!({"paths": a})),
        },
        br#"{"i":1,"n":12}"#,
    );
    let r = call(&mut c, "read_multiple_files", with(&a, &foreign));
    assert_eq!(refused_reason(&r), "foreign");
    // expired: the same cursor re-sealed under the daemon's key with a past expiry.
    let out = std::process::Command::new("python3")
        .arg(workspace().join("tests/fixtures/expire_cursor.py"))
        .arg(env.cache.join("server-secrets/server.key"))
        .arg(&cur)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let expired = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let r = call(&mut c, "read_multiple_files", with(&a, &expired));
    assert_eq!(refused_reason(&r), "expired");

    // Each refusal is a tc.cursor.rejected event with its reason.
    let evs = wait_events(&env.socket, "tc.cursor.rejected", 5);
    let reasons: Vec<String> = evs
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(&e.detail_json).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "invalid",
            "invalid",
            "request_mismatch",
            "foreign",
            "expired"
        ]
    );
    assert!(evs
        .iter()
        .all(|e| e.tool == "read_multiple_files" && e.vault == "fs" && e.caller == "stdio"));

    // The genuine cursor still works (cursors are not single use) and moves on.
    let r = call(&mut c, "read_multiple_files", with(&a, &cur));
    assert_eq!(code(&r), None, "{r}");
    assert!(paging(&r)["from"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn shim_governor_acl_is_rechecked_on_every_page() {
    let mut env = fs_env(&["private/**"]);
    env.start_tcd();
    let mut paths = Vec::new();
    for d in ["a", "b", "pub"] {
        for i in 0..6 {
            let rel = format!("{d}/f{i}.txt");
            marked(&env.root, &rel, 9000);
            paths.push(rel);
        }
    }
    let mut c = PyClient::start_gov(false, &env.shim_argv("fs"));
    let first = call(&mut c, "read_multiple_files", json!({ "paths": paths }));
    let cur = paging(&first)["next_cursor"].as_str().unwrap().to_string();
    let from = paging(&first)["next"].as_u64().unwrap() as usize;
    assert!(from < 6, "page 1 stays within a/: {}", paging(&first));
    drop(c);

    // The operator denies b/** and the shim restarts: the cursor (sealed by the daemon,
    // not held by the shim) carries on, and nothing under b/ is served any more.
    let text = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(
        &env.config,
        text.replace(
            r#"deny = ["private/**"]"#,
            r#"deny = ["private/**", "b/**"]"#,
        ),
    )
    .unwrap();
    let mut c = PyClient::start_gov(false, &env.shim_argv("fs"));

    // And mid-walk, pub/ becomes a symlink into private/: the same names now lead to
    // denied files, which must not be served either.
    let mut pages = vec![first];
    let mut cursor = Value::from(cur);
    let mut swapped = false;
    while !cursor.is_null() {
        let r = call(
            &mut c,
            "read_multiple_files",
            json!({"paths": paths, "cursor": cursor}),
        );
        cursor = paging(&r)["next_cursor"].clone();
        let next = paging(&r)["next"].as_u64().unwrap() as usize;
        pages.push(r);
        if !swapped && next >= 6 {
            std::fs::create_dir_all(env.root.join("private")).unwrap();
            std::fs::rename(env.root.join("pub"), env.root.join("private/pub")).unwrap();
            std::os::unix::fs::symlink(env.root.join("private/pub"), env.root.join("pub")).unwrap();
            swapped = true;
        }
    }
    assert!(swapped);
    for (item, (served, skipped)) in outcomes(&pages, &paths) {
        if item.starts_with("a/") {
            assert_eq!((served, skipped.len()), (1, 0), "{item}");
        } else {
            assert_eq!(served, 0, "{item} was served after it was denied");
            assert_eq!(skipped.len(), 1, "{item}: {skipped:?}");
            let want = if item.starts_with("b/") {
                "b/**"
            } else {
                "private/**"
            };
            assert_eq!(
                (skipped[0]["code"].as_str(), skipped[0]["glob"].as_str()),
                (Some("acl_denied"), Some(want)),
                "{item}"
            );
        }
    }
}

#[test]
fn shim_governor_overflow_is_refused_counted_and_logged() {
    let mut env = fs_env(&[]);
    env.start_tcd();
    marked(&env.root, "big.txt", 100_000);
    marked(&env.root, "small.txt", 500);
    let mut c = PyClient::start_gov(false, &env.shim_argv("fs"));
    assert!(env
        .tcctl_metrics()
        .contains("governor_truncations_total 0\n"));

    let r = call(&mut c, "read_text_file", json!({"path": "small.txt"}));
    assert_eq!(code(&r), None, "{r}");
    let args = json!({"path": "big.txt"});
    let r = call(&mut c, "read_text_file", args.clone());
    assert_eq!(code(&r).as_deref(), Some("overflow"), "{r}");
    // read_text_file declares an outputSchema: the refusal object is in _meta.
    assert!(r["_meta"]["tc/refusal"].is_object(), "{r}");
    let d = &sc(&r)["details"];
    assert_eq!(d["limit"], CAP);
    assert_eq!(d["tool"], "read_text_file");
    let bytes = d["bytes"].as_u64().unwrap();
    assert!(
        bytes > 200_000,
        "the file comes back twice (content + structuredContent): {bytes}"
    );
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("over the governor limit"));
    // The stream is still in sync, and the next call is fine.
    let r = call(&mut c, "read_text_file", json!({"path": "small.txt"}));
    assert_text_at(&r, "/content/0/text", "BEGIN small.txt");

    let evs = wait_events(&env.socket, "tc.governor.overflow", 1);
    assert_eq!(evs.len(), 1);
    let e = &evs[0];
    assert_eq!(
        (e.vault.as_str(), e.tool.as_str(), e.caller.as_str()),
        ("fs", "read_text_file", "stdio")
    );
    assert_eq!(
        e.args_hash,
        tc_core::hash::args_hash("read_text_file", &args)
    );
    let detail: Value = serde_json::from_str(&e.detail_json).unwrap();
    assert_eq!(
        (detail["bytes"].as_u64(), detail["limit"].as_u64()),
        (Some(bytes), Some(CAP as u64))
    );
    assert!(
        env.tcctl_metrics()
            .contains("governor_truncations_total 1\n"),
        "{}",
        env.tcctl_metrics()
    );

    // The counter is the event log's: it survives a daemon restart.
    env.stop_tcd();
    env.start_tcd();
    assert!(
        env.tcctl_metrics()
            .contains("governor_truncations_total 1\n"),
        "{}",
        env.tcctl_metrics()
    );
}
