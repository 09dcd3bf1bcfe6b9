//! A small Chrome DevTools Protocol client for UI tests: headless Chromium over
//! `--remote-debugging-pipe`, driving one page (navigate, evaluate, wait, screenshot, and what the
//! page reported), every call with a timeout.
//!
//! Chromium reads commands from fd 3 and writes replies and events to fd 4, each a JSON text
//! ended by a NUL byte; a shell moves the child's stdin and stdout there. A reader thread files
//! the replies by id and the events in order.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// How long a command or a navigation may take.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Chromium's flags besides its profile folder: headless, no sandbox (the tests may run as
/// root), no network of its own, a fixed window size for screenshots.
const FLAGS: &str = "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --no-default-browser-check --disable-background-networking --disable-component-update \
    --disable-sync --disable-extensions --mute-audio --hide-scrollbars --window-size=1280,900 \
    --remote-debugging-pipe";

/// Where tests keep what a person may want to look at afterwards (screenshots): `ui/<name>`
/// under the target's temp folder (the system's, for a program cargo gives none).
pub(crate) fn artefact(name: &str) -> PathBuf {
    option_env!("CARGO_TARGET_TMPDIR")
        .map_or_else(std::env::temp_dir, PathBuf::from)
        .join("ui")
        .join(name)
}

/// A headless Chromium and the one page it drives. Dropping it closes the browser and removes
/// its profile.
pub(crate) struct Browser {
    child: Child,
    to_chromium: Mutex<ChildStdin>,
    inbox: Arc<Inbox>,
    next_id: AtomicU64,
    /// The page's flat session, which page-level commands name.
    session: String,
    /// Chromium's stderr.
    log: PathBuf,
    /// Last, so that it is removed after Chromium is gone.
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts headless Chromium on a fresh profile with a blank page; `None` after a SKIPPED
    /// line when no browser is installed (a panic instead when `MNEMOGRAPH_REQUIRE_BROWSER` is
    /// set). The browser is `$MNEMOGRAPH_CHROMIUM`, else `chromium` or `chromium-browser` on
    /// `PATH`.
    pub(crate) fn launch() -> Option<Browser> {
        let Some(program) = find_chromium() else {
            assert!(
                env("MNEMOGRAPH_REQUIRE_BROWSER").is_none(),
                "no chromium (MNEMOGRAPH_REQUIRE_BROWSER is set, so this is a failure, not a skip)"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no chromium; set MNEMOGRAPH_CHROMIUM or install chromium"
            );
            return None;
        };
        let profile = tempfile::tempdir().expect("a temp folder for Chromium's profile");
        let log = profile.path().join("chromium.log");
        let mut user_data_dir = OsString::from("--user-data-dir=");
        user_data_dir.push(profile.path());
        let mut child = Command::new("sh")
            .args(["-c", r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#])
            .arg(&program)
            .args(FLAGS.split_whitespace())
            .args([user_data_dir, "about:blank".into()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(&log).expect("create Chromium's log"))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} failed: {e}", program.display()));
        let from_chromium = child.stdout.take().expect("Chromium's reply pipe");
        let inbox = Arc::new(Inbox::default());
        let reader = Arc::clone(&inbox);
        std::thread::spawn(move || reader.fill(from_chromium));
        let mut browser = Browser {
            to_chromium: Mutex::new(child.stdin.take().expect("Chromium's command pipe")),
            child,
            inbox,
            next_id: AtomicU64::new(1),
            session: String::new(),
            log,
            _profile: profile,
        };
        // A page of its own rather than the one Chromium starts with: in headless mode that one
        // has no window, and its screenshots are cut short of its viewport.
        let created = browser.command(None, "Target.createTarget", json!({"url": "about:blank"}));
        let attach = json!({"targetId": created["targetId"], "flatten": true});
        let attached = browser.command(None, "Target.attachToTarget", attach);
        let Some(session) = attached["sessionId"].as_str() else {
            browser.fail(&format!("Target.attachToTarget answered {attached}"))
        };
        browser.session = session.to_owned();
        for domain in ["Page", "Runtime", "Log"] {
            browser.call(&format!("{domain}.enable"), json!({}));
        }
        Some(browser)
    }

    /// Navigates the page to `url` and waits for its load event.
    pub(crate) fn goto(&self, url: &str) {
        let seen = self.inbox.lock().events.len();
        let answer = self.call("Page.navigate", json!({"url": url}));
        if let Some(error) = answer["errorText"].as_str() {
            self.fail(&format!("navigating to {url} failed: {error}"));
        }
        let loaded = self.inbox.wait(TIMEOUT, |received| {
            let events = &received.events[seen..];
            events
                .iter()
                .any(|e| e["method"] == "Page.loadEventFired")
                .then_some(())
        });
        if let Err(e) = loaded {
            self.fail(&format!("waiting for the load event of {url}: {e}"));
        }
    }

    /// The value of `js` in the page, promises awaited: `Null` for `undefined`, a string for
    /// what JSON cannot hold (`NaN`, `Infinity`, bigints). Panics with the text of an exception.
    pub(crate) fn eval(&self, js: &str) -> Value {
        self.try_eval(js)
            .unwrap_or_else(|e| self.fail(&format!("evaluating `{js}` threw: {e}")))
    }

    /// [`Browser::eval`], with the text of an exception as the error instead of a panic.
    pub(crate) fn try_eval(&self, js: &str) -> Result<Value, String> {
        let params = json!({"expression": js, "awaitPromise": true, "returnByValue": true});
        let answer = self.call("Runtime.evaluate", params);
        if let Some(details) = answer.get("exceptionDetails") {
            return Err(exception_text(details));
        }
        let result = &answer["result"];
        let value = result
            .get("value")
            .or_else(|| result.get("unserializableValue"));
        Ok(value.cloned().unwrap_or(Value::Null))
    }

    /// Evaluates `js` every 50 ms until its value is truthy, and returns that value (a throw
    /// counts as not yet); panics after `timeout` naming `js` and what it last gave.
    pub(crate) fn wait_for(&self, js: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let last = self.try_eval(js);
            if let Ok(value) = &last
                && truthy(value)
            {
                return value.clone();
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "`{js}` was not truthy within {timeout:?}: {last:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes a PNG of the page's viewport to `path`, creating its folder.
    pub(crate) fn screenshot(&self, path: &Path) {
        let answer = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = answer["data"]
            .as_str()
            .and_then(|data| base64::engine::general_purpose::STANDARD.decode(data).ok())
            .unwrap_or_else(|| self.fail("Page.captureScreenshot answered without PNG data"));
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).expect("create the screenshot's folder");
        }
        std::fs::write(path, png)
            .unwrap_or_else(|e| panic!("writing the screenshot {} failed: {e}", path.display()));
    }

    /// What the page reported so far, a line each: console errors and warnings, uncaught
    /// exceptions, and the browser's error and warning log entries (CSP violations among them).
    pub(crate) fn problems(&self) -> Vec<String> {
        let received = self.inbox.lock();
        received.events.iter().filter_map(problem).collect()
    }

    /// Sends `headers` with every request of the page from now on.
    pub(crate) fn set_extra_headers(&self, headers: &[(&str, &str)]) {
        let headers: serde_json::Map<String, Value> = headers
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.into()))
            .collect();
        self.call("Network.enable", json!({}));
        self.call("Network.setExtraHTTPHeaders", json!({"headers": headers}));
    }

    /// `method` on the page; its result.
    fn call(&self, method: &str, params: Value) -> Value {
        self.command(Some(&self.session), method, params)
    }

    /// `method` on `session` (on the browser when `None`); its result, or a panic naming the
    /// command and what went wrong.
    fn command(&self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.send(session, method, &params, TIMEOUT)
            .unwrap_or_else(|e| self.fail(&format!("{method} {params}: {e}")))
    }

    /// Sends a command and waits up to `timeout` for its reply.
    fn send(
        &self,
        session: Option<&str>,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        let mut bytes = serde_json::to_vec(&message).expect("a CDP command as JSON");
        bytes.push(0);
        let mut pipe = self
            .to_chromium
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (pipe.write_all(&bytes).and_then(|()| pipe.flush()))
            .map_err(|e| format!("writing to Chromium failed ({e}); has it exited?"))?;
        drop(pipe);
        let reply = self
            .inbox
            .wait(timeout, |received| received.replies.remove(&id))?;
        match reply.get("error") {
            Some(error) => Err(format!("Chromium answered with an error: {error}")),
            None => Ok(reply.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// Panics with `what` and the last lines of Chromium's log (less its complaints that there
    /// is no D-Bus, which it makes all along in a container).
    fn fail(&self, what: &str) -> ! {
        let log = std::fs::read(&self.log).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("dbus")).collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        panic!("{what}\n--- the last lines of Chromium's log ---\n{tail}")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.send(None, "Browser.close", &json!({}), Duration::from_secs(2));
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the reader thread received, and the signal that something arrived.
#[derive(Default)]
struct Inbox {
    received: Mutex<Received>,
    arrived: Condvar,
}

/// Replies by id, events in order, and whether Chromium's end of the pipe closed.
#[derive(Default)]
struct Received {
    replies: HashMap<u64, Value>,
    events: Vec<Value>,
    closed: bool,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files the messages Chromium writes until its pipe closes (the reader thread's work).
    fn fill(&self, from_chromium: ChildStdout) {
        for message in BufReader::new(from_chromium).split(0).map_while(Result::ok) {
            let Ok(message) = serde_json::from_slice::<Value>(&message) else {
                continue;
            };
            let mut received = self.lock();
            match message["id"].as_u64() {
                Some(id) => drop(received.replies.insert(id, message)),
                None => received.events.push(message),
            }
            self.arrived.notify_all();
        }
        self.lock().closed = true;
        self.arrived.notify_all();
    }

    /// Waits up to `timeout` for `take` to find what it looks for.
    fn wait<T>(
        &self,
        timeout: Duration,
        mut take: impl FnMut(&mut Received) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + timeout;
        let mut received = self.lock();
        loop {
            if let Some(found) = take(&mut received) {
                return Ok(found);
            }
            if received.closed {
                return Err("Chromium exited (its pipe closed)".to_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no answer within {timeout:?}"));
            }
            let woken = self.arrived.wait_timeout(received, left);
            received = woken.unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

/// A line for an event that reports a problem of the page; `None` for other events.
fn problem(event: &Value) -> Option<String> {
    let params = &event["params"];
    let line = match event["method"].as_str()? {
        "Runtime.consoleAPICalled" => {
            let kind = params["type"].as_str()?;
            let args: Vec<String> = params["args"].as_array()?.iter().map(remote_text).collect();
            matches!(kind, "error" | "warning" | "assert")
                .then(|| format!("console.{kind}: {}", args.join(" ")))?
        }
        "Runtime.exceptionThrown" => exception_text(&params["exceptionDetails"]),
        "Log.entryAdded" => {
            let entry = &params["entry"];
            let (level, source) = (entry["level"].as_str()?, entry["source"].as_str()?);
            matches!(level, "error" | "warning")
                .then(|| format!("{source} {level}: {}", entry["text"].as_str().unwrap_or("")))?
        }
        _ => return None,
    };
    Some(line.lines().map(str::trim).collect::<Vec<_>>().join(" "))
}

/// The text of an exception: CDP's prefix (`Uncaught`) and the thrown value (an error's message
/// and stack).
fn exception_text(details: &Value) -> String {
    let text = details["text"].as_str().unwrap_or("exception");
    match details.get("exception") {
        Some(exception) => format!("{text} {}", remote_text(exception)),
        None => text.to_owned(),
    }
}

/// A JavaScript value as CDP describes it (a `RemoteObject`), as text.
fn remote_text(object: &Value) -> String {
    match object.get("value") {
        Some(Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
        None => ["description", "unserializableValue", "type"]
            .iter()
            .find_map(|key| object[key].as_str())
            .unwrap_or("?")
            .to_owned(),
    }
}

/// JavaScript's truthiness of a value as `eval` returns it.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

/// `$MNEMOGRAPH_CHROMIUM`, else `chromium` or `chromium-browser` on `PATH`.
fn find_chromium() -> Option<PathBuf> {
    if let Some(program) = env("MNEMOGRAPH_CHROMIUM") {
        return Some(program.into());
    }
    let path = env("PATH")?;
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|folder| folder.join(name))
            .find(|p| p.is_file())
    })
}

/// A non-empty environment variable.
#[allow(
    clippy::disallowed_methods,
    reason = "where the tests find a browser, not configuration"
)]
fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The test page: a button whose click (wired up by a script from the page's origin) writes into
/// a div, and an inline script that the page's CSP refuses to run.
const PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>cdp</title></head>
<body><button id="go">Go</button><div id="out"></div>
<script src="/app.js"></script><script>document.title = "inline ran";</script></body></html>"#;

const APP: &str = r#"document.getElementById("go").onclick = () => {
    document.getElementById("out").textContent = "clicked";
};"#;

/// Serves `/app.js`, `/headers` (the request's head, as text) and `PAGE` at any other path, all
/// under `script-src 'self'`, from a thread; the base URL.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a port for the test page");
    let base = format!(
        "http://{}",
        listener.local_addr().expect("the test page's address")
    );
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut head = String::new();
            for line in BufReader::new(&stream).lines().map_while(Result::ok) {
                if line.is_empty() {
                    break;
                }
                head.push_str(&line);
                head.push('\n');
            }
            let (kind, body) = match head.split_whitespace().nth(1) {
                Some("/app.js") => ("text/javascript", APP),
                Some("/headers") => ("text/plain", head.as_str()),
                _ => ("text/html; charset=utf-8", PAGE),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                 Content-Security-Policy: script-src 'self'\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    base
}

#[test]
fn drives_a_page() {
    let Some(b) = Browser::launch() else { return };
    let base = serve();
    b.goto(&format!("{base}/"));
    assert_eq!(b.eval("6 * 7"), json!(42));
    assert_eq!(b.eval("Promise.resolve('later')"), json!("later"));
    assert_eq!(b.eval("undefined"), Value::Null);
    b.eval(r#"document.getElementById("go").click()"#);
    let out = r#"document.getElementById("out").textContent"#;
    assert_eq!(b.wait_for(out, Duration::from_secs(5)), json!("clicked"));
    let error = b
        .try_eval(r#"throw new Error("x")"#)
        .expect_err("a throw is an Err");
    assert!(error.contains("Error: x"), "{error}");

    let shot = artefact("browser_drives_a_page.png");
    b.screenshot(&shot);
    let png = std::fs::read(&shot).expect("read the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert_eq!(png[16..20], 1280_u32.to_be_bytes(), "the PNG's width");

    b.set_extra_headers(&[("X-Mnemograph-Test", "yes")]);
    b.goto(&format!("{base}/headers"));
    let head = b.eval("document.body.innerText.toLowerCase()");
    assert!(
        head.as_str()
            .is_some_and(|h| h.contains("x-mnemograph-test: yes")),
        "{head}"
    );
}

#[test]
fn reports_what_went_wrong_on_the_page() {
    let Some(b) = Browser::launch() else { return };
    b.goto(&format!("{}/", serve()));
    assert_eq!(
        b.eval("document.title"),
        json!("cdp"),
        "the inline script ran"
    );
    // The page's events come down the pipe in order: the reply to a promise that settles after
    // the timer that throws comes after what the page reported.
    b.eval(
        r#"console.warn("careful"); console.log("fine");
           setTimeout(() => { throw new Error("late"); });
           new Promise(done => setTimeout(done, 50))"#,
    );
    let problems = b.problems();
    for e in [
        "Content Security Policy",
        "console.warning: careful",
        "Uncaught Error: late",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(e)),
            "{e} not in {problems:#?}"
        );
    }
    assert!(
        !problems.iter().any(|p| p.contains("fine")),
        "{problems:#?}"
    );
}

#[test]
fn fails_fast_once_chromium_is_gone() {
    let Some(mut b) = Browser::launch() else {
        return;
    };
    b.child.kill().expect("kill Chromium");
    let started = Instant::now();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.eval("1")))
        .expect_err("a call to a dead browser panics");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("Chromium"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
