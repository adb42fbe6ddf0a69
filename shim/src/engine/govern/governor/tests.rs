//! The governor's rules under test: paging plans, estimates, cursors, the results and
//! refusals it builds.

use std::path::PathBuf;

use super::*;

fn lim(budget: u64) -> Limits {
    Limits {
        budget,
        ratio: 1.0,
        max_items: MAX_PAGE_ITEMS,
        solo: false,
        end: 0,
    }
}

fn run(items: &[Item], from: usize, mut l: Limits) -> Plan {
    l.end = items.len();
    plan(from, &l, &mut |j| items[j].clone())
}

#[test]
fn pages_take_what_fits_and_always_progress() {
    let items = vec![
        Item::Fits(400),
        Item::Fits(400),
        Item::Fits(400),
        Item::Fits(5000),
    ];
    let p = run(&items, 0, lim(1000));
    assert_eq!((p.selected.clone(), p.next, p.estimate), (vec![0], 1, 400));
    let p = run(&items, 0, lim(1100));
    assert_eq!((p.selected.clone(), p.next), (vec![0, 1], 2));
    // An item larger than the budget is still asked for on its own page: only the
    // downstream's answer can say it never fits.
    let p = run(&items, 3, lim(1000));
    assert_eq!((p.selected.clone(), p.next), (vec![3], 4));
    // The ratio scales estimates.
    let p = run(
        &items,
        0,
        Limits {
            ratio: 2.0,
            ..lim(2000)
        },
    );
    assert_eq!(p.selected, vec![0, 1]);
    // max_items and solo.
    let p = run(
        &items,
        0,
        Limits {
            max_items: 1,
            ..lim(100_000)
        },
    );
    assert_eq!((p.selected.clone(), p.next), (vec![0], 1));
    let skip = Item::Skip(acl_entry("p/x", "deny", "p/**"));
    let items2 = vec![Item::Fits(10), skip.clone(), Item::Fits(10)];
    let p = run(
        &items2,
        0,
        Limits {
            solo: true,
            ..lim(100_000)
        },
    );
    assert_eq!(
        (p.selected.clone(), p.skipped.len(), p.next),
        (vec![0], 0, 1)
    );
    let p = run(&items2, 0, lim(100_000));
    assert_eq!(
        (p.selected.clone(), p.skipped.len(), p.next),
        (vec![0, 2], 1, 3)
    );
}

#[test]
fn skipped_items_are_progress_and_cost_their_entries() {
    let tl = Item::Skip(too_large_entry("big.bin", 9_000_000, false, 1000));
    let items = vec![tl.clone(), tl.clone(), Item::Fits(100)];
    let p = run(&items, 0, lim(100_000));
    assert_eq!(
        (p.selected.clone(), p.skipped.len(), p.next),
        (vec![2], 2, 3)
    );
    // With room for only one entry, the page is that entry and moves on by one.
    let one = skip_cost(&too_large_entry("big.bin", 9_000_000, false, 1000)) + ANSWER_OVERHEAD;
    let p = run(&items, 0, lim(one));
    assert_eq!((p.selected.len(), p.skipped.len(), p.next), (0, 1, 1));
    // Skipped entries first, then an item that does not fit: the item opens the next page.
    let p = run(
        &items,
        0,
        lim(one + skip_cost(&too_large_entry("big.bin", 9_000_000, false, 1000)) + 10),
    );
    assert_eq!((p.selected.len(), p.skipped.len(), p.next), (0, 2, 2));
    // Everything skipped: the page ends at the end.
    let p = run(std::slice::from_ref(&tl), 0, lim(10));
    assert_eq!((p.selected.len(), p.skipped.len(), p.next), (0, 1, 1));
}

#[test]
fn positions_round_trip_and_are_checked() {
    let p = Position { i: 3, n: 10 };
    assert_eq!(Position::decode(&p.encode(), 10), Some(p));
    assert_eq!(Position::decode(&p.encode(), 11), None);
    assert_eq!(
        Position::decode(&Position { i: 10, n: 10 }.encode(), 10),
        None
    );
    assert_eq!(Position::decode(b"garbage", 10), None);
}

#[test]
fn decorated_pages_keep_the_schema_and_say_how_to_go_on() {
    let skipped = vec![(1, too_large_entry("b", 5, false, 4))];
    let page = Page {
        tool: "read_multiple_files",
        items_arg: "paths",
        from: 0,
        next: 2,
        total: 3,
        served: 1,
        skipped: &skipped,
        next_cursor: Some("tc1.abc"),
        budget: 4,
    };
    let down = json!({"content": [{"type": "text", "text": "a:\nx\n"}], "structuredContent": {"content": "a:\nx\n"}});
    let mut r = down.clone();
    decorate(&mut r, &page, true);
    assert_eq!(
        r["structuredContent"], down["structuredContent"],
        "schema tools keep their structuredContent"
    );
    assert_eq!(r["_meta"][PAGING_META]["next_cursor"], "tc1.abc");
    assert_eq!(r["_meta"][PAGING_META]["skipped"][0]["code"], "too_large");
    let t = r["content"][1]["text"].as_str().unwrap();
    assert!(
        t.contains("\"cursor\": \"tc1.abc\"") && t.contains("b: too_large"),
        "{t}"
    );
    let mut r = down.clone();
    decorate(&mut r, &page, false);
    assert_eq!(r["structuredContent"]["next_cursor"], "tc1.abc");
    // The last page without skips adds only _meta.
    let last = Page {
        next_cursor: None,
        skipped: &[],
        ..page.clone()
    };
    let mut r = down.clone();
    decorate(&mut r, &last, true);
    assert_eq!(r["content"].as_array().unwrap().len(), 1);
    assert!(r["_meta"][PAGING_META]["next_cursor"].is_null());
    // Nothing served: an isError result, code too_large, refusal in _meta for schema tools.
    let e = empty_page(&page, true);
    assert_eq!(e["isError"], true);
    assert_eq!(
        e["_meta"][crate::engine::refusal::REFUSAL_META]["code"],
        "too_large"
    );
    assert_eq!(e["_meta"][PAGING_META]["next_cursor"], "tc1.abc");
}

#[test]
fn file_uris() {
    assert_eq!(
        file_uri_path("file:///a/b%20c.txt"),
        Some(PathBuf::from("/a/b c.txt"))
    );
    assert_eq!(
        file_uri_path("file://localhost/x"),
        Some(PathBuf::from("/x"))
    );
    assert_eq!(file_uri_path("file:///x?y#z"), Some(PathBuf::from("/x")));
    assert_eq!(file_uri_path("file://host/x"), None);
    assert_eq!(file_uri_path("demo://x"), None);
    assert_eq!(file_uri_path("file:///bad%zz"), None);
    assert_eq!(
        file_uri_path("file:///cut%2"),
        Some(PathBuf::from("/cut%2"))
    );
}

/// A request another worker noted a moment ago may not be in flight yet: prune keeps
/// it; a stale one (a call whose answer never came) goes once the table is large.
#[test]
fn prune_spares_requests_noted_moments_ago_and_drops_stale_ones() {
    let g = Governor::new(
        &GovernorConfig {
            max_response_bytes: 1000,
        },
        &[],
    );
    let call = || Track::Call {
        tool: "t".into(),
        args: Value::Null,
    };
    for i in 0..100 {
        g.track(IdKey::of(&json!(i)), call());
    }
    // Nothing is in flight by the engine's tables, and all are young: all stay.
    g.prune(0, |_| false);
    assert_eq!(g.tracked().len(), 100);
    // The first 80 age past the grace: they go, the 20 young ones stay.
    let old = Instant::now() - PRUNE_GRACE - Duration::from_secs(1);
    for i in 0..80 {
        g.tracked().get_mut(&IdKey::of(&json!(i))).unwrap().1 = old;
    }
    g.prune(0, |k| *k == IdKey::of(&json!(0)));
    let t = g.tracked();
    assert_eq!(t.len(), 21, "20 young ones and the one still in flight");
    assert!(t.contains_key(&IdKey::of(&json!(0))) && t.contains_key(&IdKey::of(&json!(99))));
}

#[test]
fn line_limit_is_the_cap_only_when_every_waiting_request_is_capped() {
    let g = Governor::new(
        &GovernorConfig {
            max_response_bytes: 1000,
        },
        &[],
    );
    let big = 1 << 24;
    assert_eq!(g.line_limit(std::iter::empty(), big), big, "nothing waits");
    let k = |v: Value| IdKey::of(&v);
    g.track(
        k(json!(1)),
        Track::Call {
            tool: "t".into(),
            args: Value::Null,
        },
    );
    let one = [k(json!(1))];
    assert_eq!(g.line_limit(one.iter(), big), 1000);
    let two = [k(json!(1)), k(json!(2))];
    assert_eq!(g.line_limit(two.iter(), big), big);
    // An answer that spells the id another way is the same request's, by value.
    assert!(
        !g.passes(&k(json!(1.0)), 1001),
        "over the cap, whatever the spelling"
    );
    let (tx, _rx) = oneshot::channel();
    g.untrack(&k(json!(1.0)));
    g.track(k(json!("tc-shim-gov-1")), Track::Page(tx));
    assert_eq!(
        g.line_limit(std::iter::empty(), big),
        1000,
        "a page request waits"
    );
}
