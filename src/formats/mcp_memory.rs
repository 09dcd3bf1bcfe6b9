//! Reader for the official MCP memory server's JSONL (`@modelcontextprotocol/server-memory`):
//! entity lines become memories that merge by name, relation lines become relations by name.

use std::io::BufRead;

use serde_json::{Map, Value};

use crate::formats::{BadRecord, Flow, Item, MemoryRecord, Record, Ref, RelationRecord, Sink};

/// Reads entity and relation lines, one at a time, and pushes a record (or a bad record) for
/// each non-blank line.
pub fn read(input: &mut dyn BufRead, sink: &mut Sink<'_>) -> crate::Result<()> {
    crate::formats::jsonl::for_each_line(input, sink, |line, raw, sink| {
        match parse_line(line, raw) {
            Some(item) => sink(item),
            None => Ok(Flow::Continue),
        }
    })
}

/// The item for one line, or `None` for a blank line.
fn parse_line(line: u64, raw: &[u8]) -> Option<Item> {
    let bad = |reason: String| {
        Some(Err(BadRecord {
            line,
            reason: format!("line {line}: {reason}"),
        }))
    };
    let Ok(text) = std::str::from_utf8(raw) else {
        return bad("is not valid UTF-8 (save the file as UTF-8)".into());
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return bad(format!(
                "is not valid JSON: {} at column {} (each line must be one JSON object)",
                without_position(&e),
                e.column()
            ));
        }
    };
    let Value::Object(obj) = value else {
        return bad(
            "is not a JSON object (each line must be an entity or a relation object)".into(),
        );
    };
    match convert(&obj) {
        Ok(record) => Some(Ok((line, record))),
        Err(reason) => bad(reason),
    }
}

/// serde_json's message without its " at line L column C" suffix.
fn without_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// One entity or relation object as a record; `Err` says what is wrong with it.
fn convert(obj: &Map<String, Value>) -> Result<Record, String> {
    match obj.get("type") {
        Some(Value::String(t)) => match t.trim() {
            "entity" => entity(obj),
            "relation" => relation(obj),
            other => Err(format!(
                "unknown \"type\" {other:?} (expected \"entity\" or \"relation\")"
            )),
        },
        Some(other) => Err(format!(
            "\"type\" is {other} (expected \"entity\" or \"relation\")"
        )),
        // The server's older files have no `type`: tell the two apart by their fields.
        None if obj.contains_key("name") && obj.contains_key("entityType") => entity(obj),
        None if ["from", "to", "relationType"]
            .iter()
            .all(|k| obj.contains_key(*k)) =>
        {
            relation(obj)
        }
        None => Err(
            "has no \"type\" (expected \"type\": \"entity\" with name, entityType and \
             observations, or \"type\": \"relation\" with from, to and relationType)"
                .into(),
        ),
    }
}

/// A non-empty trimmed string field.
fn text_field<'v>(obj: &'v Map<String, Value>, key: &str) -> Option<&'v str> {
    obj.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// A kind as a label: trimmed, inner runs of whitespace as one `_` ("works at" → "works_at").
fn label(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join("_")
}

fn entity(obj: &Map<String, Value>) -> Result<Record, String> {
    let name = text_field(obj, "name")
        .ok_or("entity has no \"name\" (every entity needs a non-empty name)")?;
    let kind = text_field(obj, "entityType").map_or_else(|| "entity".to_string(), label);
    let mut observations = Vec::new();
    match obj.get("observations") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => observations.push(s.trim()),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => observations.push(s.trim()),
                    Value::Null => {}
                    other => {
                        return Err(format!(
                            "entity {name:?}: observation {i} is {} (observations must be strings)",
                            json_kind(other)
                        ));
                    }
                }
            }
        }
        Some(other) => {
            return Err(format!(
                "entity {name:?}: \"observations\" is {} (give an array of strings)",
                json_kind(other)
            ));
        }
    }
    observations.retain(|s| !s.is_empty());
    let content = if observations.is_empty() {
        name.to_string()
    } else {
        observations.join("\n")
    };
    let metadata = obj
        .get("entityType")
        .map(|t| serde_json::json!({ "entityType": t }));
    Ok(Record::Memory(Box::new(MemoryRecord {
        name: Some(name.to_string()),
        kind: Some(kind),
        content,
        merge_by_name: true,
        metadata,
        ..Default::default()
    })))
}

fn relation(obj: &Map<String, Value>) -> Result<Record, String> {
    let field = |key: &str| {
        text_field(obj, key).ok_or_else(|| {
            format!(
                "relation has no {key:?} (every relation needs non-empty \"from\", \"to\" and \
                 \"relationType\")"
            )
        })
    };
    let (from, to, kind) = (field("from")?, field("to")?, field("relationType")?);
    Ok(Record::Relation(RelationRecord {
        id: None,
        from: Ref::Name(from.to_string()),
        to: Ref::Name(to.to_string()),
        kind: label(kind),
        weight: None,
        metadata: None,
        created_at: None,
        reinforced_at: None,
        valid_from: None,
        valid_until: None,
    }))
}

/// "a number", "an object", … for messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::{sink_error_ends_the_read, stops_when_told};

    fn read_all(input: &[u8]) -> Vec<Item> {
        let mut items = Vec::new();
        read(&mut &input[..], &mut |item| {
            items.push(item);
            Ok(Flow::Continue)
        })
        .expect("read");
        items
    }

    fn memory(item: &Item) -> &MemoryRecord {
        match item {
            Ok((_, Record::Memory(m))) => m,
            other => panic!("not a memory: {other:?}"),
        }
    }

    fn relation(item: &Item) -> &RelationRecord {
        match item {
            Ok((_, Record::Relation(r))) => r,
            other => panic!("not a relation: {other:?}"),
        }
    }

    #[test]
    fn entity_maps_field_by_field() {
        let items = read_all(
            br#"{"type":"entity","name":"John_Smith","entityType":"person","observations":["Speaks fluent Spanish","Graduated in 2019"]}"#,
        );
        assert_eq!(items.len(), 1);
        let m = memory(&items[0]);
        assert_eq!(
            *m,
            MemoryRecord {
                name: Some("John_Smith".into()),
                kind: Some("person".into()),
                content: "Speaks fluent Spanish\nGraduated in 2019".into(),
                merge_by_name: true,
                metadata: Some(serde_json::json!({"entityType": "person"})),
                ..Default::default()
            }
        );
        assert!(matches!(items[0], Ok((1, _))));
    }

    #[test]
    fn entity_without_observations_or_type() {
        let items = read_all(
            br#"{"type":"entity","name":"Anthropic","entityType":"  ","observations":[]}
{"type":"entity","name":"Acme"}
{"type":"entity","name":"Big Co","entityType":" software company ","observations":["  ", "Makes things "]}"#,
        );
        let a = memory(&items[0]);
        assert_eq!(a.content, "Anthropic");
        assert_eq!(a.kind.as_deref(), Some("entity"));
        assert_eq!(a.metadata, Some(serde_json::json!({"entityType": "  "})));
        let b = memory(&items[1]);
        assert_eq!(b.content, "Acme");
        assert_eq!(b.kind.as_deref(), Some("entity"));
        assert_eq!(b.metadata, None);
        let c = memory(&items[2]);
        assert_eq!(c.kind.as_deref(), Some("software_company"));
        assert_eq!(c.content, "Makes things");
        assert_eq!(
            c.metadata,
            Some(serde_json::json!({"entityType": " software company "}))
        );
    }

    #[test]
    fn relation_maps_field_by_field() {
        let items = read_all(
            br#"{"type":"relation","from":"John_Smith","to":"Anthropic","relationType":"works_at"}"#,
        );
        assert_eq!(
            *relation(&items[0]),
            RelationRecord {
                id: None,
                from: Ref::Name("John_Smith".into()),
                to: Ref::Name("Anthropic".into()),
                kind: "works_at".into(),
                weight: None,
                metadata: None,
                created_at: None,
                reinforced_at: None,
                valid_from: None,
                valid_until: None,
            }
        );
    }

    #[test]
    fn older_lines_without_type() {
        let items = read_all(
            br#"{"name":"Ann","entityType":"person","observations":["likes tea"]}
{"from":"Ann","to":"Bob","relationType":"knows well"}"#,
        );
        assert_eq!(memory(&items[0]).name.as_deref(), Some("Ann"));
        assert_eq!(memory(&items[0]).content, "likes tea");
        let r = relation(&items[1]);
        assert_eq!(r.from, Ref::Name("Ann".into()));
        assert_eq!(r.kind, "knows_well");
    }

    #[test]
    fn bad_lines_are_reported_with_their_line_and_good_ones_kept() {
        let input =
            b"{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"x\",\"observations\":[\"a\"]}\n\
\n\
{\"type\":\"entity\",\"entityType\":\"x\",\"observations\":[]}\n\
{\"type\":\"relation\",\"from\":\"A\",\"to\":\"B\"}\n\
{\"type\":\"thing\",\"name\":\"A\"}\n\
{\"name\":\"A\"}\n\
{not json\n\
[1,2]\n\
\xff\xfe\n\
{\"type\":\"entity\",\"name\":\"C\",\"observations\":[{\"a\":1}]}\n\
   \r\n\
{\"type\":\"relation\",\"from\":\"A\",\"to\":\"C\",\"relationType\":\"knows\"}\r\n";
        let items = read_all(input);
        assert_eq!(items.len(), 10);
        assert!(matches!(items[0], Ok((1, _))));
        let bad: Vec<(u64, String)> = items[1..9]
            .iter()
            .map(|i| match i {
                Err(b) => (b.line, b.reason.clone()),
                Ok(r) => panic!("expected a bad record, got {r:?}"),
            })
            .collect();
        assert_eq!(
            bad.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![3, 4, 5, 6, 7, 8, 9, 10]
        );
        assert_eq!(
            bad[0].1,
            "line 3: entity has no \"name\" (every entity needs a non-empty name)"
        );
        assert!(
            bad[1]
                .1
                .starts_with("line 4: relation has no \"relationType\"")
        );
        assert!(
            bad[2].1.contains("unknown \"type\" \"thing\""),
            "{}",
            bad[2].1
        );
        assert!(bad[3].1.contains("has no \"type\""), "{}", bad[3].1);
        assert!(
            bad[4].1.starts_with("line 7: is not valid JSON"),
            "{}",
            bad[4].1
        );
        assert!(bad[5].1.contains("not a JSON object"), "{}", bad[5].1);
        assert!(bad[6].1.contains("UTF-8"), "{}", bad[6].1);
        assert!(
            bad[7].1.contains("observations must be strings"),
            "{}",
            bad[7].1
        );
        match &items[9] {
            Ok((12, Record::Relation(r))) => assert_eq!(r.to, Ref::Name("C".into())),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stop_is_honoured() {
        let input = br#"{"type":"entity","name":"A","entityType":"x","observations":[]}
{"type":"entity","name":"B","entityType":"x","observations":[]}
{"type":"entity","name":"C","entityType":"x","observations":[]}"#;
        stops_when_told(|sink| read(&mut &input[..], sink), 2);
    }

    #[test]
    fn sink_error_is_returned() {
        let input = br#"{"type":"entity","name":"A","entityType":"x","observations":[]}
{"type":"entity","name":"B","entityType":"x","observations":[]}"#;
        sink_error_ends_the_read(|sink| read(&mut &input[..], sink), 1);
    }

    #[test]
    fn over_long_line_is_skipped() {
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"type\":\"entity\",\"name\":\"A\"}\n");
        input.extend_from_slice(b"{\"type\":\"entity\",\"name\":\"");
        input.resize(
            input.len() + crate::formats::jsonl::MAX_LINE_BYTES + 10,
            b'x',
        );
        input.extend_from_slice(b"\"}\n{\"type\":\"entity\",\"name\":\"B\"}\n");
        let items = read_all(&input);
        assert_eq!(items.len(), 3);
        assert_eq!(memory(&items[0]).content, "A");
        match &items[1] {
            Err(b) => {
                assert_eq!(b.line, 2);
                assert!(b.reason.contains("longer than 16 MiB"), "{}", b.reason);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&items[2], Ok((3, _))));
        assert_eq!(memory(&items[2]).content, "B");
    }

    #[test]
    fn empty_input_yields_nothing() {
        assert!(read_all(b"").is_empty());
        assert!(read_all(b"\n\n  \n").is_empty());
    }
}
