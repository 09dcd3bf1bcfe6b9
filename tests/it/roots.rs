//! Where a server may read imports and write exports: only its database's folder and the
//! folders its operator names, never the filesystem root, the home folder itself, a system
//! folder or a pseudo-filesystem, whatever folder it was started from.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::BIN;

/// A server started in `cwd` with extra environment and arguments, its stderr in `log`.
struct Host {
    client: RunningService<RoleClient, ()>,
    log: PathBuf,
}

impl Host {
    async fn start(db: &Path, cwd: &Path, env: &[(&str, &str)], args: &[&str], log: &str) -> Host {
        let log = db.with_file_name(log);
        let stderr = std::fs::File::create(&log).expect("create the log");
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("serve")
            .arg("--db")
            .arg(db)
            .args(args)
            .current_dir(cwd)
            .env_remove("MNEMOGRAPH_IMPORT_ROOTS")
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn mnemograph serve");
        let client = ().serve(transport).await.expect("session");
        Host { client, log }
    }

    async fn call(&self, tool: &str, args: Value) -> Result<Value, String> {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        let res = tokio::time::timeout(Duration::from_secs(60), self.client.call_tool(params))
            .await
            .expect("an answer within 60 s");
        match res {
            Ok(r) if r.is_error == Some(true) => Err(r
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join("\n")),
            Ok(r) => Ok(r.structured_content.unwrap_or(Value::Null)),
            Err(ServiceError::McpError(e)) => Err(e.message.into_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn refused(&self, tool: &str, args: Value) -> String {
        match self.call(tool, args.clone()).await {
            Ok(v) => panic!("{tool} {args} must be refused, got {v}"),
            Err(m) => m,
        }
    }

    async fn stop(self) -> String {
        let _ = tokio::time::timeout(Duration::from_secs(20), self.client.cancel()).await;
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_from_the_filesystem_root_reaches_only_its_database_folder() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let elsewhere = tempfile::tempdir().unwrap();
    let secret = "sk-mnemograph-test-7f3a9c";
    let h = Host::start(
        &db,
        Path::new("/"),
        &[("MNEMOGRAPH_EMBED_KEY", secret)],
        &[],
        "root.log",
    )
    .await;
    for path in ["/proc/self/environ", "/proc/self/cmdline", "/etc/passwd"] {
        for format in [json!(null), json!("markdown")] {
            let msg = h
                .refused(
                    "import",
                    json!({"source": {"path": path}, "format": format}),
                )
                .await;
            assert!(
                msg.contains("outside the allowed folders") || msg.contains("pseudo-filesystem"),
                "{path}: {msg}"
            );
            assert!(msg.contains("--import-root"), "{path}: {msg}");
        }
    }
    // A relative path is taken from the database's folder, not the process's.
    h.refused("import", json!({"source": {"path": "etc/passwd"}}))
        .await;
    let hits = h.call("recall", json!({"query": secret})).await.unwrap();
    assert_eq!(hits["hits"], json!([]), "{hits}");
    let stats = h.call("stats", json!({})).await.unwrap();
    assert_eq!(stats["memories"], 0, "{stats}");

    let outside = elsewhere.path().join("out.jsonl");
    let msg = h
        .refused("export", json!({"path": outside.display().to_string()}))
        .await;
    assert!(msg.contains("--import-root"), "{msg}");
    assert!(!outside.exists());

    // The database's folder is open both ways.
    std::fs::write(dir.path().join("notes.md"), "# Notes\n\nKept here.\n").unwrap();
    let out = h
        .call("import", json!({"source": {"path": "notes.md"}}))
        .await
        .unwrap();
    assert_eq!(out["memories_added"], 2, "{out}");
    let out = h
        .call(
            "export",
            json!({"path": dir.path().join("all.jsonl").display().to_string()}),
        )
        .await
        .unwrap();
    assert_eq!(out["memories"], 2, "{out}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_in_the_home_folder_needs_an_explicit_root() {
    let home = tempfile::tempdir().unwrap();
    let db = home.path().join("memory.db");
    std::fs::create_dir_all(home.path().join("notes")).unwrap();
    std::fs::write(home.path().join("notes/a.md"), "# A\n\nFrom my notes.\n").unwrap();
    std::fs::write(home.path().join("secret.txt"), "hunter2\n").unwrap();
    let home_s = home.path().to_str().unwrap();
    let h = Host::start(&db, home.path(), &[("HOME", home_s)], &[], "home.log").await;
    let msg = h
        .refused(
            "import",
            json!({"source": {"path": home.path().join("secret.txt").display().to_string()}}),
        )
        .await;
    assert!(msg.contains("home folder"), "{msg}");
    assert!(msg.contains("--import-root"), "{msg}");
    let log = h.stop().await;
    assert_eq!(
        log.matches("refused as an import root").count(),
        1,
        "logged once at start:\n{log}"
    );
    assert!(log.contains("home folder"), "{log}");

    // A folder the operator names is open; the filesystem root never is.
    let notes = home.path().join("notes");
    let h = Host::start(
        &db,
        home.path(),
        &[
            ("HOME", home_s),
            ("MNEMOGRAPH_IMPORT_ROOTS", &format!("{},/", notes.display())),
        ],
        &[],
        "named.log",
    )
    .await;
    let out = h
        .call(
            "import",
            json!({"source": {"path": notes.join("a.md").display().to_string()}}),
        )
        .await
        .unwrap();
    assert_eq!(out["memories_added"], 2, "{out}");
    h.refused("import", json!({"source": {"path": "/etc/passwd"}}))
        .await;
    h.refused(
        "import",
        json!({"source": {"path": home.path().join("secret.txt").display().to_string()}}),
    )
    .await;
    let log = h.stop().await;
    assert!(log.contains("refused as an import root"), "{log}");
}
