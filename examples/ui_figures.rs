//! The memory browser's figures at 100,000 memories and 500,000 relations, in headless Chromium
//! against the real `serve --http`: first paint and the page ready, the first search typed, a
//! 2,000-node neighbourhood fetched, laid out and drawn, and how the page answers while a deep
//! walk runs as the server's task. Each on a freshly loaded page, median of five. Prints a
//! markdown table with the machine it ran on.
//! Run: `cargo build --release && cargo run --release --example ui_figures` (needs Chromium:
//! Debian's `chromium` package).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

#[path = "common/graph_db.rs"]
mod graph_db;

#[allow(dead_code, unused_macros)]
#[path = "common/report.rs"]
#[macro_use]
mod report;

#[allow(dead_code)]
#[path = "../tests/it/browser.rs"]
mod browser;

use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

const MEMORIES: usize = 100_000;
const RELATIONS: usize = 500_000;
const ROUNDS: usize = 5;
const WAIT: Duration = Duration::from_secs(60);

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn num(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Milliseconds from typing `query` into the search box to its hits on the page (the page waits
/// 200 ms after the last key before it asks).
const SEARCH: &str = "(query) => new Promise((done) => {
    const hits = document.getElementById('hits');
    const t = performance.now();
    const seen = new MutationObserver(() => {
        if (hits.querySelector('.hit')) { seen.disconnect(); done(performance.now() - t); }
    });
    seen.observe(hits, { childList: true });
    const q = document.getElementById('q');
    q.value = query;
    q.dispatchEvent(new Event('input', { bubbles: true }));
})";

/// While a deep walk (every memory, ranked by words) runs as a task: the longest the page's
/// event loop was late on a 20 ms timer, a search typed meanwhile, and the walk's time.
const DURING_WALK: &str = "(async () => {
    let late = 0; let last = performance.now();
    const timer = setInterval(() => { const n = performance.now(); late = Math.max(late, n - last - 20); last = n; }, 20);
    const t = performance.now();
    let task = false;
    const walking = mnemograph.call('traverse', { names: ['root'], depth: 8, max_nodes: 1000000,
        focus: 'topic 5 and 7', limit: 20 }, () => { task = true; });
    await new Promise((r) => setTimeout(r, 100));
    const search = await (SEARCH)('memory about topic 11');
    await walking;
    const walk = performance.now() - t;
    clearInterval(timer);
    return [late, search, walk, task];
})()";

fn main() -> ExitCode {
    let Some(bin) = fixture::server_binary() else {
        note!("build the server first: cargo build --release");
        return ExitCode::FAILURE;
    };
    note!(
        "preparing the database ({MEMORIES} memories, {RELATIONS} relations; cached under target/bench-data) …"
    );
    let db = graph_db::database(MEMORIES, RELATIONS);
    let (mut child, url) = report::serve_http(
        &bin,
        &db,
        &[],
        Some("info,mnemograph::http::request=warn"),
        WAIT,
    );
    let base = url.trim_end_matches("/mcp").to_owned();
    let Some(b) = browser::Browser::launch() else {
        note!("no Chromium: install Debian's chromium package");
        let _ = child.kill();
        return ExitCode::FAILURE;
    };
    let fresh = || {
        b.goto(&format!("{base}/"));
        b.wait_for("document.body.dataset.ready === '1'", WAIT);
    };
    // Warm the server (its graph and indexes loaded) before anything is timed.
    fresh();
    b.eval("mnemograph.call('traverse', {names: ['root'], depth: 1})");

    let (mut paint, mut ready, mut search) = (Vec::new(), Vec::new(), Vec::new());
    let (mut fetched, mut settled, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let (mut late, mut during, mut walks) = (Vec::new(), Vec::new(), Vec::new());
    let mut tasks = 0;
    for round in 0..ROUNDS {
        note!("round {} of {ROUNDS} …", round + 1);
        fresh();
        paint.push(num(&b.eval(
            "(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime",
        )));
        ready.push(num(&b.eval("document.body.dataset.readyMs")));
        let query = format!("memory about topic {} and {}", 3 + round * 7, round % 13);
        search.push(num(
            &b.eval(&format!("({SEARCH})({})", Value::String(query)))
        ));

        fresh();
        b.eval(
            "(() => { const v = (i, x) => document.getElementById(i).value = x; \
             mnemograph.show('graph'); v('g-seed', 'root'); v('g-depth', '4'); \
             v('g-limit', '2000'); document.getElementById('graph-form').requestSubmit(); })()",
        );
        let done = b.wait_for(
            "(() => { const g = document.getElementById('graph').dataset; \
             return g.settledMs && g.drawn === g.nodes ? [Number(g.ms), Number(g.settledMs), Number(g.nodes)] : null; })()",
            WAIT,
        );
        let (f, s) = (num(&done[0]), num(&done[1]));
        if round == 0 {
            note!("  {} nodes drawn", done[2]);
        }
        fetched.push(f);
        settled.push(s);
        total.push(f + s);

        fresh();
        let d = b.eval(&DURING_WALK.replace("(SEARCH)", &format!("({SEARCH})")));
        late.push(num(&d[0]));
        during.push(num(&d[1]));
        walks.push(num(&d[2]));
        tasks += usize::from(d[3].as_bool() == Some(true));
    }
    let problems = b.problems();
    drop(b);
    let _ = child.kill();
    let _ = child.wait();

    out!(
        "Memory browser at {MEMORIES} memories / {RELATIONS} relations, headless Chromium, {}; medians of {ROUNDS} fresh page loads",
        fixture::machine()
    );
    out!("");
    out!("| what | median | worst | floor |");
    out!("|---|---:|---:|---|");
    let row = |what: &str, v: &[f64], floor: &str| {
        let worst = v.iter().copied().fold(f64::NAN, f64::max);
        out!(
            "| {what} | {:.0} ms | {worst:.0} ms | {floor} |",
            median(v.to_vec())
        );
    };
    row("first paint (navigation to first content)", &paint, "");
    row(
        "page ready (navigation to the server's counts shown)",
        &ready,
        "≤ 1,000 ms",
    );
    row(
        "first search (typing to hits shown, 200 ms debounce included)",
        &search,
        "≤ 1,000 ms",
    );
    row(
        "2,000-node neighbourhood: walk and its pages fetched",
        &fetched,
        "",
    );
    row(
        "2,000-node neighbourhood: laid out (to a still layout) and drawn",
        &settled,
        "≤ 1,500 ms",
    );
    row(
        "2,000-node neighbourhood: click to a still layout",
        &total,
        "",
    );
    row(
        "deep walk over every memory (a task), to its result",
        &walks,
        "",
    );
    row("… meanwhile: a search typed, to its hits", &during, "");
    row(
        "… meanwhile: longest the page's event loop was late",
        &late,
        "",
    );
    out!("");
    out!(
        "deep walks answered as tasks: {tasks} of {ROUNDS}; problems the page reported: {}",
        problems.len()
    );
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        for p in problems {
            note!("{p}");
        }
        ExitCode::FAILURE
    }
}
