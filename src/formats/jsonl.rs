//! mnemograph's own JSONL: a header line, then one line per memory (with its timestamps, and its
//! vector when asked) and one per relation. What `export` writes and `import` reads back
//! losslessly. Times are RFC 3339 with milliseconds; vectors are little-endian f32, base64.

use std::io::{BufRead, Write};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::formats::{
    BadRecord, Flow, HistoryRecord, MemoryRecord, Record, Ref, RelationRecord, Sink, VectorRecord,
};
use crate::model::{HistoryEntry, Memory, Millis, Relation, format_time, parse_time};

/// Version of the format this build writes and reads.
pub const VERSION: u32 = 1;
/// Longest line a reader accepts.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `"mnemograph"`: how readers recognise the format.
    pub format: String,
    pub version: u32,
    pub exported_at: String,
    /// Model of the vectors in this file, when they are included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memories: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relations: Option<u64>,
}

impl Header {
    /// The header of an export written at `now` (counts unknown until the end: left out).
    pub fn new(now: Millis, model: Option<String>) -> Header {
        Header {
            format: "mnemograph".into(),
            version: VERSION,
            exported_at: format_time(now),
            model,
            memories: None,
            relations: None,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct VectorLine {
    model: String,
    f32: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryLine {
    op: String,
    actor: String,
    at: String,
    previous: Value,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line {
    Header(Header),
    Memory(Box<MemoryLine>),
    Relation(RelationLine),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryLine {
    id: Option<String>,
    namespace: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    content: String,
    #[serde(default)]
    tags: Vec<String>,
    importance: Option<f64>,
    metadata: Option<Value>,
    created_at: Option<String>,
    updated_at: Option<String>,
    accessed_at: Option<String>,
    access_count: Option<i64>,
    valid_from: Option<String>,
    valid_until: Option<String>,
    archived_at: Option<String>,
    vector: Option<VectorLine>,
    #[serde(default)]
    history: Vec<HistoryLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RelationLine {
    id: Option<String>,
    from: String,
    to: String,
    kind: String,
    weight: Option<f64>,
    metadata: Option<Value>,
    created_at: Option<String>,
    reinforced_at: Option<String>,
    valid_from: Option<String>,
    valid_until: Option<String>,
}

fn time(field: &str, s: Option<String>) -> Result<Option<Millis>, String> {
    match s {
        None => Ok(None),
        Some(s) => parse_time(&s).map(Some).ok_or_else(|| {
            format!("`{field}` is {s:?}, not a time (write RFC 3339, e.g. 2024-05-01T10:00:00Z)")
        }),
    }
}

fn encode_vector(v: &[f32]) -> String {
    let mut bytes = Vec::with_capacity(v.len() * 4);
    for x in v {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decode_vector(s: &str) -> Result<Vec<f32>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("`vector.f32` is not base64 ({e})"))?;
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        return Err(format!(
            "`vector.f32` holds {} bytes, not a whole number of f32 values",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn memory(m: MemoryLine) -> Result<MemoryRecord, String> {
    let vector = match m.vector {
        Some(v) => Some(VectorRecord {
            model: v.model,
            vec: decode_vector(&v.f32)?,
        }),
        None => None,
    };
    let mut history = Vec::with_capacity(m.history.len());
    // Written newest first, as `get` shows it; kept oldest first.
    for h in m.history.into_iter().rev() {
        let at = time("history.at", Some(h.at))?.unwrap_or_default();
        history.push(HistoryRecord {
            op: h.op,
            actor: h.actor,
            at,
            previous: h.previous,
        });
    }
    Ok(MemoryRecord {
        ext: m.id.clone(),
        id: m.id,
        namespace: m.namespace,
        kind: m.kind,
        name: m.name,
        content: m.content,
        tags: m.tags,
        importance: m.importance,
        metadata: m.metadata,
        created_at: time("created_at", m.created_at)?,
        updated_at: time("updated_at", m.updated_at)?,
        accessed_at: time("accessed_at", m.accessed_at)?,
        access_count: m.access_count,
        valid_from: time("valid_from", m.valid_from)?,
        valid_until: time("valid_until", m.valid_until)?,
        archived_at: time("archived_at", m.archived_at)?,
        vector,
        history,
        merge_by_name: false,
        links: Vec::new(),
    })
}

fn relation(r: RelationLine) -> Result<RelationRecord, String> {
    Ok(RelationRecord {
        id: r.id,
        from: Ref::Ext(r.from),
        to: Ref::Ext(r.to),
        kind: r.kind,
        weight: r.weight,
        metadata: r.metadata,
        created_at: time("created_at", r.created_at)?,
        reinforced_at: time("reinforced_at", r.reinforced_at)?,
        valid_from: time("valid_from", r.valid_from)?,
        valid_until: time("valid_until", r.valid_until)?,
    })
}

fn parse_line(bytes: &[u8]) -> Result<Option<Record>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("is not UTF-8 ({e})"))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let line: Line = serde_json::from_str(text).map_err(|e| {
        format!("is not a mnemograph record ({e}); each line is one JSON object with \"type\": \"memory\" or \"relation\"")
    })?;
    match line {
        Line::Header(h) if h.version > VERSION => Err(format!(
            "header says version {}, newer than this build reads ({VERSION}); upgrade mnemograph",
            h.version
        )),
        Line::Header(_) => Ok(None),
        Line::Memory(m) => memory(*m).map(|m| Some(Record::Memory(Box::new(m)))),
        Line::Relation(r) => relation(r).map(|r| Some(Record::Relation(r))),
    }
}

/// Reads lines one at a time, each at most `MAX_LINE_BYTES`: `on_line(line_no, bytes)`; a longer
/// line is reported bad and skipped. Shared by the JSONL formats.
pub fn for_each_line(
    input: &mut dyn BufRead,
    sink: &mut Sink<'_>,
    mut on_line: impl FnMut(u64, &[u8], &mut Sink<'_>) -> crate::Result<Flow>,
) -> crate::Result<()> {
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        line_no += 1;
        let n = std::io::Read::take(&mut *input, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let flow = if buf.len() > MAX_LINE_BYTES && !buf.ends_with(b"\n") {
            // Skip the rest of the long line.
            loop {
                let chunk = input.fill_buf()?;
                if chunk.is_empty() {
                    break;
                }
                match chunk.iter().position(|&b| b == b'\n') {
                    Some(p) => {
                        input.consume(p + 1);
                        break;
                    }
                    None => {
                        let len = chunk.len();
                        input.consume(len);
                    }
                }
            }
            sink(Err(BadRecord {
                line: line_no,
                reason: format!(
                    "line {line_no}: longer than {} MiB (put one record per line and shorten its content)",
                    MAX_LINE_BYTES >> 20
                ),
            }))?
        } else {
            on_line(line_no, &buf, sink)?
        };
        if flow == Flow::Stop {
            return Ok(());
        }
    }
}

/// Reads mnemograph JSONL.
pub fn read(input: &mut dyn BufRead, sink: &mut Sink<'_>) -> crate::Result<()> {
    for_each_line(input, sink, |line, bytes, sink| match parse_line(bytes) {
        Ok(None) => Ok(Flow::Continue),
        Ok(Some(r)) => sink(Ok((line, r))),
        Err(reason) => sink(Err(BadRecord {
            line,
            reason: format!("line {line} {reason}"),
        })),
    })
}

#[derive(Serialize)]
struct MemoryOut<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    id: &'a str,
    namespace: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    content: &'a str,
    tags: &'a [String],
    importance: f64,
    metadata: &'a Value,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    accessed_at: Option<String>,
    access_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    valid_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    valid_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    archived_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vector: Option<VectorLine>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    history: Vec<HistoryLine>,
}

#[derive(Serialize)]
struct RelationOut<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    id: &'a str,
    from: &'a str,
    to: &'a str,
    kind: &'a str,
    weight: f64,
    metadata: &'a Value,
    created_at: String,
    reinforced_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    valid_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    valid_until: Option<String>,
}

/// Writes the header line.
pub fn write_header(w: &mut dyn Write, h: &Header) -> std::io::Result<()> {
    let mut v = serde_json::to_value(h)?;
    if let Value::Object(o) = &mut v {
        o.insert("type".into(), Value::from("header"));
    }
    serde_json::to_writer(&mut *w, &v)?;
    w.write_all(b"\n")
}

/// Writes one memory line, with its vector and model, and its previous versions (newest
/// first), when given.
pub fn write_memory(
    w: &mut dyn Write,
    m: &Memory,
    vector: Option<(&str, &[f32])>,
    history: &[HistoryEntry],
) -> std::io::Result<()> {
    let out = MemoryOut {
        ty: "memory",
        id: &m.id,
        namespace: &m.namespace,
        kind: &m.kind,
        name: m.name.as_deref(),
        content: &m.content,
        tags: &m.tags,
        importance: m.importance,
        metadata: &m.metadata,
        created_at: format_time(m.created_at),
        updated_at: format_time(m.updated_at),
        accessed_at: m.accessed_at.map(format_time),
        access_count: m.access_count,
        valid_from: m.valid_from.map(format_time),
        valid_until: m.valid_until.map(format_time),
        archived_at: m.archived_at.map(format_time),
        vector: vector.map(|(model, v)| VectorLine {
            model: model.to_owned(),
            f32: encode_vector(v),
        }),
        history: history
            .iter()
            .map(|h| HistoryLine {
                op: h.op.clone(),
                actor: h.actor.clone(),
                at: format_time(h.at),
                previous: h.previous.clone(),
            })
            .collect(),
    };
    serde_json::to_writer(&mut *w, &out)?;
    w.write_all(b"\n")
}

/// Writes one relation line (ends by memory id).
pub fn write_relation(w: &mut dyn Write, r: &Relation) -> std::io::Result<()> {
    let out = RelationOut {
        ty: "relation",
        id: &r.id,
        from: &r.from,
        to: &r.to,
        kind: &r.kind,
        weight: r.weight,
        metadata: &r.metadata,
        created_at: format_time(r.created_at),
        reinforced_at: format_time(r.reinforced_at),
        valid_from: r.valid_from.map(format_time),
        valid_until: r.valid_until.map(format_time),
    };
    serde_json::to_writer(&mut *w, &out)?;
    w.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Item;
    use crate::model::MemoryKey;

    fn read_all(text: &str) -> Vec<Item> {
        let mut items = Vec::new();
        let mut input = text.as_bytes();
        read(&mut input, &mut |i| {
            items.push(i);
            Ok(Flow::Continue)
        })
        .unwrap();
        items
    }

    fn sample_memory() -> Memory {
        Memory {
            key: MemoryKey(7),
            id: "m_abc".into(),
            namespace: "work".into(),
            kind: "fact".into(),
            name: Some("Ada".into()),
            content: "Ada wrote the first program\nand a second line".into(),
            tags: vec!["history".into()],
            importance: 0.75,
            metadata: serde_json::json!({"source": "book"}),
            created_at: 1_700_000_000_123,
            updated_at: 1_700_000_100_456,
            accessed_at: Some(1_700_000_200_000),
            access_count: 3,
            valid_from: Some(1_600_000_000_000),
            valid_until: None,
            superseded_by: None,
            version: 2,
            deleted_at: None,
            merged_into: None,
            archived_at: Some(1_700_000_300_000),
            salience: 0.5,
            salience_at: 0,
        }
    }

    #[test]
    fn memory_and_relation_lines_round_trip() {
        let m = sample_memory();
        let r = Relation {
            id: "r_1".into(),
            from: "m_abc".into(),
            to: "m_def".into(),
            kind: "knows".into(),
            weight: 0.5,
            metadata: serde_json::json!({}),
            created_at: 1_700_000_000_000,
            reinforced_at: 1_700_000_000_001,
            valid_from: None,
            valid_until: Some(1_800_000_000_000),
            deleted_at: None,
        };
        let vec = [0.25f32, -1.5, 3.0];
        let mut out = Vec::new();
        write_header(&mut out, &Header::new(0, Some("m1".into()))).unwrap();
        let history = [
            HistoryEntry {
                op: "update".into(),
                actor: "tool:update".into(),
                at: 1_700_000_050_000,
                previous: serde_json::json!({"content": "second"}),
            },
            HistoryEntry {
                op: "update".into(),
                actor: "cli".into(),
                at: 1_700_000_010_000,
                previous: serde_json::json!({"content": "first"}),
            },
        ];
        write_memory(&mut out, &m, Some(("m1", &vec)), &history).unwrap();
        write_relation(&mut out, &r).unwrap();
        let items = read_all(std::str::from_utf8(&out).unwrap());
        assert_eq!(items.len(), 2);
        let Ok((2, Record::Memory(got))) = &items[0] else {
            panic!("{:?}", items[0])
        };
        assert_eq!(got.id.as_deref(), Some("m_abc"));
        assert_eq!(got.ext.as_deref(), Some("m_abc"));
        assert_eq!(got.namespace.as_deref(), Some("work"));
        assert_eq!(got.name.as_deref(), Some("Ada"));
        assert_eq!(got.content, m.content);
        assert_eq!(got.tags, m.tags);
        assert_eq!(got.importance, Some(0.75));
        assert_eq!(got.metadata, Some(m.metadata.clone()));
        assert_eq!(got.created_at, Some(m.created_at));
        assert_eq!(got.updated_at, Some(m.updated_at));
        assert_eq!(got.accessed_at, m.accessed_at);
        let kept: Vec<(i64, &str)> = got
            .history
            .iter()
            .map(|h| (h.at, h.actor.as_str()))
            .collect();
        assert_eq!(
            kept,
            vec![
                (1_700_000_010_000, "cli"),
                (1_700_000_050_000, "tool:update")
            ]
        );
        assert_eq!(got.access_count, Some(3));
        assert_eq!(got.archived_at, m.archived_at);
        assert_eq!(got.valid_from, m.valid_from);
        assert_eq!(
            got.vector,
            Some(VectorRecord {
                model: "m1".into(),
                vec: vec.to_vec()
            })
        );
        let Ok((3, Record::Relation(rel))) = &items[1] else {
            panic!("{:?}", items[1])
        };
        assert_eq!(rel.from, Ref::Ext("m_abc".into()));
        assert_eq!(rel.weight, Some(0.5));
        assert_eq!(rel.reinforced_at, Some(r.reinforced_at));
        assert_eq!(rel.valid_until, r.valid_until);
    }

    #[test]
    fn bad_lines_are_reported_and_good_ones_kept() {
        let text = concat!(
            "{\"type\":\"memory\",\"content\":\"one\"}\n",
            "not json\n",
            "\n",
            "{\"type\":\"memory\"}\n",
            "{\"type\":\"memory\",\"content\":\"two\",\"created_at\":\"yesterday\"}\n",
            "{\"type\":\"memory\",\"content\":\"three\",\"colour\":1}\n",
            "{\"type\":\"memory\",\"content\":\"four\",\"vector\":{\"model\":\"x\",\"f32\":\"AAA\"}}\n",
            "{\"type\":\"relation\",\"from\":\"a\",\"to\":\"b\",\"kind\":\"k\"}",
        );
        let items = read_all(text);
        let lines: Vec<u64> = items
            .iter()
            .map(|i| match i {
                Ok((l, _)) => *l,
                Err(b) => b.line,
            })
            .collect();
        assert_eq!(lines, vec![1, 2, 4, 5, 6, 7, 8]);
        assert!(items[0].is_ok() && items[6].is_ok());
        for bad in &items[1..6] {
            let Err(b) = bad else { panic!("{bad:?}") };
            assert!(b.reason.starts_with(&format!("line {}", b.line)), "{b:?}");
        }
        let Err(b) = &items[3] else { panic!() };
        assert!(b.reason.contains("created_at"), "{b:?}");
        let Err(b) = &items[4] else { panic!() };
        assert!(b.reason.contains("colour"), "{b:?}");
    }

    #[test]
    fn a_newer_version_is_refused_and_stop_is_honoured() {
        let items = read_all(
            "{\"type\":\"header\",\"format\":\"mnemograph\",\"version\":99,\"exported_at\":\"x\"}\n",
        );
        let Err(b) = &items[0] else { panic!() };
        assert!(b.reason.contains("upgrade"), "{b:?}");
        let mut n = 0;
        let mut input =
            "{\"type\":\"memory\",\"content\":\"a\"}\n{\"type\":\"memory\",\"content\":\"b\"}\n"
                .as_bytes();
        read(&mut input, &mut |_| {
            n += 1;
            Ok(Flow::Stop)
        })
        .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn an_overlong_line_is_skipped() {
        let mut text = String::from("{\"type\":\"memory\",\"content\":\"");
        text.push_str(&"x".repeat(MAX_LINE_BYTES + 10));
        text.push_str("\"}\n{\"type\":\"memory\",\"content\":\"after\"}\n");
        let items = read_all(&text);
        assert_eq!(items.len(), 2);
        let Err(b) = &items[0] else { panic!() };
        assert!(b.reason.contains("longer than"), "{b:?}");
        let Ok((2, Record::Memory(m))) = &items[1] else {
            panic!("{:?}", items[1])
        };
        assert_eq!(m.content, "after");
    }
}
