//! Reader for MemoryGraph's JSON export (`format_version` 2.0): its `memories` and
//! `relationships` arrays, streamed one element at a time.

use std::fmt;
use std::io::BufRead;
use std::rc::Rc;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::formats::{
    BadRecord, JsonCtx, JsonSource, LineValue, MemoryRecord, Record, Ref, RelationRecord, Sink,
    parse_timestamp, read_json, seed_visits,
};

/// The export version this reader understands.
const VERSION: &str = "2.0";

/// The field named in whole-source errors.
const FIELD: &str = "input";

/// Reads a MemoryGraph export and pushes a memory record per element of `memories` and a
/// relation record per element of `relationships`, in file order.
pub fn read(input: &mut dyn BufRead, sink: &mut Sink<'_>) -> crate::Result<()> {
    let source = JsonSource {
        what: "MemoryGraph export",
        data_hint: "give a file written by MemoryGraph's `export --format json`",
        syntax_hint: "the file is not complete, valid JSON; check it near that line or export it \
                      again",
    };
    read_json(input, sink, &source, |ctx, de| {
        Export { ctx }.deserialize(de)
    })
}

/// The top-level object.
struct Export<'c, 's, 'a> {
    ctx: &'c mut JsonCtx<'s, 'a>,
}

seed_visits!(Export, deserialize_map);

impl<'de> Visitor<'de> for Export<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with \"format_version\", \"memories\" and \"relationships\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        // Whether the `format_version` found was accepted.
        let mut versioned = false;
        let mut old_version: Option<Value> = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format_version" => {
                    let line = ctx.line();
                    let v: Value = map.next_value()?;
                    let ok = match &v {
                        Value::String(s) => s.trim() == VERSION,
                        Value::Number(n) => n.as_f64() == Some(2.0),
                        _ => false,
                    };
                    if !ok {
                        return ctx.fail(crate::Error::invalid(
                            FIELD,
                            format!(
                                "line {line}: MemoryGraph export has \"format_version\" {v}; \
                                 only {VERSION} is supported"
                            ),
                            "export again with a MemoryGraph release that writes format 2.0",
                        ));
                    }
                    versioned = true;
                }
                "export_version" if !versioned => {
                    old_version = Some(map.next_value()?);
                }
                "memories" | "relationships" => {
                    if !versioned {
                        let found = found(old_version.as_ref());
                        return ctx.fail(crate::Error::invalid(
                            FIELD,
                            format!(
                                "line {}: MemoryGraph export has no \"format_version\" before \
                                 {key:?}{found}; only {VERSION} is supported",
                                ctx.line()
                            ),
                            "export again with a MemoryGraph release that writes format 2.0 \
                             (\"format_version\": \"2.0\" comes first)",
                        ));
                    }
                    let kind = if key == "memories" {
                        Kind::Memory
                    } else {
                        Kind::Relationship
                    };
                    map.next_value_seed(Elements {
                        ctx: &mut *ctx,
                        kind,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !versioned {
            let found = found(old_version.as_ref());
            return ctx.fail(crate::Error::invalid(
                FIELD,
                format!("MemoryGraph export has no \"format_version\"{found}; only {VERSION} is supported"),
                "give a file written by MemoryGraph's `export --format json` (format 2.0)",
            ));
        }
        Ok(())
    }
}

/// What an export without a `format_version` had instead, for its error message.
fn found(old_version: Option<&Value>) -> String {
    match old_version {
        Some(v) => format!(" (found \"export_version\" {v})"),
        None => String::new(),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Memory,
    Relationship,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Memory => "memories",
            Kind::Relationship => "relationships",
        }
    }
}

/// The `memories` or `relationships` array, one element at a time.
struct Elements<'c, 's, 'a> {
    ctx: &'c mut JsonCtx<'s, 'a>,
    kind: Kind,
}

seed_visits!(Elements, deserialize_any);

impl<'de> Visitor<'de> for Elements<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array of {}", self.kind.key())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let lines = Rc::clone(&self.ctx.lines);
        while let Some((line, value)) = seq.next_element_seed(LineValue(&lines))? {
            let converted = match self.kind {
                Kind::Memory => memory(&value),
                Kind::Relationship => relationship(&value),
            };
            let item = match converted {
                Ok(record) => Ok((line, record)),
                Err(reason) => Err(BadRecord {
                    line,
                    reason: format!("line {line}: {reason}"),
                }),
            };
            self.ctx.push(item)?;
        }
        Ok(())
    }
}

/// The first present, non-null field of `keys`.
fn field<'v>(obj: &'v Map<String, Value>, keys: &[&str]) -> Option<&'v Value> {
    keys.iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()))
}

/// An id: a non-empty string or an integer.
fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// A non-empty trimmed string.
fn text_of(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Every field name this reader maps, so that the rest go to metadata.
const MEMORY_KEYS: &[&str] = &[
    "id",
    "memory_id",
    "type",
    "memory_type",
    "title",
    "name",
    "content",
    "text",
    "tags",
    "importance",
    "created_at",
    "updated_at",
];

const RELATION_KEYS: &[&str] = &[
    "from_memory_id",
    "from_id",
    "source_id",
    "to_memory_id",
    "to_id",
    "target_id",
    "type",
    "relationship_type",
    "properties",
    "strength",
    "created_at",
];

fn memory(value: &Value) -> Result<Record, String> {
    let Value::Object(obj) = value else {
        return Err(
            "memory is not a JSON object (each element of \"memories\" must be one)".into(),
        );
    };
    let id = field(obj, &["id", "memory_id"])
        .and_then(id_of)
        .ok_or("memory has no \"id\" (every MemoryGraph memory needs its id)")?;
    let title = text_of(field(obj, &["title", "name"]));
    let body = text_of(field(obj, &["content", "text"]));
    let content = match (title, body) {
        (Some(t), Some(c)) => format!("{t}: {c}"),
        (Some(t), None) => t.to_string(),
        (None, Some(c)) => c.to_string(),
        (None, None) => {
            return Err(format!(
                "memory {id:?} has neither \"title\" nor \"content\" (give at least one)"
            ));
        }
    };
    let kind = text_of(field(obj, &["type", "memory_type"])).unwrap_or("memory");
    let tags = match field(obj, &["tags"]) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    let importance = field(obj, &["importance"])
        .and_then(Value::as_f64)
        .map(|x| x.clamp(0.0, 1.0));
    let created_at = obj.get("created_at").and_then(parse_timestamp);
    let updated_at = obj.get("updated_at").and_then(parse_timestamp);

    let mut extra = Map::new();
    extra.insert("id".into(), Value::String(id.clone()));
    if let Some(t) = title {
        extra.insert("title".into(), Value::String(t.into()));
    }
    for (k, v) in obj {
        if !MEMORY_KEYS.contains(&k.as_str()) && !v.is_null() {
            extra.insert(k.clone(), v.clone());
        }
    }
    Ok(Record::Memory(Box::new(MemoryRecord {
        ext: Some(format!("memorygraph:{id}")),
        kind: Some(kind.to_string()),
        name: None,
        content,
        tags,
        importance,
        created_at,
        updated_at,
        metadata: Some(serde_json::json!({ "memorygraph": extra })),
        ..Default::default()
    })))
}

fn relationship(value: &Value) -> Result<Record, String> {
    let Value::Object(obj) = value else {
        return Err(
            "relationship is not a JSON object (each element of \"relationships\" must be one)"
                .into(),
        );
    };
    let end = |keys: &[&str], name: &str| {
        field(obj, keys).and_then(id_of).ok_or_else(|| {
            format!(
                "relationship has no {name:?} (every relationship needs \"from_memory_id\" and \
                 \"to_memory_id\")"
            )
        })
    };
    let from = end(
        &["from_memory_id", "from_id", "source_id"],
        "from_memory_id",
    )?;
    let to = end(&["to_memory_id", "to_id", "target_id"], "to_memory_id")?;
    let kind = text_of(field(obj, &["type", "relationship_type"]))
        .map_or_else(|| "related_to".to_string(), str::to_lowercase);
    let props = match obj.get("properties") {
        Some(Value::Object(p)) => Some(p),
        _ => None,
    };
    let prop = |key: &str| props.and_then(|p| p.get(key)).or_else(|| obj.get(key));
    let weight = prop("strength")
        .and_then(Value::as_f64)
        .map(|x| x.clamp(0.0, 1.0));
    let created_at = prop("created_at").and_then(parse_timestamp);

    let mut extra = Map::new();
    for (k, v) in props.into_iter().flatten() {
        if k != "strength" && k != "created_at" && !v.is_null() {
            extra.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in obj {
        if !RELATION_KEYS.contains(&k.as_str()) && !v.is_null() && !extra.contains_key(k) {
            extra.insert(k.clone(), v.clone());
        }
    }
    Ok(Record::Relation(RelationRecord {
        id: None,
        from: Ref::Ext(format!("memorygraph:{from}")),
        to: Ref::Ext(format!("memorygraph:{to}")),
        kind,
        weight,
        metadata: (!extra.is_empty()).then_some(Value::Object(extra)),
        created_at,
        reinforced_at: None,
        valid_from: None,
        valid_until: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::{collect, reasons, sink_error_ends_the_read, stops_when_told};
    use crate::formats::{Flow, Item};

    fn read_all(input: &str) -> crate::Result<Vec<Item>> {
        collect(|sink| read(&mut input.as_bytes(), sink))
    }

    const EXPORT: &str = r#"{
  "format_version": "2.0",
  "export_version": "1.0",
  "export_date": "2025-12-04T10:00:00+00:00",
  "backend_type": "sqlite",
  "memory_count": 2,
  "relationship_count": 1,
  "memories": [
    {
      "id": "m-1",
      "type": "solution",
      "title": "Fix timeout",
      "content": "Raise the pool size to 20.",
      "summary": "pool size",
      "tags": ["db", " perf ", 3],
      "importance": 1.7,
      "confidence": 0.9,
      "created_at": "2025-01-15T10:30:00.123456+00:00",
      "updated_at": "2025-01-16T00:00:00Z",
      "context": {"project_path": "/srv/app", "languages": ["python"]}
    },
    {
      "id": "m-2",
      "type": "problem",
      "title": "Timeouts",
      "content": null,
      "tags": [],
      "importance": "high",
      "created_at": "2025-01-14"
    }
  ],
  "relationships": [
    {
      "from_memory_id": "m-1",
      "to_memory_id": "m-2",
      "type": "SOLVES",
      "properties": {"strength": 0.8, "confidence": 0.7, "context": null, "evidence_count": 2}
    }
  ]
}"#;

    #[test]
    fn memory_maps_field_by_field() {
        let items = read_all(EXPORT).expect("read");
        assert_eq!(items.len(), 3);
        let Ok((line, Record::Memory(m))) = &items[0] else {
            panic!("{:?}", items[0]);
        };
        assert_eq!(*line, 9);
        assert_eq!(
            **m,
            MemoryRecord {
                ext: Some("memorygraph:m-1".into()),
                kind: Some("solution".into()),
                content: "Fix timeout: Raise the pool size to 20.".into(),
                tags: vec!["db".into(), "perf".into()],
                importance: Some(1.0),
                created_at: crate::model::parse_time("2025-01-15T10:30:00.123Z"),
                updated_at: crate::model::parse_time("2025-01-16T00:00:00Z"),
                metadata: Some(serde_json::json!({"memorygraph": {
                    "id": "m-1",
                    "title": "Fix timeout",
                    "summary": "pool size",
                    "confidence": 0.9,
                    "context": {"project_path": "/srv/app", "languages": ["python"]},
                }})),
                ..Default::default()
            }
        );
        let Ok((line, Record::Memory(m))) = &items[1] else {
            panic!("{:?}", items[1]);
        };
        assert_eq!(*line, 22);
        assert_eq!(m.content, "Timeouts");
        assert_eq!(m.kind.as_deref(), Some("problem"));
        assert_eq!(m.importance, None);
        assert_eq!(m.created_at, crate::model::parse_time("2025-01-14"));
        assert_eq!(m.updated_at, None);
        assert_eq!(
            m.metadata,
            Some(serde_json::json!({"memorygraph": {"id": "m-2", "title": "Timeouts"}}))
        );
    }

    #[test]
    fn relationship_maps_field_by_field() {
        let items = read_all(EXPORT).expect("read");
        let Ok((line, Record::Relation(r))) = &items[2] else {
            panic!("{:?}", items[2]);
        };
        assert_eq!(*line, 33);
        assert_eq!(
            *r,
            RelationRecord {
                id: None,
                from: Ref::Ext("memorygraph:m-1".into()),
                to: Ref::Ext("memorygraph:m-2".into()),
                kind: "solves".into(),
                weight: Some(0.8),
                metadata: Some(serde_json::json!({"confidence": 0.7, "evidence_count": 2})),
                created_at: None,
                reinforced_at: None,
                valid_from: None,
                valid_until: None,
            }
        );
    }

    #[test]
    fn relationships_first_defaults_and_clamps() {
        let input = r#"{"format_version":"2.0","relationships":[
{"from_memory_id":"a","to_memory_id":"b","properties":{"strength":3,"created_at":1700000000}},
{"from_memory_id":"a","to_memory_id":"c","type":"","strength":-1,"id":"r-9"}
],"memories":[{"id":7,"content":"only content"}]}"#;
        let items = read_all(input).expect("read");
        assert_eq!(items.len(), 3);
        let Ok((2, Record::Relation(r))) = &items[0] else {
            panic!("{:?}", items[0]);
        };
        assert_eq!(r.kind, "related_to");
        assert_eq!(r.weight, Some(1.0));
        assert_eq!(r.created_at, Some(1_700_000_000_000));
        assert_eq!(r.metadata, None);
        let Ok((3, Record::Relation(r))) = &items[1] else {
            panic!("{:?}", items[1]);
        };
        assert_eq!(r.weight, Some(0.0));
        assert_eq!(r.metadata, Some(serde_json::json!({"id": "r-9"})));
        let Ok((4, Record::Memory(m))) = &items[2] else {
            panic!("{:?}", items[2]);
        };
        assert_eq!(m.ext.as_deref(), Some("memorygraph:7"));
        assert_eq!(m.content, "only content");
        assert_eq!(m.kind.as_deref(), Some("memory"));
    }

    #[test]
    fn bad_elements_are_reported_and_reading_goes_on() {
        let input = r#"{"format_version": "2.0", "memories": [
  {"id": "a", "title": "A"},
  {"title": "no id"},
  42,
  {"id": "b", "title": "  ", "content": ""},
  {"id": "c", "content": "C"}
], "relationships": [
  {"from_memory_id": "a"},
  {"from_memory_id": "a", "to_memory_id": "c", "type": "BUILDS_ON"}
]}"#;
        let items = read_all(input).expect("read");
        let summary: Vec<(bool, u64)> = items
            .iter()
            .map(|i| match i {
                Ok((line, _)) => (true, *line),
                Err(b) => (false, b.line),
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (true, 2),
                (false, 3),
                (false, 4),
                (false, 5),
                (true, 6),
                (false, 8),
                (true, 9)
            ]
        );
        let reasons = reasons(&items);
        assert_eq!(
            reasons[0],
            "line 3: memory has no \"id\" (every MemoryGraph memory needs its id)"
        );
        assert!(reasons[1].starts_with("line 4: memory is not a JSON object"));
        assert!(reasons[2].contains("neither \"title\" nor \"content\""));
        assert!(reasons[3].contains("has no \"to_memory_id\""));
        let Ok((_, Record::Relation(r))) = &items[6] else {
            panic!("{:?}", items[6]);
        };
        assert_eq!(r.kind, "builds_on");
    }

    fn whole_error(input: &str) -> String {
        match read_all(input) {
            Err(e @ crate::Error::InvalidArgument { .. }) => e.to_string(),
            other => panic!("expected an invalid-input error, got {other:?}"),
        }
    }

    #[test]
    fn wrong_or_missing_version_is_a_whole_source_error() {
        let e = whole_error(r#"{"format_version": "1.0", "memories": []}"#);
        assert!(e.contains("\"format_version\" \"1.0\""), "{e}");
        assert!(e.contains("only 2.0 is supported"), "{e}");
        let e = whole_error(r#"{"export_version": "1.0", "memories": [{"id":"a","title":"A"}]}"#);
        assert!(e.contains("no \"format_version\""), "{e}");
        assert!(e.contains("found \"export_version\" \"1.0\""), "{e}");
        let e = whole_error(r#"{"export_date": "2025-01-01"}"#);
        assert!(e.contains("no \"format_version\""), "{e}");
    }

    #[test]
    fn not_an_export_is_a_whole_source_error() {
        let e = whole_error(r#"[{"id": "a"}]"#);
        assert!(e.contains("line 1"), "{e}");
        let e =
            whole_error("{\"format_version\": \"2.0\",\n\"memories\": [\n{\"id\": \"a\",,}\n]}");
        assert!(e.contains("line 3"), "{e}");
        let e = whole_error(r#"{"format_version": "2.0", "memories": {"a": 1}}"#);
        assert!(e.contains("an array of memories"), "{e}");
        let e = whole_error("{\"format_version\": \"2.0\", \"memories\": [");
        assert!(e.contains("line 1"), "{e}");
        let e = whole_error("");
        assert!(e.contains("line"), "{e}");
    }

    #[test]
    fn broken_json_after_good_elements_keeps_them() {
        let input = "{\"format_version\": \"2.0\", \"memories\": [\n{\"id\": \"a\", \"title\": \"A\"},\n{\"id\": \"b\" \"title\": \"B\"}]}";
        let mut seen = Vec::new();
        let err = read(&mut input.as_bytes(), &mut |item| {
            seen.push(item);
            Ok(Flow::Continue)
        })
        .expect_err("broken");
        assert_eq!(seen.len(), 1);
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    #[test]
    fn stop_and_sink_errors_end_reading() {
        stops_when_told(|sink| read(&mut EXPORT.as_bytes(), sink), 1);
        sink_error_ends_the_read(|sink| read(&mut EXPORT.as_bytes(), sink), 2);
    }

    #[test]
    fn null_arrays_and_other_keys_are_fine() {
        let input = r#"{"format_version":"2.0","memories":null,"extra":{"x":[1,2,{"y":null}]},"relationships":[]}"#;
        assert!(read_all(input).expect("read").is_empty());
    }
}
