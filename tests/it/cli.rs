//! The operator's commands on the real binary: `mnemograph import` leaves the indexes ready for
//! the next process, and names its paths explicitly.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::support::BIN;

/// Runs the binary: (success, stdout, stderr).
fn try_run(args: &[&str], db: &Path) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("MNEMOGRAPH_IMPORT_ROOTS")
        .output()
        .expect("run mnemograph");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(args: &[&str], db: &Path) -> String {
    let (ok, stdout, stderr) = try_run(args, db);
    assert!(ok, "{args:?} failed: {stdout}\n{stderr}");
    stdout
}

#[test]
fn a_cli_import_leaves_the_text_index_current() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let source = data.path().join("corpus.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&source).unwrap());
    for i in 0..3_000 {
        let line = json!({"type": "memory", "content": format!("cli memory {i} about lanterns")});
        writeln!(w, "{line}").unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let report = run(&["import", source.to_str().unwrap()], &db);
    assert!(report.contains("memories +3000"), "{report}");
    let stats = run(&["stats"], &db);
    assert!(stats.contains("memories        3000"), "{stats}");
    assert!(
        stats.lines().any(|l| l.trim() == "text index lag  0"),
        "{stats}"
    );
}

#[test]
fn the_cli_allows_exactly_the_paths_its_operator_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    std::fs::write(
        data.path().join("note.md"),
        "# Note\n\nNamed on the command line.\n",
    )
    .unwrap();
    let note = data.path().join("note.md");
    let report = run(&["import", note.to_str().unwrap()], &db);
    assert!(report.contains("memories +2"), "{report}");
    let out = data.path().join("out.jsonl");
    run(&["export", "--out", out.to_str().unwrap()], &db);
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .contains("Named on the command line")
    );
    let (ok, _, stderr) = try_run(&["export", "--out", out.to_str().unwrap()], &db);
    assert!(!ok && stderr.contains("exists"), "{stderr}");
    // A system file stays out of reach, even named by the operator.
    let (ok, _, stderr) = try_run(&["import", "/etc/hostname"], &db);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("system folder"), "{stderr}");
}
