//! Faults of the machine rather than of the call reach the client with what happened and what to
//! do (not only "internal error, see the server log"): a database page damaged on disk, and a disk
//! that fills up under the server (which goes on indexing, without a restart, once space is free).

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{BIN, CallError, Era, Raw, TestDb};

const MARKER: &str = "PAGE-TO-DAMAGE-7f3c";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_database_page_is_reported_with_what_to_do() {
    let db = TestDb::new();
    let s = db.serve(Era::Initialize).await;
    // One memory per page (about 3 KB each), one of them marked.
    let filler = "lorem ipsum dolor sit amet ".repeat(110);
    let memories: Vec<_> = (0..40)
        .map(|i| {
            let mark = if i == 20 { MARKER } else { "plain" };
            json!({"content": format!("memory {i} {mark} {filler}")})
        })
        .collect();
    let ids = s.remember(json!(memories)).await;
    s.stop().await;

    // Overwrite the page holding the marked memory, as a failing disk or a stray write would.
    let mut bytes = std::fs::read(&db.path).expect("read the database");
    let at = bytes
        .windows(MARKER.len())
        .position(|w| w == MARKER.as_bytes())
        .expect("the marked memory is in the database file (the log was checkpointed at close)");
    let page = 4096;
    let start = at / page * page;
    bytes[start..start + page].fill(0xA5);
    std::fs::write(&db.path, &bytes).expect("write the database");

    let s = db.serve(Era::Initialize).await;
    match s.call("get", json!({"ids": [ids[20]]})).await {
        Err(CallError::Tool(text)) => {
            assert!(text.contains("damaged"), "{text}");
            assert!(text.contains("mnemograph doctor"), "{text}");
            assert!(text.contains("backup"), "{text}");
        }
        other => panic!("{other:?}\n{}", s.log_tail()),
    }
    // The server goes on serving what is intact.
    let got = s.ok("get", json!({"ids": [ids[3]]})).await;
    assert_eq!(got["memories"][0]["id"], ids[3].as_str(), "{got}");
    s.stop().await;
}

/// A shell line that mounts a 4 MiB tmpfs on `$1` in a private mount namespace, puts a 512 KiB
/// `ballast` file on it (removed to free space), and runs the rest of its arguments there.
const ON_SMALL_DISK: &str = r#"mount -t tmpfs -o size=4m tmpfs "$1" && dd if=/dev/zero of="$1/ballast" bs=64k count=8 2>/dev/null && shift && exec "$@""#;

/// The change-log position the committed text index of the database at `db` records (its
/// tantivy commit payload).
fn committed_text_seq(db: &Path) -> i64 {
    let mut meta = db.as_os_str().to_owned();
    meta.push(".index/text/meta.json");
    let meta: Value = serde_json::from_slice(&std::fs::read(meta).expect("read meta.json"))
        .expect("meta.json is JSON");
    let payload: Value = meta["payload"]
        .as_str()
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null);
    payload["seq"].as_i64().unwrap_or(0)
}

/// Whether this machine lets a test mount a small file system of its own (a user and mount
/// namespace, `unshare -Urm`, as Linux allows unprivileged users by default).
fn small_disks_available(dir: &Path) -> bool {
    std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-c", ON_SMALL_DISK, "sh"])
        .arg(dir)
        .arg("true")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The text of a tool result that reports failure, whole or of some items.
fn failure_text(answer: &Value) -> Option<String> {
    let result = &answer["result"];
    if result["isError"] == true {
        return Some(result["content"][0]["text"].as_str()?.to_owned());
    }
    let results = result["structuredContent"]["results"].as_array()?;
    results
        .iter()
        .find_map(|r| r["error"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::print_stderr, reason = "where the test cannot run, it says so")]
async fn a_full_disk_is_reported_with_what_to_do() {
    let db = TestDb::new();
    let disk = db.path.parent().expect("folder").join("disk");
    std::fs::create_dir(&disk).expect("mount point");
    if !small_disks_available(&disk) {
        // Nothing to fill without a file system of the test's own; say so instead of failing.
        eprintln!(
            "a_full_disk_is_reported_with_what_to_do: not run, this machine does not allow `unshare -Urm` to mount a small file system"
        );
        return;
    }
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["-Urm", "sh", "-c", ON_SMALL_DISK, "sh"])
        .arg(&disk)
        .arg(BIN)
        .arg("serve")
        .arg("--db")
        .arg(disk.join("memory.db"));
    let mut raw = Raw::spawn_command(cmd);
    raw.start_session(Era::Initialize).await;
    let first = raw
        .call(
            "tools/call",
            json!({"name": "remember", "arguments": {"memories": [{"content": "the kestrel hovers over the verge"}]}}),
        )
        .await;
    assert_eq!(first["result"]["structuredContent"]["ok"], 1, "{first}");
    let kestrel = first["result"]["structuredContent"]["results"][0]["id"].clone();

    // About 200 KB a call: the 4 MiB disk is full within a few dozen calls.
    let mut said = None;
    for call in 0..200 {
        let memories: Vec<Value> = (0..4)
            .map(|i| json!({"content": format!("filler {call}-{i} {}", format!("word{call}x{i} ").repeat(5_000))}))
            .collect();
        let answer = raw
            .call(
                "tools/call",
                json!({"name": "remember", "arguments": {"memories": memories}}),
            )
            .await;
        assert!(
            answer.get("result").is_some(),
            "a full disk is a tool result the model can read, not a JSON-RPC error: {answer}\n{}",
            raw.log_tail()
        );
        if let Some(text) = failure_text(&answer) {
            said = Some(text);
            break;
        }
    }
    let text = said.unwrap_or_else(|| panic!("the disk never filled\n{}", raw.log_tail()));
    assert!(text.contains("disk") && text.contains("full"), "{text}");
    assert!(text.contains("free disk space"), "{text}");
    assert!(!text.contains("see the server log"), "{text}");

    // Reads go on: what was stored before is still there, and a search either finds it or says
    // what to do (the text index may have stopped on the full disk too).
    let got = raw
        .call(
            "tools/call",
            json!({"name": "get", "arguments": {"ids": [kestrel]}}),
        )
        .await;
    assert_eq!(
        got["result"]["structuredContent"]["memories"][0]["id"],
        kestrel,
        "{got}\n{}",
        raw.log_tail()
    );
    let found = raw
        .call(
            "tools/call",
            json!({"name": "recall", "arguments": {"query": "kestrel verge", "mode": "text"}}),
        )
        .await;
    match failure_text(&found) {
        None => assert!(
            found["result"]["structuredContent"]["hits"]
                .as_array()
                .is_some_and(|h| !h.is_empty()),
            "{found}"
        ),
        Some(text) => assert!(text.contains("disk"), "{text}\n{}", raw.log_tail()),
    }

    // Space comes back (the ballast goes, as an operator would delete files): writes succeed and
    // the text index commits again, without a restart.
    let seen = Path::new("/proc").join(raw.pid().to_string()).join("root");
    let disk_seen = seen.join(disk.strip_prefix("/").expect("an absolute path"));
    std::fs::remove_file(disk_seen.join("ballast")).expect("remove the ballast");
    let stuck_at = committed_text_seq(&disk_seen.join("memory.db"));
    let heron = raw
        .call(
            "tools/call",
            json!({"name": "remember", "arguments": {"memories": [{"content": "the heron waits in the reeds"}]}}),
        )
        .await;
    assert_eq!(
        heron["result"]["structuredContent"]["ok"],
        1,
        "{heron}\n{}",
        raw.log_tail()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while committed_text_seq(&disk_seen.join("memory.db")) <= stuck_at {
        assert!(
            std::time::Instant::now() < deadline,
            "the text index never committed again after space came back\n{}",
            raw.log_tail()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let found = raw
        .call(
            "tools/call",
            json!({"name": "recall", "arguments": {"query": "heron reeds", "mode": "text"}}),
        )
        .await;
    assert!(
        found["result"]["structuredContent"]["hits"]
            .as_array()
            .is_some_and(|h| !h.is_empty()),
        "{found}"
    );
    raw.close().await;
}
