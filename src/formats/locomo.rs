//! Reader for LoCoMo conversation transcripts: per sample, a memory for each session and one for
//! each turn, turns linked to their session and to the turn before them.

use std::fmt;
use std::io::BufRead;
use std::rc::Rc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use crate::formats::{
    BadRecord, Item, JsonCtx, JsonSource, LineValue, LinkRecord, MemoryRecord, Record, Ref, Sink,
    read_json, seed_visits,
};
use crate::model::Millis;

/// Reads a LoCoMo file (an array of samples, or one sample object), one sample at a time, and
/// pushes each sample's session and turn records in session order.
pub fn read(input: &mut dyn BufRead, sink: &mut Sink<'_>) -> crate::Result<()> {
    let source = JsonSource {
        what: "LoCoMo file",
        data_hint: "give LoCoMo's JSON: an array of samples with \"sample_id\" and \"conversation\"",
        syntax_hint: "the file is not complete, valid JSON; check it near that line",
    };
    read_json(input, sink, &source, |ctx, de| {
        Samples { ctx }.deserialize(de)
    })
}

/// Pushes the records of one sample.
fn push_sample<E: de::Error>(
    ctx: &mut JsonCtx<'_, '_>,
    line: u64,
    sample: &Value,
) -> Result<(), E> {
    for item in sample_items(line, sample) {
        ctx.push(item)?;
    }
    Ok(())
}

/// The top level: an array of samples, or one sample.
struct Samples<'c, 's, 'a> {
    ctx: &'c mut JsonCtx<'s, 'a>,
}

seed_visits!(Samples, deserialize_any);

impl<'de> Visitor<'de> for Samples<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of LoCoMo samples or one sample object")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let lines = Rc::clone(&self.ctx.lines);
        while let Some((line, sample)) = seq.next_element_seed(LineValue(&lines))? {
            push_sample(self.ctx, line, &sample)?;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        // The opening brace has been read: its line is the sample's.
        let line = self.ctx.line();
        let sample = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        push_sample(self.ctx, line, &sample)
    }
}

/// A non-empty trimmed string field.
fn text<'v>(obj: &'v Map<String, Value>, key: &str) -> Option<&'v str> {
    obj.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// An id field: a non-empty string, or a number as its text.
fn id(obj: &Map<String, Value>, key: &str) -> Option<String> {
    match obj.get(key) {
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => text(obj, key).map(str::to_string),
    }
}

/// The records of one sample, all on the sample's `line`: per session, the session record and
/// then its turns.
fn sample_items(line: u64, sample: &Value) -> Vec<Item> {
    let bad = |reason: String| BadRecord {
        line,
        reason: format!("line {line}: {reason}"),
    };
    let Value::Object(obj) = sample else {
        return vec![Err(bad(
            "sample is not a JSON object (each sample needs \"sample_id\" and \"conversation\")"
                .into(),
        ))];
    };
    let Some(sid) = id(obj, "sample_id") else {
        return vec![Err(bad(
            "sample has no \"sample_id\" (every sample needs one; its records are keyed by it)"
                .into(),
        ))];
    };
    let Some(Value::Object(conv)) = obj.get("conversation") else {
        return vec![Err(bad(format!(
            "sample {sid:?} has no \"conversation\" object (it holds speaker_a, speaker_b and \
             session_N turn lists)"
        )))];
    };
    let mut sessions: Vec<(u32, &Vec<Value>)> = conv
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse().ok()?;
            Some((n, v.as_array()?))
        })
        .collect();
    if sessions.is_empty() {
        return vec![Err(bad(format!(
            "sample {sid:?} has no sessions (give \"session_1\": [turns], …)"
        )))];
    }
    sessions.sort_by_key(|&(n, _)| n);
    let speakers = text(conv, "speaker_a").zip(text(conv, "speaker_b"));

    let mut items = Vec::new();
    for (n, turns) in sessions {
        let date_time = text(conv, &format!("session_{n}_date_time"));
        let at = date_time.and_then(parse_session_time);
        let session_ext = format!("locomo:{sid}:session_{n}");
        let mut content = format!("Conversation {sid}, session {n}");
        if let Some((a, b)) = speakers {
            content.push_str(&format!(" between {a} and {b}"));
        }
        if let Some(dt) = date_time {
            content.push_str(&format!(" on {dt}"));
        }
        let mut metadata = json!({ "sample_id": sid, "session": n });
        if let Some(dt) = date_time {
            metadata["date_time"] = json!(dt);
        }
        items.push(Ok((
            line,
            Record::Memory(Box::new(MemoryRecord {
                ext: Some(session_ext.clone()),
                kind: Some("session".into()),
                name: Some(format!("{sid} session {n}")),
                content,
                created_at: at,
                metadata: Some(metadata),
                ..Default::default()
            })),
        )));

        let mut previous: Option<String> = None;
        for (i, turn) in turns.iter().enumerate() {
            let where_ = format!("sample {sid:?} session {n} turn {}", i + 1);
            let Value::Object(turn) = turn else {
                items.push(Err(bad(format!(
                    "{where_} is not a JSON object (each turn needs \"dia_id\" and \"text\")"
                ))));
                continue;
            };
            let Some(dia_id) = id(turn, "dia_id") else {
                items.push(Err(bad(format!(
                    "{where_} has no \"dia_id\" (every turn needs a dia_id and a text)"
                ))));
                continue;
            };
            let caption = text(turn, "blip_caption");
            let said = match turn.get("text").and_then(Value::as_str).map(str::trim) {
                Some(t) if !t.is_empty() || caption.is_some() => t,
                _ => {
                    items.push(Err(bad(format!(
                        "{where_} ({dia_id}) has no \"text\" (every turn needs a dia_id and a \
                         text)"
                    ))));
                    continue;
                }
            };
            let speaker = text(turn, "speaker");
            let mut content = match speaker {
                Some(s) => format!("{s}: {said}"),
                None => said.to_string(),
            };
            if let Some(c) = caption {
                if !said.is_empty() {
                    content.push(' ');
                }
                content.push_str(&format!("[image: {c}]"));
            }
            let ext = format!("locomo:{sid}:{dia_id}");
            let mut metadata = json!({ "sample_id": sid, "session": n, "dia_id": dia_id });
            if let Some(s) = speaker {
                metadata["speaker"] = json!(s);
            }
            let mut links = vec![LinkRecord {
                to: Ref::Ext(session_ext.clone()),
                kind: "part_of".into(),
                weight: None,
            }];
            if let Some(prev) = previous.take() {
                links.push(LinkRecord {
                    to: Ref::Ext(prev),
                    kind: "follows".into(),
                    weight: None,
                });
            }
            items.push(Ok((
                line,
                Record::Memory(Box::new(MemoryRecord {
                    ext: Some(ext.clone()),
                    kind: Some("episode".into()),
                    content,
                    created_at: at.map(|t| t + i as Millis * 1000),
                    tags: speaker.map(str::to_lowercase).into_iter().collect(),
                    metadata: Some(metadata),
                    links,
                    ..Default::default()
                })),
            )));
            previous = Some(ext);
        }
    }
    items
}

/// LoCoMo's session time, "1:56 pm on 8 May, 2023", as UTC milliseconds. Also takes "May 8,
/// 2023", three-letter months and a 24-hour clock without am/pm.
fn parse_session_time(s: &str) -> Option<Millis> {
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let (time, date) = s.trim().split_once(" on ")?;
    let time = time.trim().to_ascii_lowercase();
    let (clock, half) = if let Some(t) = time.strip_suffix("am") {
        (t.trim_end(), Some(false))
    } else if let Some(t) = time.strip_suffix("pm") {
        (t.trim_end(), Some(true))
    } else {
        (time.as_str(), None)
    };
    let (h, m) = clock.split_once(':')?;
    let num = |s: &str, max_len: usize| -> Option<u32> {
        if s.is_empty() || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (h, m) = (num(h, 2)?, num(m, 2)?);
    let hour = match half {
        Some(pm) if (1..=12).contains(&h) => h % 12 + if pm { 12 } else { 0 },
        None if h < 24 => h,
        _ => return None,
    };
    if m > 59 {
        return None;
    }
    let date = date.replace(',', " ");
    let parts: Vec<&str> = date.split_whitespace().collect();
    let [a, b, year] = parts[..] else {
        return None;
    };
    let (day, month) = if a.bytes().all(|c| c.is_ascii_digit()) {
        (a, b)
    } else {
        (b, a)
    };
    let month = month.trim_end_matches('.').to_ascii_lowercase();
    let month = MONTHS
        .iter()
        .position(|name| month.len() >= 3 && name.starts_with(month.as_str()))?
        + 1;
    let (day, year) = (num(day, 2)?, num(year, 4)?);
    if year < 1000 {
        return None;
    }
    crate::model::parse_time(&format!(
        "{year:04}-{month:02}-{day:02}T{hour:02}:{m:02}:00Z"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Flow;
    use crate::formats::testing::{collect, reasons, sink_error_ends_the_read, stops_when_told};

    fn read_all(input: &str) -> crate::Result<Vec<Item>> {
        collect(|sink| read(&mut input.as_bytes(), sink))
    }

    fn memory(item: &Item) -> (u64, &MemoryRecord) {
        match item {
            Ok((line, Record::Memory(m))) => (*line, m),
            other => panic!("not a memory: {other:?}"),
        }
    }

    fn at(s: &str) -> Option<Millis> {
        crate::model::parse_time(s)
    }

    #[test]
    fn session_times_parse() {
        assert_eq!(
            parse_session_time("1:56 pm on 8 May, 2023"),
            at("2023-05-08T13:56:00Z")
        );
        assert_eq!(
            parse_session_time("10:37 am on 27 June, 2023"),
            at("2023-06-27T10:37:00Z")
        );
        assert_eq!(
            parse_session_time("12:05 am on 1 January, 2024"),
            at("2024-01-01T00:05:00Z")
        );
        assert_eq!(
            parse_session_time("12:30 pm on 29 February, 2024"),
            at("2024-02-29T12:30:00Z")
        );
        assert_eq!(
            parse_session_time(" 9:01PM on Sep 3 2022 "),
            at("2022-09-03T21:01:00Z")
        );
        assert_eq!(
            parse_session_time("18:20 on March 4, 2023"),
            at("2023-03-04T18:20:00Z")
        );
        for bad in [
            "",
            "yesterday",
            "1:56 pm",
            "13:00 pm on 8 May, 2023",
            "0:10 am on 8 May, 2023",
            "1:60 pm on 8 May, 2023",
            "1:56 pm on 31 June, 2023",
            "1:56 pm on 29 February, 2023",
            "1:56 pm on 8 Ma, 2023",
            "1:56 pm on 8 Mayo, 2023",
            "1:56 pm on 8 May",
            "1:56 pm on 8 May, 23",
        ] {
            assert_eq!(parse_session_time(bad), None, "{bad:?}");
        }
    }

    const SAMPLE: &str = r#"[
  {
    "qa": [{"question": "q", "answer": "a", "evidence": ["D1:1"], "category": 2}],
    "conversation": {
      "speaker_a": "Caroline",
      "speaker_b": "Melanie",
      "session_2_date_time": "10:37 am on 27 June, 2023",
      "session_2": [
        {"speaker": "Melanie", "dia_id": "D2:1", "text": "Back again!"}
      ],
      "session_10": [
        {"speaker": "Caroline", "dia_id": "D10:1", "text": "Late one"}
      ],
      "session_1_date_time": "1:56 pm on 8 May, 2023",
      "session_1": [
        {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel!"},
        {"speaker": "Melanie", "dia_id": "D1:2", "text": "Look at this",
         "img_url": ["https://example.org/x.jpg"], "blip_caption": "a photo of a dog"}
      ],
      "session_3_date_time": "9:00 am on 1 July, 2023"
    },
    "event_summary": {},
    "observation": {},
    "session_summary": {},
    "sample_id": "conv-1"
  }
]"#;

    #[test]
    fn sessions_and_turns_map_field_by_field() {
        let items = read_all(SAMPLE).expect("read");
        let exts: Vec<&str> = items
            .iter()
            .map(|i| memory(i).1.ext.as_deref().expect("ext"))
            .collect();
        assert_eq!(
            exts,
            vec![
                "locomo:conv-1:session_1",
                "locomo:conv-1:D1:1",
                "locomo:conv-1:D1:2",
                "locomo:conv-1:session_2",
                "locomo:conv-1:D2:1",
                "locomo:conv-1:session_10",
                "locomo:conv-1:D10:1",
            ]
        );
        assert!(items.iter().all(|i| memory(i).0 == 2));
        let session = at("2023-05-08T13:56:00Z");
        assert_eq!(
            *memory(&items[0]).1,
            MemoryRecord {
                ext: Some("locomo:conv-1:session_1".into()),
                kind: Some("session".into()),
                name: Some("conv-1 session 1".into()),
                content: "Conversation conv-1, session 1 between Caroline and Melanie on 1:56 pm \
                          on 8 May, 2023"
                    .into(),
                created_at: session,
                metadata: Some(json!({
                    "sample_id": "conv-1", "session": 1, "date_time": "1:56 pm on 8 May, 2023"
                })),
                ..Default::default()
            }
        );
        let part_of = |ext: &str| LinkRecord {
            to: Ref::Ext(ext.into()),
            kind: "part_of".into(),
            weight: None,
        };
        assert_eq!(
            *memory(&items[1]).1,
            MemoryRecord {
                ext: Some("locomo:conv-1:D1:1".into()),
                kind: Some("episode".into()),
                content: "Caroline: Hey Mel!".into(),
                created_at: session,
                tags: vec!["caroline".into()],
                metadata: Some(json!({
                    "sample_id": "conv-1", "session": 1, "dia_id": "D1:1", "speaker": "Caroline"
                })),
                links: vec![part_of("locomo:conv-1:session_1")],
                ..Default::default()
            }
        );
        let second = memory(&items[2]).1;
        assert_eq!(
            second.content,
            "Melanie: Look at this [image: a photo of a dog]"
        );
        assert_eq!(second.created_at, session.map(|t| t + 1000));
        assert_eq!(second.tags, vec!["melanie".to_string()]);
        assert_eq!(
            second.links,
            vec![
                part_of("locomo:conv-1:session_1"),
                LinkRecord {
                    to: Ref::Ext("locomo:conv-1:D1:1".into()),
                    kind: "follows".into(),
                    weight: None,
                }
            ]
        );
        // A new session starts a new chain.
        assert_eq!(
            memory(&items[4]).1.links,
            vec![part_of("locomo:conv-1:session_2")]
        );
        assert_eq!(memory(&items[3]).1.created_at, at("2023-06-27T10:37:00Z"));
        // A session without a date: no time, no "on …".
        let late = memory(&items[5]).1;
        assert_eq!(
            late.content,
            "Conversation conv-1, session 10 between Caroline and Melanie"
        );
        assert_eq!(late.created_at, None);
        assert_eq!(
            late.metadata,
            Some(json!({"sample_id": "conv-1", "session": 10}))
        );
        assert_eq!(memory(&items[6]).1.created_at, None);
    }

    #[test]
    fn one_sample_object_is_read_too() {
        let one = SAMPLE.trim().trim_start_matches('[').trim_end_matches(']');
        let items = read_all(one).expect("read");
        assert_eq!(items.len(), 7);
        assert_eq!(
            memory(&items[0]).1.name.as_deref(),
            Some("conv-1 session 1")
        );
    }

    #[test]
    fn bad_turns_and_samples_are_reported_and_reading_goes_on() {
        let input = r#"[
{"sample_id": "a", "conversation": {"speaker_a": "X", "speaker_b": "Y", "session_1": [
  {"speaker": "X", "dia_id": "D1:1", "text": "one"},
  {"speaker": "Y", "text": "no id"},
  {"speaker": "X", "dia_id": "D1:3"},
  "not a turn",
  {"speaker": "Y", "dia_id": "D1:5", "text": "five"}
]}},
{"conversation": {"session_1": []}},
7,
{"sample_id": "c"},
{"sample_id": "d", "conversation": {"speaker_a": "X"}},
{"sample_id": 5, "conversation": {"session_1": [{"dia_id": "D1:1", "text": "alone"}]}}
]"#;
        let items = read_all(input).expect("read");
        let shape: Vec<(u64, bool)> = items
            .iter()
            .map(|i| match i {
                Ok((line, _)) => (*line, true),
                Err(b) => (b.line, false),
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (2, true),
                (2, true),
                (2, false),
                (2, false),
                (2, false),
                (2, true),
                (9, false),
                (10, false),
                (11, false),
                (12, false),
                (13, true),
                (13, true),
            ]
        );
        let reasons = reasons(&items);
        assert_eq!(
            reasons[0],
            "line 2: sample \"a\" session 1 turn 2 has no \"dia_id\" (every turn needs a dia_id \
             and a text)"
        );
        assert!(
            reasons[1].contains("turn 3 (D1:3) has no \"text\""),
            "{}",
            reasons[1]
        );
        assert!(
            reasons[2].contains("turn 4 is not a JSON object"),
            "{}",
            reasons[2]
        );
        assert!(reasons[3].contains("no \"sample_id\""), "{}", reasons[3]);
        assert!(reasons[4].contains("not a JSON object"), "{}", reasons[4]);
        assert!(reasons[5].contains("no \"conversation\""), "{}", reasons[5]);
        assert!(reasons[6].contains("no sessions"), "{}", reasons[6]);
        // The turn after bad ones follows the last good one.
        let five = memory(&items[5]).1;
        assert_eq!(five.links[1].to, Ref::Ext("locomo:a:D1:1".into()));
        assert_eq!(five.created_at, None);
        // Numeric sample ids and turns without a speaker.
        let alone = memory(&items[11]).1;
        assert_eq!(alone.ext.as_deref(), Some("locomo:5:D1:1"));
        assert_eq!(alone.content, "alone");
        assert!(alone.tags.is_empty());
        assert_eq!(memory(&items[10]).1.content, "Conversation 5, session 1");
    }

    #[test]
    fn stop_and_sink_errors_end_reading() {
        stops_when_told(|sink| read(&mut SAMPLE.as_bytes(), sink), 3);
        sink_error_ends_the_read(|sink| read(&mut SAMPLE.as_bytes(), sink), 1);
    }

    #[test]
    fn unusable_sources_are_whole_source_errors() {
        for (input, want) in [
            ("\"text\"", "line 1"),
            (
                "[{\"sample_id\": \"a\"},\n{\"sample_id\": \"b\",,}]",
                "line 2",
            ),
            ("[", "line 1"),
            ("", "line 1"),
            ("[] []", "line 1"),
        ] {
            match read_all(input) {
                Err(e @ crate::Error::InvalidArgument { .. }) => {
                    let e = e.to_string();
                    assert!(e.contains(want), "{input:?}: {e}");
                    assert!(e.contains("LoCoMo"), "{input:?}: {e}");
                }
                other => panic!("{input:?}: expected an error, got {other:?}"),
            }
        }
        assert!(read_all("[]").expect("empty array").is_empty());
    }

    /// What reading a whole LoCoMo file gave.
    #[derive(Default)]
    struct Tally {
        samples: Vec<String>,
        sessions: usize,
        turns: usize,
        bad: usize,
        undated: usize,
        /// Turns carrying a shared photo's caption.
        captioned: usize,
        first: Option<(u64, MemoryRecord)>,
        second: Option<MemoryRecord>,
    }

    /// Reads a LoCoMo file through, checking what holds for any good file: only session and
    /// episode memories, each turn part of its session's record, turns of a session in time
    /// order.
    fn tally(path: &std::path::Path) -> Tally {
        let file = std::fs::File::open(path).expect("open");
        let mut input = std::io::BufReader::new(file);
        let mut t = Tally::default();
        let mut last_at: Option<Millis> = None;
        let mut session_ext = String::new();
        read(&mut input, &mut |item| {
            match item {
                Ok((line, Record::Memory(m))) => {
                    let sample = m.metadata.as_ref().expect("metadata")["sample_id"]
                        .as_str()
                        .expect("sample id")
                        .to_string();
                    if t.samples.last() != Some(&sample) {
                        t.samples.push(sample);
                    }
                    match m.kind.as_deref() {
                        Some("session") => {
                            t.sessions += 1;
                            t.undated += usize::from(m.created_at.is_none());
                            last_at = None;
                            session_ext = m.ext.clone().expect("session ext");
                        }
                        Some("episode") => {
                            t.turns += 1;
                            t.captioned += usize::from(m.content.contains("[image: "));
                            assert_eq!(m.links[0].to, Ref::Ext(session_ext.clone()), "{m:?}");
                            // Turns of a session keep their order in time.
                            assert!(m.created_at.is_some());
                            assert!(last_at.is_none() || m.created_at > last_at, "{m:?}");
                            last_at = m.created_at;
                        }
                        other => panic!("unexpected kind {other:?}"),
                    }
                    if t.first.is_none() {
                        t.first = Some((line, *m));
                    } else if t.second.is_none() {
                        t.second = Some(*m);
                    }
                }
                Ok(other) => panic!("unexpected record {other:?}"),
                Err(_) => t.bad += 1,
            }
            Ok(Flow::Continue)
        })
        .expect("read the file");
        t
    }

    #[test]
    fn reads_the_committed_sample() {
        let t = tally(&test_data::sample());
        assert_eq!(t.samples, ["sample-1", "sample-2"]);
        assert_eq!((t.sessions, t.turns, t.bad, t.undated), (3, 15, 0, 0));
        assert_eq!(t.captioned, 1);
        let (line, first) = t.first.expect("a first record");
        assert_eq!(line, 2);
        assert_eq!(first.ext.as_deref(), Some("locomo:sample-1:session_1"));
        assert_eq!(first.name.as_deref(), Some("sample-1 session 1"));
        assert_eq!(
            first.content,
            "Conversation sample-1, session 1 between Ana and Ben on 4:10 pm on 12 March, 2024"
        );
        assert_eq!(first.created_at, at("2024-03-12T16:10:00Z"));
        let second = t.second.expect("a second record");
        assert_eq!(second.ext.as_deref(), Some("locomo:sample-1:D1:1"));
        assert_eq!(
            second.content,
            "Ana: Hi Ben! I finally signed up for the pottery class at the community centre."
        );
    }

    #[test]
    fn reads_the_real_locomo10() {
        let Some(path) = test_data::locomo10("formats::locomo::reads_the_real_locomo10") else {
            return;
        };
        let t = tally(&path);
        assert_eq!(
            t.samples,
            [
                "conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47",
                "conv-48", "conv-49", "conv-50"
            ]
        );
        assert_eq!((t.sessions, t.turns, t.bad, t.undated), (272, 5882, 0, 0));
        let (line, first) = t.first.expect("a first record");
        assert_eq!(line, 2);
        assert_eq!(first.ext.as_deref(), Some("locomo:conv-26:session_1"));
        assert_eq!(first.kind.as_deref(), Some("session"));
        assert_eq!(first.name.as_deref(), Some("conv-26 session 1"));
        assert_eq!(
            first.content,
            "Conversation conv-26, session 1 between Caroline and Melanie on 1:56 pm on 8 May, 2023"
        );
        assert_eq!(first.created_at, at("2023-05-08T13:56:00Z"));
        let second = t.second.expect("a second record");
        assert_eq!(second.ext.as_deref(), Some("locomo:conv-26:D1:1"));
        assert_eq!(
            second.content,
            "Caroline: Hey Mel! Good to see you! How have you been?"
        );
    }
}

/// Test inputs in LoCoMo's form: the committed sample, always there, and LoCoMo's own
/// `locomo10.json` (CC BY-NC 4.0, not shipped), when it is around.
#[cfg(test)]
pub(crate) mod test_data {
    use std::io::Write;
    use std::path::{Path, PathBuf};

    /// `data/locomo/sample.json`: two made-up conversations in LoCoMo's shape (see
    /// `data/README.md`).
    pub(crate) fn sample() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/locomo/sample.json")
    }

    /// LoCoMo's `locomo10.json` at `MNEMOGRAPH_LOCOMO`, or in the data folder beside the
    /// project. When it is not there: `None`, and a SKIPPED line naming `test` on stderr.
    #[allow(
        clippy::disallowed_methods,
        reason = "a test input's location, not configuration"
    )]
    pub(crate) fn locomo10(test: &str) -> Option<PathBuf> {
        let path = std::env::var_os("MNEMOGRAPH_LOCOMO")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/locomo/locomo10.json")
            });
        if path.is_file() {
            return Some(path);
        }
        // Written to the process's stderr itself, which the test harness does not capture, so
        // the skip shows in every run.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {test}: LoCoMo's locomo10.json not found at {} (set MNEMOGRAPH_LOCOMO to \
             its path); only the committed sample was checked",
            path.display()
        );
        None
    }
}
