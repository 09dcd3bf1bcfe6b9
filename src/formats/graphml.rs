//! GraphML writer (opens in Gephi, yEd, Cytoscape, networkx): memories as nodes with their
//! fields as data keys, relations as directed edges with kind and weight.

use std::io::Write;

use crate::model::{Memory, Relation, format_time};

/// XML-escapes text for element content and attribute values; drops characters XML 1.0 forbids.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

const NODE_KEYS: [(&str, &str); 8] = [
    ("namespace", "string"),
    ("kind", "string"),
    ("name", "string"),
    ("label", "string"),
    ("content", "string"),
    ("tags", "string"),
    ("importance", "double"),
    ("created_at", "string"),
];
const EDGE_KEYS: [(&str, &str); 3] = [
    ("kind", "string"),
    ("weight", "double"),
    ("created_at", "string"),
];

/// Writes the document's opening: declaration, keys, graph element.
pub fn begin(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        w,
        r#"<graphml xmlns="http://graphml.graphdrawing.org/xmlns" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">"#
    )?;
    for (name, ty) in NODE_KEYS {
        writeln!(
            w,
            r#"  <key id="n_{name}" for="node" attr.name="{name}" attr.type="{ty}"/>"#
        )?;
    }
    for (name, ty) in EDGE_KEYS {
        writeln!(
            w,
            r#"  <key id="e_{name}" for="edge" attr.name="{name}" attr.type="{ty}"/>"#
        )?;
    }
    writeln!(w, r#"  <graph id="mnemograph" edgedefault="directed">"#)
}

/// A short label for a node: its name, else the start of its content.
pub fn label(m: &Memory) -> String {
    match &m.name {
        Some(n) => n.clone(),
        None => {
            let mut s: String = m.content.chars().take(60).collect();
            if s.len() < m.content.len() {
                s.push('…');
            }
            s
        }
    }
}

/// Writes one node.
pub fn node(w: &mut dyn Write, m: &Memory) -> std::io::Result<()> {
    writeln!(w, r#"    <node id="{}">"#, escape(&m.id))?;
    let tags = m.tags.join(", ");
    let fields: [(&str, Option<String>); 8] = [
        ("namespace", Some(m.namespace.clone())),
        ("kind", Some(m.kind.clone())),
        ("name", m.name.clone()),
        ("label", Some(label(m))),
        ("content", Some(m.content.clone())),
        ("tags", (!tags.is_empty()).then_some(tags)),
        ("importance", Some(m.importance.to_string())),
        ("created_at", Some(format_time(m.created_at))),
    ];
    for (key, value) in fields {
        if let Some(v) = value {
            writeln!(w, r#"      <data key="n_{key}">{}</data>"#, escape(&v))?;
        }
    }
    writeln!(w, "    </node>")
}

/// Writes one edge (both ends must have been written as nodes).
pub fn edge(w: &mut dyn Write, r: &Relation) -> std::io::Result<()> {
    writeln!(
        w,
        r#"    <edge id="{}" source="{}" target="{}">"#,
        escape(&r.id),
        escape(&r.from),
        escape(&r.to)
    )?;
    writeln!(w, r#"      <data key="e_kind">{}</data>"#, escape(&r.kind))?;
    writeln!(w, r#"      <data key="e_weight">{}</data>"#, r.weight)?;
    writeln!(
        w,
        r#"      <data key="e_created_at">{}</data>"#,
        format_time(r.created_at)
    )?;
    writeln!(w, "    </edge>")
}

/// Closes the document.
pub fn end(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "  </graph>")?;
    writeln!(w, "</graphml>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_drops_control_characters() {
        assert_eq!(
            escape("a<b & \"c\"\u{1}'d'>"),
            "a&lt;b &amp; &quot;c&quot;&apos;d&apos;&gt;"
        );
        assert_eq!(escape("line\nnext"), "line\nnext");
    }
}
