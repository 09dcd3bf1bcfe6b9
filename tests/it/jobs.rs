//! A job's memory over MCP, on two servers sharing one database: a job resumed on another
//! server reads every checkpoint and what was learned since the latest; a write from a stale
//! version is a conflict that names the newer one; history, diff, revert and close; bad
//! arguments named.

use serde_json::{Value, json};

use crate::support::{Era, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumes_on_another_server_and_a_stale_checkpoint_is_refused() {
    let db = TestDb::new();
    let a = db.serve(Era::Initialize).await;
    let b = db.serve(Era::Discover).await;
    let job = |extra: Value| {
        let mut args = json!({"name": "migrate-billing", "namespace": "work"});
        if let (Value::Object(o), Value::Object(x)) = (&mut args, extra) {
            o.extend(x);
        }
        args
    };

    let fresh = a.ok("job", job(json!({}))).await;
    assert_eq!(fresh["state"], "new", "{fresh}");
    let v1 = a
        .ok(
            "job",
            job(json!({"action": "checkpoint", "base": 0, "note": "mapped the tables",
                "learned": ["invoices live in billing.inv"], "open_questions": ["who owns refunds?"]})),
        )
        .await;
    assert_eq!(
        (v1["version"].clone(), v1["parent"].clone()),
        (json!(1), Value::Null),
        "{v1}"
    );
    let out = a
        .ok(
            "remember",
            json!({"job": "migrate-billing", "memories": [
                {"content": "Refunds are owned by the payments team", "namespace": "work"},
                {"content": "The invoice table has 4.2 million rows", "namespace": "work"},
            ]}),
        )
        .await;
    assert_eq!(out["ok"], 2, "{out}");

    // Server B resumes it: the checkpoint, and what was learned since.
    let resumed = b.ok("job", job(json!({}))).await;
    assert_eq!(resumed["state"], "open", "{resumed}");
    assert_eq!(resumed["head"]["version"], 1, "{resumed}");
    assert_eq!(resumed["head"]["note"], "mapped the tables");
    assert_eq!(
        resumed["head"]["open_questions"],
        json!(["who owns refunds?"])
    );
    assert_eq!(resumed["learned_since"]["total"], 2, "{resumed}");
    let learned = resumed["learned_since"]["memories"].to_string();
    assert!(
        learned.contains("payments team") && learned.contains("4.2 million"),
        "{learned}"
    );

    let v2 = b
        .ok(
            "job",
            job(json!({"action": "checkpoint", "base": 1, "note": "refunds answered",
                "learned": ["invoices live in billing.inv", "refunds: payments team"], "open_questions": []})),
        )
        .await;
    assert_eq!(
        (v2["version"].clone(), v2["parent"].clone()),
        (json!(2), json!(1)),
        "{v2}"
    );

    // A writes from the version it read: refused, naming the newer one; nothing overwritten.
    let stale = a
        .call(
            "job",
            job(json!({"action": "checkpoint", "base": 1, "note": "my view"})),
        )
        .await
        .expect_err("a stale checkpoint");
    let said = stale.message();
    assert!(
        said.contains("at version 2") && said.contains("base 2"),
        "{said}"
    );
    let head = a.ok("job", job(json!({}))).await;
    assert_eq!(head["head"]["note"], "refunds answered", "{head}");
    assert_eq!(head["learned_since"]["total"], 0, "{head}");

    let history = a.ok("job", job(json!({"action": "history"}))).await;
    let versions: Vec<(Value, Value)> = history["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["version"].clone(), v["note"].clone()))
        .collect();
    assert_eq!(
        versions,
        [
            (json!(2), json!("refunds answered")),
            (json!(1), json!("mapped the tables"))
        ]
    );
    let diff = a.ok("job", job(json!({"action": "diff"}))).await;
    assert_eq!(
        diff["changes"]["learned"]["added"],
        json!(["refunds: payments team"]),
        "{diff}"
    );
    assert_eq!(
        diff["changes"]["open_questions"]["removed"],
        json!(["who owns refunds?"])
    );

    let back = a
        .ok(
            "job",
            job(json!({"action": "revert", "base": 2, "version": 1})),
        )
        .await;
    assert_eq!(
        (back["version"].clone(), back["reverts_to"].clone()),
        (json!(3), json!(1)),
        "{back}"
    );
    let head = b.ok("job", job(json!({}))).await;
    assert_eq!(head["head"]["note"], "mapped the tables", "{head}");

    let closed = b.ok("job", job(json!({"action": "close"}))).await;
    assert_eq!(closed["state"], "closed", "{closed}");
    let late = a
        .call(
            "job",
            job(json!({"action": "checkpoint", "base": 3, "note": "late"})),
        )
        .await
        .expect_err("a closed job");
    assert!(late.message().contains("closed"), "{}", late.message());

    for (args, said) in [
        (json!({"name": "x", "action": "rewind"}), "rewind"),
        (
            json!({"name": "x", "action": "checkpoint", "note": "n"}),
            "`base`",
        ),
        (
            json!({"name": "x", "action": "checkpoint", "base": 0}),
            "says nothing",
        ),
        (json!({"name": "", "action": "history"}), "`name`"),
        (
            json!({"name": "nobody", "action": "history"}),
            "job not found",
        ),
        (
            json!({"name": "x", "action": "diff", "base": 1, "version": 9}),
            "not found",
        ),
    ] {
        let err = a.call("job", args.clone()).await.expect_err("bad job call");
        assert!(err.message().contains(said), "{args}: {}", err.message());
    }
    a.stop().await;
    b.stop().await;
}
