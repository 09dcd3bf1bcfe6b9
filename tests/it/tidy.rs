//! Source tidiness the compiler does not check: each heavy dependency is named only inside the
//! module that wraps it (so replacing SQLite, tantivy, usearch, rmcp or the embedding back-ends
//! is a change to one module), SQL appears only in `store`, the MCP layer names a tool only in
//! its family, every source file opens with a `//!` line saying what it is for (and, over 1,000
//! lines, why it is that long), and ARCHITECTURE.md's codemap names every module and no module
//! that is gone.

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
    (
        "libc",
        &["src/priority.rs", "src/open_files.rs", "src/huge_pages.rs"],
    ),
    ("axum", &["src/mcp/"]),
    ("hyper", &["src/mcp/"]),
    ("hyper_util", &["src/mcp/"]),
    ("tower", &["src/mcp/"]),
    ("petgraph", &["src/graph/"]),
    // The engine and everything below it are synchronous; the runtime lives in the front ends
    // (and in the TLS stream the PostgreSQL driver is given).
    (
        "tokio",
        &[
            "src/mcp/",
            "src/tasks/",
            "src/cli/",
            "src/store/tls.rs",
            "tests/",
            "benches/",
            "examples/",
        ],
    ),
];

/// Source files over this many lines say at their top why they are that long (a `//! Size:`
/// line), or are split.
const LONG_FILE: usize = 1_000;

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

/// True when `line` names crate `name` as a path (`name::…`, `::name::…`, `use name`,
/// `use name as alias`, `name!`).
fn names_crate(line: &str, name: &str) -> bool {
    let bytes = line.as_bytes();
    let is_use = line.trim_start().starts_with("use ") || line.trim_start().starts_with("pub use ");
    line.match_indices(name).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let starts_word = before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_'));
        let after = &line[i + name.len()..];
        let path_use = after.starts_with("::")
            || after.starts_with('!')
            || (is_use && (after.starts_with(';') || after.starts_with(" as ")));
        // `::name::` at the start of a path is the crate; `other::name::` is a module of that
        // name inside something else.
        let absolute = line[..i].ends_with("::")
            && line[..i - 2]
                .bytes()
                .last()
                .is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'>'));
        starts_word && path_use && (before != Some(b':') || absolute) && before != Some(b'"')
    })
}

/// `text` without its `#[cfg(test)]` modules (the code that ships).
fn shipped(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let is_test_mod = line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod ") && next.contains('{'));
        if !is_test_mod {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        // Skip to the brace that closes the module.
        let mut depth = 0i64;
        for inner in lines.by_ref() {
            depth += inner.matches('{').count() as i64 - inner.matches('}').count() as i64;
            if depth <= 0 && inner.contains('}') {
                break;
            }
        }
    }
    out
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
        for (n, line) in shipped(&text).lines().enumerate() {
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
fn long_files_say_why() {
    let unexplained: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > LONG_FILE)
        .filter(|(_, text)| {
            !text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .any(|l| l.starts_with("//! Size:"))
        })
        .map(|(path, text)| format!("{path} ({} lines)", text.lines().count()))
        .collect();
    assert!(
        unexplained.is_empty(),
        "over {LONG_FILE} lines without a `//! Size:` line at the top saying why (or split them): {unexplained:?}"
    );
}

/// The tools' names, as `tools/list` gives them.
fn tool_names() -> Vec<String> {
    mnemograph::mcp::tools::all()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

#[test]
fn the_mcp_layer_names_a_tool_only_in_its_family() {
    // A metric family that happens to share a tool's name.
    let allowed = [("src/mcp/metrics.rs", "\"tasks\"")];
    let names = tool_names();
    let mut wrong = Vec::new();
    for (path, text) in sources() {
        if !path.starts_with("src/mcp/")
            || path.starts_with("src/mcp/tools/")
            || path == "src/mcp/fixtures.rs"
        {
            continue;
        }
        for (n, line) in shipped(&text).lines().enumerate() {
            let line = code(line);
            for name in &names {
                let quoted = format!("\"{name}\"");
                if line.contains(&quoted) && !allowed.contains(&(path.as_str(), quoted.as_str())) {
                    wrong.push(format!("{path}:{}: {quoted}", n + 1));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "tool names outside their family:\n{}",
        wrong.join("\n")
    );
}

/// The codemap section of ARCHITECTURE.md.
fn codemap() -> String {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = text.find("## Codemap").expect("a Codemap section");
    let rest = &text[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |e| e);
    rest[..end].to_owned()
}

/// The backticked words of `text`.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_codemap_names_every_module_and_no_module_that_is_gone() {
    let map = codemap();
    let words = ticked(&map);
    let has = |w: &str| words.iter().any(|t| t == w);
    let files: Vec<String> = sources()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with("src/"))
        .collect();
    let mut missing = Vec::new();
    for path in &files {
        let (folder, file) = path.rsplit_once('/').expect("under src/");
        let folder_named = has(&format!("{folder}/"))
            || folder
                .rsplit_once('/')
                .is_some_and(|(_, last)| has(&format!("{last}/")));
        let named = has(path)
            || (file == "mod.rs" && folder_named)
            || (has(file) && folder_named)
            || (folder == "src" && has(file));
        if !named {
            missing.push(path.clone());
        }
    }
    let mut gone = Vec::new();
    for w in &words {
        let exists = if w.starts_with("src/") {
            root().join(w.trim_end_matches('/')).exists()
        } else if w.ends_with(".rs") && !w.contains(' ') && !w.contains('/') {
            files.iter().any(|f| f.ends_with(&format!("/{w}")))
        } else if w.ends_with('/') && !w.contains(' ') && !w.starts_with('/') && w.len() > 1 {
            files.iter().any(|f| f.contains(&format!("/{w}")))
        } else {
            true
        };
        if !exists {
            gone.push(w.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "modules the codemap does not name: {missing:?}"
    );
    assert!(gone.is_empty(), "the codemap names what is gone: {gone:?}");
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert!(names_crate("use rusqlite as db;", "rusqlite"));
    assert!(names_crate("let c: ::rusqlite::Connection;", "rusqlite"));
    assert!(!names_crate("let c: my::rusqlite::Connection;", "rusqlite"));
    let shipped_part =
        shipped("fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\nfn c() {}\n");
    assert_eq!(shipped_part, "fn a() {}\nfn c() {}\n");
    assert!(names_crate("use rusqlite::Connection;", "rusqlite"));
    assert!(names_crate("fn f(c: &rusqlite::Connection) {}", "rusqlite"));
    assert!(names_crate("    tantivy::doc!(x)", "tantivy"));
    assert!(!names_crate("EnvFilter::new(\"hnsw_rs=warn\")", "hnsw_rs"));
    assert!(!names_crate("my_rusqlite::x", "rusqlite"));
    assert_eq!(code("    // uses rusqlite::Connection"), "");
    assert_eq!(code("let a = 1; // rusqlite::x"), "let a = 1;");
}
