//! Guessing a source's import format from its file name and first bytes, with cheap searches
//! that do not need the bytes to parse (the head may end in the middle of a record).

use crate::formats::InFormat;

/// How much of the head is looked at.
const HEAD_BYTES: usize = 64 << 10;
/// How near the start MemoryGraph's `format_version` must be.
const VERSION_NEAR: usize = 4 << 10;

/// The format of a source from its first bytes (up to 64 KiB) and its file name, if any.
/// `None` when nothing fits or the signs are not clear.
pub fn detect(head: &[u8], file_name: Option<&str>) -> Option<InFormat> {
    if let Some(name) = file_name {
        let name = name.to_ascii_lowercase();
        if [".md", ".markdown", ".txt"]
            .iter()
            .any(|e| name.ends_with(e))
        {
            return Some(InFormat::Markdown);
        }
    }
    let head = &head[..head.len().min(HEAD_BYTES)];
    let head = head.strip_prefix(crate::formats::BOM).unwrap_or(head);
    let start = head.iter().position(|b| !b.is_ascii_whitespace())?;
    let body = &head[start..];
    match body[0] {
        b'{' | b'[' => json(body),
        _ => is_text(body).then_some(InFormat::Markdown),
    }
}

/// A JSON document or JSON lines, by the keys near the start.
fn json(body: &[u8]) -> Option<InFormat> {
    let near = &body[..body.len().min(VERSION_NEAR)];
    if body[0] == b'{'
        && has_key(near, "format_version")
        && (has_key(body, "memories") || has_key(body, "relationships"))
    {
        return Some(InFormat::MemoryGraph);
    }
    if body[0] == b'{' {
        let first = body.split(|&b| b == b'\n').next().unwrap_or(body);
        if has_key(first, "mnemograph")
            || (has_pair(first, "type", "header") && has_pair(first, "format", "mnemograph"))
        {
            return Some(InFormat::Mnemograph);
        }
        let typed = has_key(first, "type");
        if has_pair(first, "type", "entity")
            || (has_pair(first, "type", "relation") && has_key(first, "relationType"))
            || (!typed && has_key(first, "name") && has_key(first, "entityType"))
            || (!typed && has_key(first, "relationType") && has_key(first, "from"))
        {
            return Some(InFormat::McpMemory);
        }
        if has_pair(first, "type", "memory")
            || (has_pair(first, "type", "relation") && has_key(first, "kind"))
        {
            return Some(InFormat::Mnemograph);
        }
    }
    let conversation = has_key(body, "conversation") && find(body, b"\"session_1").is_some();
    // A sample opens with its question list, which can push the conversation past the head.
    let questions = has_key(body, "qa")
        && has_key(body, "question")
        && has_key(body, "evidence")
        && has_key(body, "category");
    if conversation || questions {
        return Some(InFormat::Locomo);
    }
    None
}

/// Valid UTF-8 (a character cut at the end of the head is fine) without NUL bytes.
fn is_text(body: &[u8]) -> bool {
    if body.contains(&0) {
        return false;
    }
    match std::str::from_utf8(body) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Positions just after each `"key"` followed by optional whitespace and a colon.
fn key_ends<'h>(hay: &'h [u8], key: &str) -> impl Iterator<Item = usize> + 'h {
    let quoted = format!("\"{key}\"").into_bytes();
    let mut from = 0;
    std::iter::from_fn(move || {
        while let Some(i) = find(&hay[from..], &quoted) {
            let mut j = from + i + quoted.len();
            from = j;
            while hay.get(j).is_some_and(u8::is_ascii_whitespace) {
                j += 1;
            }
            if hay.get(j) == Some(&b':') {
                return Some(j + 1);
            }
        }
        None
    })
}

fn has_key(hay: &[u8], key: &str) -> bool {
    key_ends(hay, key).next().is_some()
}

/// Whether `"key": "value"` occurs.
fn has_pair(hay: &[u8], key: &str, value: &str) -> bool {
    let quoted = format!("\"{value}\"").into_bytes();
    key_ends(hay, key).any(|mut j| {
        while hay.get(j).is_some_and(u8::is_ascii_whitespace) {
            j += 1;
        }
        hay[j..].starts_with(&quoted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use InFormat::*;

    fn d(head: &str) -> Option<InFormat> {
        detect(head.as_bytes(), None)
    }

    #[test]
    fn markdown_by_extension_first() {
        let json = br#"{"type":"entity","name":"A","entityType":"x"}"#;
        for name in ["notes.md", "dir/README.MD", "a.markdown", "log.txt"] {
            assert_eq!(detect(json, Some(name)), Some(Markdown), "{name}");
        }
        assert_eq!(detect(json, Some("memory.jsonl")), Some(McpMemory));
        assert_eq!(detect(json, Some("md")), Some(McpMemory));
    }

    #[test]
    fn mcp_memory_lines() {
        assert_eq!(
            d(
                r#"{"type":"entity","name":"John_Smith","entityType":"person","observations":[]}
{"type":"relation","from":"John_Smith","to":"Anthropic","relationType":"works_at"}"#
            ),
            Some(McpMemory)
        );
        assert_eq!(
            d(r#"{"type": "relation", "from": "a", "to": "b", "relationType": "knows"}"#),
            Some(McpMemory)
        );
        assert_eq!(
            d("\n\n  {\"name\":\"A\",\"entityType\":\"person\",\"observations\":[\"x\"]}\n"),
            Some(McpMemory)
        );
        assert_eq!(
            d(r#"{"from":"a","to":"b","relationType":"knows"}"#),
            Some(McpMemory)
        );
        // The head may end inside the first line.
        assert_eq!(
            d(r#"{"type":"entity","name":"A","entityType":"x","observations":["cut he"#),
            Some(McpMemory)
        );
    }

    #[test]
    fn mnemograph_lines() {
        assert_eq!(d(r#"{"mnemograph":{"version":1}}"#), Some(Mnemograph));
        assert_eq!(
            d(r#"{"type":"header","format":"mnemograph","version":1,"exported_at":"x"}"#),
            Some(Mnemograph)
        );
        assert_eq!(
            d(r#"{"type":"memory","id":"m1","kind":"note","content":"x"}"#),
            Some(Mnemograph)
        );
        assert_eq!(
            d(r#"{"type":"relation","from":"m1","to":"m2","kind":"about"}"#),
            Some(Mnemograph)
        );
        // A later line does not decide.
        assert_eq!(
            d("{\"type\":\"memory\",\"content\":\"x\"}\n{\"type\":\"entity\",\"name\":\"A\"}"),
            Some(Mnemograph)
        );
    }

    #[test]
    fn memorygraph_exports() {
        assert_eq!(
            d(
                "{\n  \"format_version\": \"2.0\",\n  \"export_version\": \"1.0\",\n  \"memories\": [\n    {\"id\": \"a\", \"type\": \"solution\", \"title\": \"cut"
            ),
            Some(MemoryGraph)
        );
        assert_eq!(
            d(r#"{"format_version":"2.0","relationships":[]}"#),
            Some(MemoryGraph)
        );
        // A version without the arrays is not enough.
        assert_eq!(d(r#"{"format_version":"2.0","nodes":[]}"#), None);
        // The version far from the start does not count.
        let far = format!(
            "{{\"x\": \"{}\", \"format_version\": \"2.0\", \"memories\": []}}",
            "a".repeat(5_000)
        );
        assert_eq!(d(&far), None);
    }

    #[test]
    fn locomo_transcripts() {
        assert_eq!(
            d(
                r#"[{"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": [{"speaker": "A", "dia_id": "D1:1", "te"#
            ),
            Some(Locomo)
        );
        assert_eq!(
            d(r#"{"sample_id": "s", "conversation": {"session_1": []}}"#),
            Some(Locomo)
        );
        assert_eq!(
            d(
                r#"[{"qa": [{"question": "When?", "answer": "May", "evidence": ["D1:3"], "category": 2},"#
            ),
            Some(Locomo)
        );
        assert_eq!(d(r#"[{"conversation": []}]"#), None);
    }

    #[test]
    fn the_committed_locomo_sample() {
        let bytes = std::fs::read(crate::formats::locomo::test_data::sample()).unwrap();
        assert_eq!(detect(&bytes, Some("sample.json")), Some(Locomo));
        assert_eq!(detect(&bytes, None), Some(Locomo));
        // Only the first questions fit in a small head.
        assert_eq!(detect(&bytes[..512], None), Some(Locomo));
    }

    #[test]
    fn the_real_locomo10_head() {
        let Some(path) =
            crate::formats::locomo::test_data::locomo10("formats::detect::the_real_locomo10_head")
        else {
            return;
        };
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(
            detect(&bytes[..HEAD_BYTES], Some("locomo10.json")),
            Some(Locomo)
        );
        // Only the questions fit in a small head.
        assert_eq!(detect(&bytes[..4096], None), Some(Locomo));
    }

    #[test]
    fn plain_text_is_markdown() {
        assert_eq!(d("# Title\n\nSome text."), Some(Markdown));
        assert_eq!(d("Just words"), Some(Markdown));
        assert_eq!(d("\u{feff}Text after a byte-order mark"), Some(Markdown));
        // A character cut at the end of the head.
        let cut = "café".as_bytes();
        assert_eq!(detect(&cut[..cut.len() - 1], None), Some(Markdown));
    }

    #[test]
    fn unknown_or_ambiguous_is_none() {
        assert_eq!(d(""), None);
        assert_eq!(d(" \n\t\n"), None);
        assert_eq!(detect(b"\xff\xfe\x00a", None), None);
        assert_eq!(detect(b"text\xffmore", None), None);
        assert_eq!(detect(b"PK\x03\x04\x00\x00", None), None);
        assert_eq!(d(r#"{"foo": 1}"#), None);
        assert_eq!(d("[1, 2, 3]"), None);
        assert_eq!(d(r#"{"type":"relation","from":"a","to":"b"}"#), None);
        assert_eq!(d(r#"{"type":"note","text":"entity"}"#), None);
        // Words in values are not keys.
        assert_eq!(d(r#"{"text": "\"type\" is \"entity\""}"#), None);
    }

    #[test]
    fn key_search() {
        assert!(has_key(br#"{"a" : 1}"#, "a"));
        assert!(!has_key(br#"{"b": "a"}"#, "a"));
        assert!(has_pair(br#"{"type" :  "entity"}"#, "type", "entity"));
        assert!(!has_pair(br#"{"type": "entityish"}"#, "type", "entity"));
        assert!(has_pair(
            br#"{"type": "x", "type":"entity"}"#,
            "type",
            "entity"
        ));
        assert!(!has_pair(
            br#"{"kind": "entity", "type": "memory"}"#,
            "type",
            "entity"
        ));
    }
}
