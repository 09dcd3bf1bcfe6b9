//! Import and export formats: readers that turn a byte stream into [`Record`]s one at a time,
//! and writers that turn memories and relations into bytes. Pure: no database, no files opened
//! here (callers hand in readers and writers), no knowledge of MCP.

pub mod detect;
pub mod dot;
pub mod graphml;
pub mod jsonl;
pub mod locomo;
pub mod markdown;
pub mod mcp_memory;
pub mod memorygraph;

use std::io::BufRead;

use crate::model::Millis;

/// Formats an import can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum InFormat {
    /// mnemograph's own JSONL (what `export` writes): lossless.
    Mnemograph,
    /// The official MCP memory server's JSONL (`type: entity | relation` lines).
    McpMemory,
    /// MemoryGraph's JSON export, `format_version` 2.0.
    MemoryGraph,
    /// Chat transcripts in LoCoMo's form (`conversation` → `session_N` turns).
    Locomo,
    /// Markdown or plain text, chunked by heading and paragraph.
    Markdown,
}

impl InFormat {
    pub const ALL: [InFormat; 5] = [
        InFormat::Mnemograph,
        InFormat::McpMemory,
        InFormat::MemoryGraph,
        InFormat::Locomo,
        InFormat::Markdown,
    ];

    /// The name callers use in `format`.
    pub fn name(self) -> &'static str {
        match self {
            InFormat::Mnemograph => "mnemograph",
            InFormat::McpMemory => "mcp-memory",
            InFormat::MemoryGraph => "memorygraph",
            InFormat::Locomo => "locomo",
            InFormat::Markdown => "markdown",
        }
    }

    pub fn parse(s: &str) -> Option<InFormat> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "text" | "txt" | "md" => Some(InFormat::Markdown),
            "jsonl" => Some(InFormat::Mnemograph),
            "mcp" | "mcp_memory" => Some(InFormat::McpMemory),
            _ => InFormat::ALL.into_iter().find(|f| f.name() == s),
        }
    }
}

/// How a record names another memory: by its key within imports (`ext`), by its stored id, or
/// by its name in the import's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ref {
    Ext(String),
    Id(String),
    Name(String),
}

/// A relation created together with a memory, from that memory to `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRecord {
    pub to: Ref,
    pub kind: String,
    pub weight: Option<f64>,
}

/// A vector stored with a memory, and the model that made it.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorRecord {
    pub model: String,
    pub vec: Vec<f32>,
}

/// One memory read from a source. Fields a format does not have stay empty/`None`; the importer
/// fills in defaults (namespace of the call, kind `note`, importance 0.5, now).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemoryRecord {
    /// Identity across imports (`memorygraph:<uuid>`, `locomo:<sample>:<dia_id>`, …). A record
    /// whose `ext` was imported before is not imported again. `None`: identity by content hash.
    pub ext: Option<String>,
    /// A mnemograph id to keep (own format only), when no other memory has it.
    pub id: Option<String>,
    /// The record's own namespace (own format only); otherwise the call's.
    pub namespace: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: Option<f64>,
    pub metadata: Option<serde_json::Value>,
    pub created_at: Option<Millis>,
    pub updated_at: Option<Millis>,
    pub accessed_at: Option<Millis>,
    pub access_count: Option<i64>,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
    /// When consolidation archived it (own format only).
    pub archived_at: Option<Millis>,
    pub vector: Option<VectorRecord>,
    /// Previous versions, oldest first (own format, when exported with history).
    pub history: Vec<HistoryRecord>,
    /// When a live memory with the same `name` exists: add this content's lines that it lacks
    /// (MCP memory entities gain observations) instead of reporting a name conflict.
    pub merge_by_name: bool,
    pub links: Vec<LinkRecord>,
}

/// One previous version of a memory: what changed it, who, when, and the version before.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRecord {
    pub op: String,
    pub actor: String,
    pub at: Millis,
    pub previous: serde_json::Value,
}

/// One relation read from a source.
#[derive(Debug, Clone, PartialEq)]
pub struct RelationRecord {
    /// A mnemograph relation id to keep (own format only).
    pub id: Option<String>,
    pub from: Ref,
    pub to: Ref,
    pub kind: String,
    pub weight: Option<f64>,
    pub metadata: Option<serde_json::Value>,
    pub created_at: Option<Millis>,
    pub reinforced_at: Option<Millis>,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
}

/// What a reader yields (each record is moved once, into a batch: sizes do not matter).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Record {
    Memory(Box<MemoryRecord>),
    Relation(RelationRecord),
}

/// A record that could not be read; the import reports it and goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// 1-based line of the source where the record is (or starts).
    pub line: u64,
    pub reason: String,
}

/// One item of a reader's output: a record (with its line) or a bad one.
pub type Item = Result<(u64, Record), BadRecord>;

/// Whether a reader should go on after an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Where a reader pushes its items. Returning `Err` stops the reader with that error.
pub type Sink<'a> = dyn FnMut(Item) -> crate::Result<Flow> + 'a;

/// Reads `input` in `format` and pushes every item to `sink`, in source order, holding at most
/// one record (one JSONL line, one conversation, one document section) in memory. `doc` names
/// the document (a file's path relative to its root) for formats that link chunks to it.
/// An `Err` is a fault of the whole source (unreadable, not this format at all, broken JSON
/// document); items the sink saw before stay valid. A UTF-8 byte-order mark at the start is
/// skipped; CRLF line ends read like LF.
pub fn read(
    format: InFormat,
    input: &mut dyn BufRead,
    doc: &str,
    sink: &mut Sink<'_>,
) -> crate::Result<()> {
    let mut unmarked = without_bom(input)?;
    let input: &mut dyn BufRead = &mut unmarked;
    match format {
        InFormat::Mnemograph => jsonl::read(input, sink),
        InFormat::McpMemory => mcp_memory::read(input, sink),
        InFormat::MemoryGraph => memorygraph::read(input, sink),
        InFormat::Locomo => locomo::read(input, sink),
        InFormat::Markdown => markdown::read(input, doc, sink),
    }
}

/// The UTF-8 byte-order mark some editors put at the start of a text file.
pub const BOM: &[u8] = b"\xef\xbb\xbf";

/// `input` without a leading byte-order mark. Reads the first bytes one buffer at a time (a
/// mark may arrive split); bytes that only began like a mark are given back in front.
pub fn without_bom(input: &mut dyn BufRead) -> std::io::Result<impl BufRead + '_> {
    let mut head = Vec::with_capacity(BOM.len());
    while head.len() < BOM.len() {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let expected = &BOM[head.len()..];
        let n = buf.len().min(expected.len());
        if buf[..n] != expected[..n] {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        input.consume(n);
    }
    if head == BOM {
        head.clear();
    }
    Ok(std::io::Read::chain(std::io::Cursor::new(head), input))
}

/// Parses a timestamp a source may carry: RFC 3339 (`2024-05-01T10:00:00Z`, offsets, fractions),
/// a plain date, or epoch milliseconds/seconds as a number.
pub fn parse_timestamp(v: &serde_json::Value) -> Option<Millis> {
    match v {
        serde_json::Value::Number(n) => {
            let x = n.as_f64()?;
            // Seconds before ~2286 are below 1e10; milliseconds after 1970-04 are above.
            Some(if x.abs() < 1e10 {
                (x * 1e3) as i64
            } else {
                x as i64
            })
        }
        serde_json::Value::String(s) => crate::model::parse_time(s),
        _ => None,
    }
}

/// Counts newlines that pass through a reader, so a streaming JSON parser (which reads its input
/// byte by byte) can say on which line a record is; `lines()` is a handle that stays readable
/// while the parser owns the reader.
pub struct LineCounter<R> {
    inner: R,
    newlines: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R> LineCounter<R> {
    pub fn new(inner: R) -> Self {
        LineCounter {
            inner,
            newlines: Default::default(),
        }
    }

    /// Newlines read so far (the 1-based current line is this plus one).
    pub fn lines(&self) -> std::rc::Rc<std::cell::Cell<u64>> {
        std::rc::Rc::clone(&self.newlines)
    }
}

impl<R: std::io::Read> std::io::Read for LineCounter<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let seen = buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        self.newlines.set(self.newlines.get() + seen);
        Ok(n)
    }
}

/// One element of a streamed JSON document as a [`serde_json::Value`], with the line where it
/// starts (from a [`LineCounter`]'s handle).
pub(crate) struct LineValue<'l>(pub(crate) &'l std::rc::Rc<std::cell::Cell<u64>>);

impl<'de> serde::de::DeserializeSeed<'de> for LineValue<'_> {
    type Value = (u64, serde_json::Value);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        // The parser has read up to the element's first byte, so the count is its line's.
        let line = self.0.get() + 1;
        Ok((line, serde::Deserialize::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One small, valid source of each format, with `\n` line ends.
    const SAMPLES: [(InFormat, &str); 5] = [
        (
            InFormat::Mnemograph,
            "{\"type\":\"header\",\"format\":\"mnemograph\",\"version\":1,\"exported_at\":\"2024-01-01T00:00:00Z\"}\n\
             {\"type\":\"memory\",\"id\":\"m_a\",\"content\":\"first\"}\n\
             {\"type\":\"memory\",\"id\":\"m_b\",\"content\":\"second\"}\n\
             {\"type\":\"relation\",\"from\":\"m_b\",\"to\":\"m_a\",\"kind\":\"follows\"}\n",
        ),
        (
            InFormat::McpMemory,
            "{\"type\":\"entity\",\"name\":\"Ada\",\"entityType\":\"person\",\"observations\":[\"wrote\",\"counted\"]}\n\
             {\"type\":\"entity\",\"name\":\"Engine\",\"entityType\":\"machine\",\"observations\":[]}\n\
             {\"type\":\"relation\",\"from\":\"Ada\",\"to\":\"Engine\",\"relationType\":\"programmed\"}\n",
        ),
        (
            InFormat::MemoryGraph,
            "{\n  \"format_version\": \"2.0\",\n  \"memories\": [\n    {\"id\": \"a\", \"type\": \"fact\", \"title\": \"T\", \"content\": \"one\"},\n    {\"id\": \"b\", \"content\": \"two\"}\n  ],\n  \"relationships\": [\n    {\"from_memory_id\": \"a\", \"to_memory_id\": \"b\", \"type\": \"RELATES_TO\"}\n  ]\n}\n",
        ),
        (
            InFormat::Locomo,
            "[\n  {\n    \"sample_id\": \"c1\",\n    \"conversation\": {\n      \"speaker_a\": \"A\",\n      \"speaker_b\": \"B\",\n      \"session_1_date_time\": \"1:56 pm on 8 May, 2023\",\n      \"session_1\": [\n        {\"speaker\": \"A\", \"dia_id\": \"D1:1\", \"text\": \"Haha\"},\n        {\"speaker\": \"B\", \"dia_id\": \"D1:2\", \"text\": \"lol\"}\n      ]\n    }\n  }\n]\n",
        ),
        (
            InFormat::Markdown,
            "# Deploys\n\nWe deploy on Tuesdays.\nNever on Fridays.\n\n## Rollback\n\n```sh\nrollback --to previous\n```\n\nUse the previous tag.\n",
        ),
    ];

    fn read_all(format: InFormat, input: &mut dyn BufRead) -> Vec<Item> {
        let mut items = Vec::new();
        read(format, input, "notes/a.md", &mut |i| {
            items.push(i);
            Ok(Flow::Continue)
        })
        .unwrap_or_else(|e| panic!("{format:?}: {e}"));
        items
    }

    /// Reads through a one-byte buffer, so a mark at the start arrives split over reads.
    fn read_slowly(format: InFormat, bytes: &[u8]) -> Vec<Item> {
        read_all(format, &mut std::io::BufReader::with_capacity(1, bytes))
    }

    #[test]
    fn a_byte_order_mark_is_skipped_by_every_reader_and_by_detection() {
        for (format, text) in SAMPLES {
            let plain = read_all(format, &mut text.as_bytes());
            assert!(plain.len() >= 2, "{format:?}: {plain:?}");
            assert!(plain.iter().all(Result::is_ok), "{format:?}: {plain:?}");
            let marked = format!("\u{feff}{text}");
            assert_eq!(
                read_all(format, &mut marked.as_bytes()),
                plain,
                "{format:?}"
            );
            assert_eq!(read_slowly(format, marked.as_bytes()), plain, "{format:?}");
            assert_eq!(detect::detect(marked.as_bytes(), None), Some(format));
        }
        // A file that only starts like a mark keeps its bytes.
        let start = b"\xef\xbbx y";
        let items = read_slowly(InFormat::Markdown, start);
        let kept = String::from_utf8_lossy(start);
        assert!(
            items
                .iter()
                .any(|i| matches!(i, Ok((_, Record::Memory(m))) if m.content.contains(&*kept))),
            "{items:?}"
        );
    }

    #[test]
    fn crlf_line_ends_read_like_lf() {
        for (format, text) in SAMPLES {
            let plain = read_all(format, &mut text.as_bytes());
            let crlf = text.replace('\n', "\r\n");
            assert_eq!(read_all(format, &mut crlf.as_bytes()), plain, "{format:?}");
            assert_eq!(detect::detect(crlf.as_bytes(), None), Some(format));
            let both = format!("\u{feff}{crlf}");
            assert_eq!(read_all(format, &mut both.as_bytes()), plain, "{format:?}");
        }
    }
}
