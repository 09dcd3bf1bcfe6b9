//! Graphviz DOT writer: memories as boxes labelled by name or content, relations as labelled
//! directed edges whose pen width follows their weight.

use std::io::Write;

use crate::formats::graphml::label;
use crate::model::{Memory, Relation};

/// Quotes a string as a DOT identifier: backslashes, quotes and line breaks escaped.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn begin(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "digraph mnemograph {{")?;
    writeln!(w, "  graph [rankdir=LR, overlap=false];")?;
    writeln!(w, "  node [shape=box, style=rounded, fontsize=10];")?;
    writeln!(w, "  edge [fontsize=8];")
}

pub fn node(w: &mut dyn Write, m: &Memory) -> std::io::Result<()> {
    writeln!(
        w,
        "  {} [label={}, tooltip={}];",
        quote(&m.id),
        quote(&label(m)),
        quote(&m.kind)
    )
}

pub fn edge(w: &mut dyn Write, r: &Relation) -> std::io::Result<()> {
    writeln!(
        w,
        "  {} -> {} [label={}, penwidth={:.2}];",
        quote(&r.from),
        quote(&r.to),
        quote(&r.kind),
        0.5 + 2.5 * r.weight.clamp(0.0, 1.0)
    )
}

pub fn end(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_what_dot_would_misread() {
        assert_eq!(quote("say \"hi\"\\\nnow"), "\"say \\\"hi\\\"\\\\\\nnow\"");
    }
}
