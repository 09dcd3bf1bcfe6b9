//! Source tidiness the compiler does not check: each heavy dependency is named only inside the
//! module that wraps it (so replacing SQLite, tantivy, usearch, rmcp or the embedding back-ends
//! is a change to one module), SQL appears only in `store`, and every source file opens with a
//! `//!` line saying what it is for.

use std::path::{Path, PathBuf};

/// Crates and the source paths (prefixes under the package root) allowed to name them. `error.rs`
/// converts every component's errors into the crate's one error type, so it names the crates
/// whose errors it recognises.
const OWNERS: &[(&str, &[&str])] = &[
    ("rusqlite", &["src/store/", "src/error.rs"]),
    (
        "postgres",
        &[
            "src/store/",
            "src/error.rs",
            "tests/",
            "benches/",
            "examples/",
        ],
    ),
    ("tantivy", &["src/index/text", "src/error.rs"]),
    ("usearch", &["src/index/vector"]),
    ("rmcp", &["src/mcp/", "tests/", "benches/", "examples/"]),
    ("schemars", &["src/mcp/"]),
    ("candle_core", &["src/embed/"]),
    ("candle_nn", &["src/embed/"]),
    ("candle_transformers", &["src/embed/"]),
    ("ureq", &["src/embed/", "src/mcp/oauth.rs"]),
    ("jsonwebtoken", &["src/mcp/oauth.rs", "tests/", "examples/"]),
    ("tracing_subscriber", &["src/cli/", "examples/"]),
    ("clap", &["src/cli/"]),
    ("libc", &["src/priority.rs", "src/open_files.rs"]),
    ("axum", &["src/mcp/"]),
    ("hyper", &["src/mcp/"]),
    ("hyper_util", &["src/mcp/"]),
];

/// Words that start SQL statements: string literals holding them belong in `store`.
const SQL: &[&str] = &[
    "SELECT ",
    "INSERT INTO",
    "INSERT OR ",
    "UPDATE ",
    "DELETE FROM",
    "CREATE TABLE",
    "CREATE INDEX",
    "PRAGMA ",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under the package's source folders, as (path relative to the root, text).
fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending: Vec<PathBuf> = ["src", "tests", "benches", "examples"]
        .iter()
        .map(|d| root().join(d))
        .collect();
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("read a source folder").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.push((relative(&path), text));
            }
        }
    }
    out.sort();
    assert!(out.len() > 50, "found only {} source files", out.len());
    out
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .expect("under the package root")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The code of a line: nothing after `//` that starts a comment (outside a string literal, as
/// far as a line-by-line look can tell).
fn code(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") {
        return "";
    }
    match line.find(" // ") {
        Some(i) if line[..i].matches('"').count().is_multiple_of(2) => &line[..i],
        _ => line,
    }
}

/// True when `line` names crate `name` as a path (`name::…`, `use name`, `name!`).
fn names_crate(line: &str, name: &str) -> bool {
    let bytes = line.as_bytes();
    line.match_indices(name).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let starts_word = before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_'));
        let after = &line[i + name.len()..];
        let path_use = after.starts_with("::")
            || after.starts_with('!')
            || (after.starts_with(';') && line.trim_start().starts_with("use "));
        starts_word && path_use && before != Some(b':') && before != Some(b'"')
    })
}

#[test]
fn heavy_crates_are_named_only_inside_their_modules() {
    let mut wrong = Vec::new();
    for (path, text) in sources() {
        if path == "tests/it/tidy.rs" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let line = code(line);
            for (krate, owners) in OWNERS {
                if names_crate(line, krate) && !owners.iter().any(|o| path.starts_with(o)) {
                    wrong.push(format!("{path}:{}: `{krate}` outside {owners:?}", n + 1));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn sql_is_written_only_in_store() {
    let mut wrong = Vec::new();
    for (path, text) in sources() {
        if !path.starts_with("src/") || path.starts_with("src/store/") {
            continue;
        }
        // Unit tests may build broken databases on purpose.
        let code_part = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code_part.lines().enumerate() {
            let line = code(line);
            if let Some(word) = SQL.iter().find(|w| line.contains(&format!("\"{w}"))) {
                wrong.push(format!("{path}:{}: SQL `{}`", n + 1, word.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn every_source_file_says_what_it_is_for() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(path, _)| path)
        .collect();
    assert!(
        missing.is_empty(),
        "these files do not start with a `//!` line: {missing:?}"
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert!(names_crate("use rusqlite::Connection;", "rusqlite"));
    assert!(names_crate("fn f(c: &rusqlite::Connection) {}", "rusqlite"));
    assert!(names_crate("    tantivy::doc!(x)", "tantivy"));
    assert!(!names_crate("EnvFilter::new(\"hnsw_rs=warn\")", "hnsw_rs"));
    assert!(!names_crate("my_rusqlite::x", "rusqlite"));
    assert_eq!(code("    // uses rusqlite::Connection"), "");
    assert_eq!(code("let a = 1; // rusqlite::x"), "let a = 1;");
}
