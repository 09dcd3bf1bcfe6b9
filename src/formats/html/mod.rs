//! Self-contained HTML writer: one file that shows the exported memories as a searchable list
//! and a force-laid graph, with no server and no network — for a report or an issue. The graph
//! library (`vendor/force-graph.min.js`, provenance in `vendor/README.md`, also what the memory
//! browser serves) and a small viewer (`viewer.js`, `viewer.css`) are inlined; the records are
//! one JSON object per line in a `<script type="application/json">` block, every `<` written
//! as `\u003c` so no content can close it. The viewer shows content as text only, and the
//! file's Content-Security-Policy forbids every request.

use std::io::Write;

use serde_json::json;

use crate::model::{Memory, Relation, format_time};

/// The graph library, as published (see `vendor/README.md`).
pub const GRAPH_LIBRARY: &[u8] = include_bytes!("vendor/force-graph.min.js");

const VIEWER_JS: &str = include_str!("viewer.js");
const VIEWER_CSS: &str = include_str!("viewer.css");

/// No request of any kind; the inline scripts and styles of the file itself only.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
    style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

/// Writes the document up to the records.
pub fn begin(w: &mut dyn Write) -> std::io::Result<()> {
    write!(
        w,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>mnemograph export</title>\n<style>\n{VIEWER_CSS}</style>\n</head>\n<body>\n\
         <header><h1>mnemograph export</h1><input id=\"filter\" type=\"search\" \
         placeholder=\"Filter memories\" aria-label=\"Filter\"><span id=\"counts\"></span></header>\n\
         <div id=\"layout\"><ol id=\"list\"></ol><div id=\"graph\" data-nodes=\"0\"></div>\
         <aside id=\"detail\" hidden></aside></div>\n\
         <script id=\"records\" type=\"application/json\">\n"
    )
}

/// One JSON line, with `<` escaped so that the block cannot be closed by content.
fn line(w: &mut dyn Write, v: &serde_json::Value) -> std::io::Result<()> {
    let text = v.to_string().replace('<', "\\u003c");
    writeln!(w, "{text}")
}

pub fn node(w: &mut dyn Write, m: &Memory) -> std::io::Result<()> {
    line(
        w,
        &json!({
            "t": "m",
            "id": m.id,
            "namespace": m.namespace,
            "kind": m.kind,
            "name": m.name,
            "content": m.content,
            "tags": m.tags,
            "importance": m.importance,
            "created_at": format_time(m.created_at),
        }),
    )
}

pub fn edge(w: &mut dyn Write, r: &Relation) -> std::io::Result<()> {
    line(
        w,
        &json!({"t": "r", "from": r.from, "to": r.to, "kind": r.kind, "weight": r.weight}),
    )
}

/// Closes the records and inlines the graph library and the viewer.
pub fn end(w: &mut dyn Write) -> std::io::Result<()> {
    w.write_all(b"</script>\n<script>\n")?;
    w.write_all(GRAPH_LIBRARY)?;
    write!(
        w,
        "\n</script>\n<script>\n{VIEWER_JS}</script>\n</body>\n</html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_cannot_close_the_records_block() {
        let mut out = Vec::new();
        let v = json!({"content": "</script><script>alert(1)</script><!--"});
        line(&mut out, &v).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains('<'), "{text}");
        let back: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn the_library_is_the_published_file() {
        assert!(GRAPH_LIBRARY.starts_with(b"// Version 1.52.0 force-graph"));
        assert!(!String::from_utf8_lossy(GRAPH_LIBRARY).contains("</script"));
    }
}
