//! The memory browser in a real browser: headless Chromium loads the page a real `serve --http`
//! serves, types, clicks and reads what it shows. Memories are written by a real MCP client
//! first. Each view's screenshot is kept under the target folder (`ui/*.png`). Without Chromium
//! the tests say SKIPPED, unless MNEMOGRAPH_REQUIRE_BROWSER is set (CI).

use std::time::Duration;

use serde_json::{Value, json};

use crate::browser::{Browser, artefact};
use crate::http::add_token_with;
use crate::support::{Era, HttpChild, Server};

const WAIT: Duration = Duration::from_secs(20);

/// A JavaScript string literal of `s`.
fn js(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Types `text` into the input `id` as a person would (value, then an input event).
fn type_into(b: &Browser, id: &str, text: &str) {
    b.eval(&format!(
        "(() => {{ const e = document.getElementById({}); e.value = {}; \
         e.dispatchEvent(new Event('input', {{bubbles: true}})); }})()",
        js(id),
        js(text)
    ));
}

/// Clicks the first element `selector` matches.
fn click(b: &Browser, selector: &str) {
    b.eval(&format!(
        "(() => {{ const e = document.querySelector({}); if (!e) throw new Error('nothing matches ' + {}); e.click(); }})()",
        js(selector),
        js(selector)
    ));
}

/// Clicks the search hit whose text holds `text`.
fn click_hit(b: &Browser, text: &str) {
    b.wait_for(
        &format!(
            "[...document.querySelectorAll('#hits .hit')].some(h => h.innerText.includes({}))",
            js(text)
        ),
        WAIT,
    );
    b.eval(&format!(
        "[...document.querySelectorAll('#hits .hit')].find(h => h.innerText.includes({})).click()",
        js(text)
    ));
}

/// The page's text of the element `id`.
/// Shows the page's view `id`, waits until `ready` holds, and returns the view's text.
fn view_text(b: &Browser, id: &str, ready: &str) -> String {
    b.eval(&format!("mnemograph.show({})", js(id)));
    b.wait_for(ready, WAIT);
    text_of(b, id)
}

fn text_of(b: &Browser, id: &str) -> String {
    b.eval(&format!(
        "(document.getElementById({}) || {{}}).innerText || ''",
        js(id)
    ))
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

/// Opens the page at `base` (with `token` in the tab's session storage) and waits until it has
/// read the server's counts.
fn open_page(b: &Browser, base: &str, token: Option<&str>) {
    b.goto(&format!("{base}/"));
    if let Some(token) = token {
        b.eval(&format!(
            "sessionStorage.setItem('mnemograph.token', {})",
            js(token)
        ));
        b.goto(&format!("{base}/"));
    }
    b.wait_for("document.body.dataset.ready", WAIT);
}

/// Nothing the page did broke its security policy or threw.
fn assert_clean(b: &Browser) {
    let problems = b.problems();
    assert!(problems.is_empty(), "the page reported: {problems:#?}");
}

/// Runs browser steps on a blocking thread of the test's runtime.
fn steps<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A `serve --http` child on a fresh database in `dir` (with `extra` flags), the page's base
/// URL, and a real MCP client of it sending `token`.
struct Served {
    dir: tempfile::TempDir,
    http: HttpChild,
    base: String,
    client: Server,
}

impl Served {
    async fn start_in(dir: tempfile::TempDir, extra: &[&str], token: Option<&str>) -> Served {
        let db = dir.path().join("m.db");
        let http = HttpChild::beside(&db, "serve.log", extra).await;
        let base = http.url.trim_end_matches("/mcp").to_owned();
        let client = Server::attach(&http.url, Era::Discover, token, &http.log).await;
        Served {
            dir,
            http,
            base,
            client,
        }
    }

    async fn start() -> Served {
        Served::start_in(tempfile::tempdir().expect("temp dir"), &[], None).await
    }

    async fn stop(self) {
        self.client.stop().await;
        self.http.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_searches_opens_a_memory_and_draws_its_neighbourhood() {
    let Some(b) = Browser::launch() else { return };
    let served = Served::start().await;
    let (s, base) = (&served.client, &served.base);
    let mut memories = vec![
        json!({"name": "alice", "content": "Alice is the tech lead of the Atlas project", "kind": "fact"}),
        json!({"name": "tea", "content": "Alice prefers green tea", "links": [{"to": "alice", "kind": "about"}]}),
        json!({"name": "atlas", "content": "The Atlas project ships in March", "links": [{"to": "alice", "kind": "led_by", "weight": 0.8}]}),
        json!({"name": "xss", "content": "<img src=x onerror=\"window.__xss=1\"><script>window.__xss=2</script> careful with markup", "links": [{"to": "atlas", "kind": "about"}]}),
    ];
    for i in 0..40 {
        memories.push(
            json!({"name": format!("task{i}"), "content": format!("Atlas task number {i}"),
            "links": [{"to": "atlas", "kind": "part_of"}]}),
        );
    }
    s.remember(Value::Array(memories)).await;
    s.ok(
        "update",
        json!({"id": "tea", "content": "Alice prefers green tea, no sugar"}),
    )
    .await;

    steps(|| {
        open_page(&b, base, None);
        b.screenshot(&artefact("load.png"));

        // Search finds the memory, and says why.
        type_into(&b, "q", "green tea");
        b.wait_for(
            "(document.querySelector('#hits .hit') || {}).innerText?.includes('green tea, no sugar')",
            WAIT,
        );
        let first = text_of(&b, "hits");
        assert!(first.contains("words #1"), "{first}");
        b.screenshot(&artefact("search.png"));

        // Opening it shows its content, its relation and the version before the update.
        click(&b, "#hits .hit");
        b.wait_for(
            "document.getElementById('memory-content') && document.getElementById('memory-content').innerText.includes('no sugar')",
            WAIT,
        );
        let relations = text_of(&b, "memory-relations");
        assert!(
            relations.contains("about") && relations.contains("alice"),
            "{relations}"
        );
        let fields = text_of(&b, "memory-body");
        assert!(fields.contains("salience\n"), "{fields}");
        let history = text_of(&b, "memory-history");
        assert!(
            history.contains("v1 → v2") && history.contains("update"),
            "{history}"
        );
        assert_eq!(
            b.eval("document.querySelectorAll('#memory-history ins').length > 0"),
            json!(true),
            "the change is marked"
        );
        b.screenshot(&artefact("memory.png"));

        // The graph around Atlas: every memory within two hops drawn.
        type_into(&b, "q", "Atlas ships");
        click_hit(&b, "ships in March");
        b.wait_for(
            "(document.getElementById('memory-content') || {}).innerText === 'The Atlas project ships in March'",
            WAIT,
        );
        click(&b, "#memory-graph");
        let drawn = b.wait_for(
            "(() => { const g = document.getElementById('graph').dataset; \
             return g.nodes === '44' && g.drawn === '44' ? Number(g.drawn) : 0; })()",
            WAIT,
        );
        assert_eq!(drawn, json!(44), "atlas, alice, tea, xss and 40 tasks");
        assert_eq!(
            b.eval("Number(document.getElementById('graph').dataset.links)"),
            json!(43)
        );
        b.screenshot(&artefact("graph.png"));

        // One hop around Atlas leaves tea out; expanding Alice in place brings it in, and the
        // path from Atlas to tea goes through Alice.
        b.eval("document.getElementById('g-depth').value = '1'; document.getElementById('graph-form').requestSubmit()");
        b.wait_for(
            "document.getElementById('graph').dataset.nodes === '43'",
            WAIT,
        );
        b.eval("mnemograph.show('search')");
        type_into(&b, "q", "tech lead");
        click_hit(&b, "tech lead of the Atlas");
        b.wait_for(
            "((document.getElementById('memory-content') || {}).innerText || '').includes('tech lead')",
            WAIT,
        );
        click(&b, "#memory-expand");
        b.wait_for(
            "document.getElementById('graph').dataset.nodes === '44'",
            WAIT,
        );
        b.eval("document.getElementById('g-to').value = 'tea'");
        click(&b, "#g-path");
        let path = b.wait_for("document.getElementById('graph').dataset.path", WAIT);
        assert_eq!(
            path.as_str().unwrap_or_default().split(' ').count(),
            3,
            "atlas, alice, tea: {path}"
        );
        b.screenshot(&artefact("path.png"));

        // Save as HTML: one file of the walk the form names — one hop around Atlas, 43 memories
        // (the expansion drawn in place is the page's, not the walk's); the download is caught
        // in the page.
        b.eval(
            "URL.createObjectURL = (blob) => { window.__saved = blob; return 'about:blank'; }; \
             HTMLAnchorElement.prototype.click = function () { window.__download = this.download; };",
        );
        click(&b, "#g-save");
        b.wait_for("window.__saved !== undefined", WAIT);
        let saved = b.eval(
            "window.__saved.text().then(t => [t.startsWith('<!doctype html>'), \
             (t.match(/\"t\":\"m\"/g) || []).length, t.includes('window.__xss=2</script>'), window.__download])",
        );
        assert_eq!(saved[0], json!(true), "{saved}");
        assert_eq!(saved[1], json!(43), "{saved}");
        assert_eq!(
            saved[2],
            json!(false),
            "content cannot close the records block: {saved}"
        );
        assert!(
            saved[3].as_str().unwrap_or_default().ends_with(".html"),
            "{saved}"
        );

        // Content is text everywhere: the markup memory shows its characters and runs nothing.
        b.eval("mnemograph.show('search')");
        type_into(&b, "q", "careful with markup");
        click_hit(&b, "<img src=x");
        b.wait_for(
            "((document.getElementById('memory-content') || {}).innerText || '').includes('<script>')",
            WAIT,
        );
        assert_eq!(
            b.eval("[window.__xss === undefined, document.querySelectorAll('img, main script, aside script').length]"),
            json!([true, 0])
        );
        b.screenshot(&artefact("xss.png"));

        let health = view_text(
            &b,
            "health",
            "(document.querySelector('#health [data-field=memories]') || {}).innerText === '44'",
        );
        assert!(
            health.contains("ready\nyes") && health.contains("text index lag\n0"),
            "{health}"
        );
        b.screenshot(&artefact("health.png"));
        assert_clean(&b);
    });
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_is_previewed_run_and_undone_from_the_page() {
    let Some(b) = Browser::launch() else { return };
    let served = Served::start().await;
    let (s, base) = (&served.client, &served.base);
    s.remember(json!([
        {"content": "Bob drinks black coffee every morning before the standup meeting"},
        {"content": "Bob drinks black coffee every morning before the standup meeting."},
        {"content": "The office plants are watered on Fridays"}
    ]))
    .await;

    steps(|| {
        open_page(&b, base, None);
        b.eval("window.confirm = () => true; mnemograph.show('runs')");
        click(&b, "#r-preview");
        b.wait_for(
            "(document.querySelector('#preview [data-step=merge]') || {}).innerText?.startsWith('merged (1)')",
            WAIT,
        );
        let preview = text_of(&b, "preview");
        assert!(preview.contains("nothing written"), "{preview}");
        b.screenshot(&artefact("preview.png"));

        click(&b, "#r-apply");
        b.wait_for("document.querySelectorAll('#runs li').length === 1", WAIT);
        let runs = text_of(&b, "runs");
        assert!(runs.contains("merged 1"), "{runs}");

        // The survivor shows its lineage with the run that merged it; undo from there.
        b.eval("mnemograph.show('search')");
        type_into(&b, "q", "black coffee");
        b.wait_for("document.querySelectorAll('#hits .hit').length === 1", WAIT);
        click(&b, "#hits .hit");
        b.wait_for(
            "((document.getElementById('memory-lineage') || {}).innerText || '').includes('undo the run')",
            WAIT,
        );
        b.screenshot(&artefact("lineage.png"));
        click(&b, "#memory-lineage .lineage-run button");
        b.wait_for(
            "document.getElementById('status').innerText.startsWith('undone')",
            WAIT,
        );
        // The run is undone, and its merged memory is a memory of its own again.
        b.eval("mnemograph.show('runs')");
        b.wait_for(
            "document.getElementById('runs').innerText.includes('undone')",
            WAIT,
        );
        let merged = b.eval(
            "mnemograph.call('get', {ids: [document.querySelector('#memory-lineage .mem').dataset.id]})\
             .then(o => o.memories[0].merged === undefined)",
        );
        assert_eq!(merged, json!(true));
        assert_clean(&b);
    });
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_sees_and_does_through_the_page_only_what_its_tools_may() {
    let Some(b) = Browser::launch() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens");
    let admin = add_token_with(&tokens, "admin", "read,write", &[]);
    let reader = add_token_with(&tokens, "reader", "read", &["--namespaces", "team"]);
    let tokens_arg = tokens.to_string_lossy().into_owned();
    let served = Served::start_in(dir, &["--tokens", &tokens_arg], Some(&admin)).await;
    let (s, base) = (&served.client, &served.base);
    let ids = s
        .remember(json!([
            {"content": "The team standup is at nine", "namespace": "team"},
            {"content": "The private salary review is in June", "namespace": "hr"}
        ]))
        .await;
    let salary = ids[1].clone();

    steps(|| {
        // No token: the page asks for one and shows nothing.
        open_page(&b, base, None);
        assert_eq!(b.eval("document.body.dataset.ready"), json!("error"));
        assert_eq!(
            b.eval("document.getElementById('token-panel').hidden"),
            json!(false)
        );
        assert!(text_of(&b, "status").contains("token"));
        b.screenshot(&artefact("token.png"));

        // A read token limited to `team`: its namespace only, and no writes.
        open_page(&b, base, Some(&reader));
        assert_eq!(b.eval("document.body.dataset.ready"), json!("1"));
        let namespaces =
            b.eval("[...document.querySelectorAll('#f-namespace option')].map(o => o.value)");
        assert_eq!(namespaces, json!(["", "team"]));
        type_into(&b, "q", "standup");
        b.wait_for("document.querySelectorAll('#hits .hit').length === 1", WAIT);
        type_into(&b, "q", "salary review");
        b.wait_for(
            "document.getElementById('hits-note').innerText.startsWith('0 hits')",
            WAIT,
        );
        let hidden = b.eval(&format!(
            "mnemograph.call('get', {{ids: [{}]}}).then(o => (o.memories || []).length, e => e.message)",
            js(&salary)
        ));
        assert_ne!(hidden, json!(1), "the other namespace's memory: {hidden}");
        let refused = b.eval(
            "mnemograph.call('remember', {memories: [{content: 'x', namespace: 'team'}]}).then(() => 'written', e => e.message)",
        );
        let refused = refused.as_str().unwrap_or_default().to_owned();
        assert!(refused.contains("write"), "{refused}");
        b.eval("window.confirm = () => true; mnemograph.show('runs')");
        click(&b, "#r-apply");
        b.wait_for(
            "document.getElementById('status').classList.contains('error')",
            WAIT,
        );
        b.screenshot(&artefact("read-token.png"));
        // The token never reaches a URL or a cookie.
        assert_eq!(
            b.eval(&format!(
                "location.href.includes({}) || document.cookie !== ''",
                js(&reader)
            )),
            json!(false)
        );
    });
    let log = std::fs::read_to_string(&served.http.log).unwrap_or_default();
    assert!(!log.contains(&reader), "the token was logged");
    served.stop().await;
}

/// The page's own origin may call `/mcp` on a server reached by a name it admits; another
/// site's page may not, and the files carry their security headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_its_policy_and_its_own_origin_may_call() {
    use crate::http::{MCP_HEADERS, tools_list};
    use crate::support::http_request;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("m.db");
    let http = HttpChild::beside(&db, "serve.log", &["--allow-host", "memory.example"]).await;
    let at = http.authority().to_owned();
    let port = at.rsplit(':').next().expect("a port").to_owned();
    let host = format!("memory.example:{port}");

    let (status, page) = http_request(&at, "GET", "/", &[("Host", &host)], b"").await;
    assert_eq!(status, 200, "{page}");
    let head = page.to_ascii_lowercase();
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self';"),
        "{page}"
    );
    assert!(head.contains("x-content-type-options: nosniff"), "{page}");
    assert!(page.contains("<script src=\"/ui/app.js\" defer></script>"));
    let (status, _) = http_request(&at, "GET", "/ui/app.js", &[("Host", &host)], b"").await;
    assert_eq!(status, 200);

    let own = format!("http://{host}");
    let mut headers = MCP_HEADERS.to_vec();
    headers.push(("Host", &host));
    headers.push(("Origin", &own));
    let (status, body) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 200, "{body}");
    headers.pop();
    let foreign = format!("http://attacker.example:{port}");
    headers.push(("Origin", &foreign));
    let (status, _) = http_request(&at, "POST", "/mcp", &headers, &tools_list()).await;
    assert_eq!(status, 403, "another site's page");
    http.stop().await;
}

/// `mnemograph ui` prints the page's URL on a loopback port and serves it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_serves_the_page_on_loopback_and_prints_its_url() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("m.db");
    let mut child = tokio::process::Command::new(crate::support::BIN)
        .args(["ui", "--db"])
        .arg(&db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mnemograph ui");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("a line within 60 s")
        .expect("read stdout")
        .expect("a line");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no loopback URL in {line:?}"));
    let at = url.trim_start_matches("http://").trim_end_matches('/');
    let (status, page) = crate::support::http_request(at, "GET", "/", &[], b"").await;
    assert_eq!(status, 200);
    assert!(page.contains("<title>mnemograph</title>"));
    crate::support::terminate(&child);
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
}

/// A graph of `memories` memories in namespace `walk` (the first named `hub`), each with five
/// relations (to the next and four pseudo-random others), imported with the CLI.
fn import_walk_graph(db: &std::path::Path, memories: usize) {
    use std::io::Write;
    let file = db.with_file_name("graph.jsonl");
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(&file).expect("create the graph file"));
    writeln!(
        out,
        r#"{{"exported_at":"2026-01-01T00:00:00Z","format":"mnemograph","type":"header","version":1}}"#
    )
    .expect("write");
    for i in 0..memories {
        let name = if i == 0 { r#","name":"hub""# } else { "" };
        writeln!(
            out,
            r#"{{"type":"memory","id":"m_w{i:07}","namespace":"walk"{name},"content":"note {i} about invoice {} and order {}"}}"#,
            i % 97,
            i % 13
        )
        .expect("write");
    }
    let mut s = 42u64;
    let mut r = 0;
    for i in 0..memories {
        let mut to = Vec::with_capacity(5);
        for k in 0..5 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let j = if k == 0 {
                (i + 1) % memories
            } else {
                (s % memories as u64) as usize
            };
            // One relation per (from, to, kind): a repeat with another id is a conflict.
            if j == i || to.contains(&j) {
                continue;
            }
            to.push(j);
            writeln!(
                out,
                r#"{{"type":"relation","id":"r_w{r:07}","from":"m_w{i:07}","to":"m_w{j:07}","kind":"about","weight":0.8}}"#
            )
            .expect("write");
            r += 1;
        }
    }
    out.flush().expect("flush");
    drop(out);
    let done = std::process::Command::new(crate::support::BIN)
        .args(["import", "--db"])
        .arg(db)
        .arg(&file)
        .output()
        .expect("run mnemograph import");
    assert!(
        done.status.success(),
        "{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
}

/// A deep walk is the server's task: the page shows its progress moving, draws what it
/// reached, and a second one is cancelled from the page; the Tasks view lists both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_walk_shows_its_progress_and_can_be_cancelled() {
    let Some(b) = Browser::launch() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("m.db");
    import_walk_graph(&db, 100_000);
    let http = HttpChild::beside(&db, "serve.log", &[]).await;
    let base = http.url.trim_end_matches("/mcp").to_owned();
    let walk = "(() => { const v = (i, x) => document.getElementById(i).value = x; \
        v('g-seed', 'hub'); v('g-namespace', 'walk'); v('g-depth', '8'); \
        v('g-focus', 'invoice overdue'); v('g-limit', '2000'); \
        document.getElementById('graph-form').requestSubmit(); })()";

    steps(|| {
        open_page(&b, &base, None);
        b.eval("mnemograph.show('graph')");
        b.eval(walk);
        b.wait_for(
            "document.getElementById('g-progress').dataset.ended === 'completed'",
            Duration::from_secs(60),
        );
        let values: Vec<f64> = b
            .eval("document.getElementById('g-progress').dataset.values")
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .map(|v| v.parse().expect("a fraction"))
            .collect();
        assert!(
            values.len() >= 2
                && values.windows(2).all(|w| w[0] <= w[1])
                && values[0] < values[values.len() - 1],
            "the bar moved forward: {values:?}"
        );
        let drawn = b.wait_for(
            "(() => { const g = document.getElementById('graph').dataset; \
             return g.drawn === '2000' && g.settledMs ? Number(g.settledMs) : 0; })()",
            WAIT,
        );
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("progress shown {values:?}; 2,000 nodes settled in {drawn} ms\n"),
        );
        b.screenshot(&artefact("walk.png"));

        // The same walk again, cancelled while it runs.
        b.eval(walk);
        b.wait_for("!document.getElementById('g-progress').hidden", WAIT);
        b.screenshot(&artefact("walk-progress.png"));
        click(&b, "#g-cancel");
        b.wait_for(
            "document.getElementById('g-progress').dataset.ended === 'cancelled'",
            Duration::from_secs(60),
        );
        assert!(text_of(&b, "status").contains("cancelled"));

        let tasks = view_text(
            &b,
            "tasks",
            "document.querySelectorAll('#tasks tbody tr').length === 2",
        );
        assert!(
            tasks.contains("completed") && tasks.contains("cancelled"),
            "{tasks}"
        );
        b.screenshot(&artefact("tasks.png"));
        assert_clean(&b);
    });
    http.stop().await;
}

/// `export --format html` writes one page that shows a subgraph with no server: its list, its
/// graph and a memory's details, content as text, nothing fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_page_shows_the_subgraph_without_a_server() {
    let Some(b) = Browser::launch() else { return };
    let served = Served::start().await;
    served.client.remember(json!([
        {"name": "atlas", "content": "The Atlas project ships in March"},
        {"name": "alice", "content": "Alice leads Atlas", "links": [{"to": "atlas", "kind": "leads"}]},
        {"name": "xss", "content": "<img src=x onerror=\"window.__xss=1\"></script><script>window.__xss=2</script>",
         "links": [{"to": "atlas", "kind": "about"}]},
        {"name": "far", "content": "Unrelated and unlinked"}
    ]))
    .await;
    let db = served.dir.path().join("m.db");
    let page = served.dir.path().join("atlas.html");
    let done = std::process::Command::new(crate::support::BIN)
        .args([
            "export", "--format", "html", "--around", "atlas", "--depth", "2", "--db",
        ])
        .arg(&db)
        .arg("--out")
        .arg(&page)
        .output()
        .expect("run mnemograph export");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(!html.contains("window.__xss=2</script>"), "content escaped");
    assert!(!html.contains("Unrelated"), "only what the walk reaches");

    steps(|| {
        b.goto(&format!("file://{}", page.display()));
        b.wait_for(
            "document.getElementById('graph').dataset.nodes === '3'",
            WAIT,
        );
        assert!(text_of(&b, "counts").starts_with("3 of 3 memories · 2 relations"));
        type_into(&b, "filter", "leads");
        b.wait_for("document.querySelectorAll('#list li').length === 1", WAIT);
        click(&b, "#list li");
        assert!(text_of(&b, "detail").contains("Alice leads Atlas"));
        type_into(&b, "filter", "script");
        b.wait_for("document.querySelectorAll('#list li').length === 1", WAIT);
        click(&b, "#list li");
        assert!(text_of(&b, "detail").contains("<script>window.__xss=2</script>"));
        assert_eq!(
            b.eval("[window.__xss === undefined, document.querySelectorAll('img').length]"),
            json!([true, 0])
        );
        b.screenshot(&artefact("export.png"));
        assert_clean(&b);
    });
    served.stop().await;
}
