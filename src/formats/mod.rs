//! Import and export formats: readers that turn a byte stream into [`Record`]s one at a time,
//! and writers that turn memories and relations into bytes. Pure: no database, no files opened
//! here (callers hand in readers and writers), no knowledge of MCP.

pub mod detect;
pub mod dot;
pub mod graphml;
pub mod html;
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

/// What every streaming JSON reader (LoCoMo, MemoryGraph) keeps while serde drives it: where
/// records go, the line counter, and why reading stopped early.
pub(crate) struct JsonCtx<'s, 'a> {
    sink: &'s mut Sink<'a>,
    pub(crate) lines: std::rc::Rc<std::cell::Cell<u64>>,
    /// Set when reading must end: `Ok` when the sink said stop, `Err` for the error to return.
    halt: Option<crate::Result<()>>,
}

/// A serde error that only says the reader stopped early; the reason is in the context's halt.
const HALT: &str = "reader halted";

impl JsonCtx<'_, '_> {
    /// Hands `item` to the sink; stops serde when the sink says stop or fails.
    pub(crate) fn push<E: serde::de::Error>(&mut self, item: Item) -> Result<(), E> {
        match (self.sink)(item) {
            Ok(Flow::Continue) => Ok(()),
            Ok(Flow::Stop) => {
                self.halt = Some(Ok(()));
                Err(E::custom(HALT))
            }
            Err(e) => self.fail(e),
        }
    }

    /// Stops serde; the read returns `e`.
    pub(crate) fn fail<E: serde::de::Error>(&mut self, e: crate::Error) -> Result<(), E> {
        self.halt = Some(Err(e));
        Err(E::custom(HALT))
    }

    /// The 1-based line the parser is on (where the next value starts).
    pub(crate) fn line(&self) -> u64 {
        self.lines.get() + 1
    }
}

/// How a streaming JSON reader names its source in a whole-source error, and what it tells the
/// user to do when the JSON is readable but not of the format, or not readable at all.
pub(crate) struct JsonSource {
    /// "LoCoMo file", "MemoryGraph export".
    pub(crate) what: &'static str,
    pub(crate) data_hint: &'static str,
    pub(crate) syntax_hint: &'static str,
}

/// The JSON parser a streaming reader's top-level seed is run on.
pub(crate) type JsonParser<'r> =
    serde_json::Deserializer<serde_json::de::IoRead<LineCounter<&'r mut dyn BufRead>>>;

/// Streams one JSON document from `input` through `top` (which deserializes the top-level seed
/// on the parser it is given, pushing records through the context): a stop or error of the sink
/// ends the read with it, and JSON that is broken or not of the format is one whole-source
/// error naming the line.
pub(crate) fn read_json(
    input: &mut dyn BufRead,
    sink: &mut Sink<'_>,
    source: &JsonSource,
    top: impl FnOnce(&mut JsonCtx<'_, '_>, &mut JsonParser<'_>) -> Result<(), serde_json::Error>,
) -> crate::Result<()> {
    let counter = LineCounter::new(input);
    let lines = counter.lines();
    let mut de = serde_json::Deserializer::from_reader(counter);
    let mut ctx = JsonCtx {
        sink,
        lines,
        halt: None,
    };
    let res = top(&mut ctx, &mut de).and_then(|()| de.end());
    if let Some(halt) = ctx.halt.take() {
        return halt;
    }
    res.map_err(|e| {
        let msg = e.to_string();
        let msg = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]);
        let hint = match e.classify() {
            serde_json::error::Category::Data => source.data_hint,
            _ => source.syntax_hint,
        };
        crate::Error::invalid(
            "input",
            format!("line {}: not a readable {}: {msg}", e.line(), source.what),
            hint,
        )
    })
}

/// A seed that is its own visitor: `seed_visits!(Type, deserialize_any)` lets serde drive
/// `Type`'s `Visitor` impl through the named `Deserializer` method.
macro_rules! seed_visits {
    ($ty:ident, $how:ident) => {
        impl<'de> serde::de::DeserializeSeed<'de> for $ty<'_, '_, '_> {
            type Value = ();

            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.$how(self)
            }
        }
    };
}
pub(crate) use seed_visits;

/// Helpers the readers' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Flow, Item};

    /// Every item a reader pushes, or its whole-source error.
    pub(crate) fn collect(
        read: impl FnOnce(&mut super::Sink<'_>) -> crate::Result<()>,
    ) -> crate::Result<Vec<Item>> {
        let mut items = Vec::new();
        read(&mut |item| {
            items.push(item);
            Ok(Flow::Continue)
        })?;
        Ok(items)
    }

    /// The reasons of the bad records among `items`, in order.
    pub(crate) fn reasons(items: &[Item]) -> Vec<&str> {
        items
            .iter()
            .filter_map(|i| i.as_ref().err().map(|b| b.reason.as_str()))
            .collect()
    }

    /// Checks that a reader stops at the `at`-th item when the sink says stop, without error.
    pub(crate) fn stops_when_told(
        read: impl FnOnce(&mut super::Sink<'_>) -> crate::Result<()>,
        at: usize,
    ) {
        let mut seen = 0;
        read(&mut |_| {
            seen += 1;
            Ok(if seen == at {
                Flow::Stop
            } else {
                Flow::Continue
            })
        })
        .expect("stop is not an error");
        assert_eq!(seen, at);
    }

    /// Checks that a reader stops at the `at`-th item when the sink fails there, and returns
    /// the sink's error.
    pub(crate) fn sink_error_ends_the_read(
        read: impl FnOnce(&mut super::Sink<'_>) -> crate::Result<()>,
        at: usize,
    ) {
        let mut seen = 0;
        let err = read(&mut |_| {
            seen += 1;
            if seen == at {
                Err(crate::Error::Cancelled)
            } else {
                Ok(Flow::Continue)
            }
        })
        .expect_err("sink error");
        assert!(matches!(err, crate::Error::Cancelled));
        assert_eq!(seen, at);
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
