//! The result budget: a tool result, inline or a task's, takes at most so many tokens of compact
//! JSON, its text and structured content together. What does not fit stays with the server —
//! the best items first are shown, the rest of each cut list (and the rest of each clipped
//! text) is behind a `resource_link` the host can read page by page — and the result says how
//! many there were.
//!
//! [`fit`] cuts a JSON value and says what it cut, [`page`] serves one page of what a link
//! names, [`cut`] makes a tool result of a cut value and its links. Where full results are kept
//! and how links are read is the handler's business.

use rmcp::model::{CallToolResult, ContentBlock, Resource};
use serde_json::{Map, Value, json};

/// Tokens a tool result may take unless the server or the call says less.
pub(crate) const DEFAULT_TOKENS: usize = 4_000;

/// Fewest tokens a call may ask for: room for a few items and the links to the rest.
pub(crate) const MIN_TOKENS: usize = 500;

/// Request `_meta` key by which a call asks for a smaller budget (in tokens).
pub(crate) const REQUEST_KEY: &str = "mnemograph/resultBudgetTokens";

/// Key of the note a cut result carries at its top level.
pub(crate) const NOTE_KEY: &str = "cut";

/// Bytes of compact JSON per token (the estimate `tools/list` is held to as well).
const BYTES_PER_TOKEN: usize = 4;

/// Shortest a clipped text is cut to, in bytes.
const MIN_TEXT: usize = 64;

/// Most `resource_link` blocks a cut result carries (its note lists every cut).
const MAX_LINKS: usize = 4;

/// Bytes that `tokens` tokens allow.
pub(crate) fn bytes(tokens: usize) -> usize {
    tokens * BYTES_PER_TOKEN
}

/// What [`fit`] cut: a list shown up to `shown` of `total` items, or a text shown up to `shown`
/// of `total` bytes, at a JSON pointer into the full value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cut {
    pub(crate) pointer: String,
    pub(crate) shown: usize,
    pub(crate) total: usize,
    pub(crate) text: bool,
}

impl Cut {
    /// The field as a reader names it (`nodes`, `memories/0/content`).
    pub(crate) fn field(&self) -> &str {
        self.pointer.trim_start_matches('/')
    }

    /// What the link to the rest holds, for its description.
    pub(crate) fn describe(&self) -> String {
        if self.text {
            format!(
                "{}: the whole text ({} bytes; {} shown)",
                self.field(),
                self.total,
                self.shown
            )
        } else {
            format!(
                "{}: items {} to {} of {} (paged)",
                self.field(),
                self.shown + 1,
                self.total,
                self.total
            )
        }
    }
}

/// Compact JSON length of `v`, counted as it is written rather than kept.
pub(crate) fn size<T: serde::Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, v).map_or(0, |()| count.0)
}

/// Cuts `value` until its compact JSON takes at most `room` bytes: the longest lists lose items
/// from their end (each keeps at least its first item while another cut can help), then the
/// longest texts are clipped. Returns what was cut, outermost lists first; an empty list when
/// the value fit. A value that cannot be cut small enough (a huge object of small fields) is
/// left as cut as it can be.
pub(crate) fn fit(value: &mut Value, room: usize) -> Vec<Cut> {
    let mut cuts: Vec<Cut> = Vec::new();
    let mut total = size(value);
    // Lists down to their first item, then long texts clipped, then lists down to nothing.
    total = shorten_lists(value, room, total, 1, &mut cuts);
    while total > room {
        let Some((pointer, len)) = longest_text(value) else {
            break;
        };
        let Some(Value::String(s)) = value.pointer_mut(&pointer) else {
            break;
        };
        // Sizes count JSON escapes: keep the share of the text its escaped form allows.
        let escaped = size(s.as_str());
        let allowed = room.saturating_sub(total - escaped).saturating_sub(8);
        let mut keep = (len as u128 * allowed as u128 / escaped.max(1) as u128) as usize;
        keep = keep.clamp(MIN_TEXT, len);
        while !s.is_char_boundary(keep) {
            keep -= 1;
        }
        if keep >= len {
            break;
        }
        s.truncate(keep);
        s.push('…');
        record(&mut cuts, &pointer, keep, len, true);
        total = size(value);
    }
    shorten_lists(value, room, total, 0, &mut cuts);
    cuts.sort_by(|a, b| {
        a.pointer
            .len()
            .cmp(&b.pointer.len())
            .then(a.pointer.cmp(&b.pointer))
    });
    cuts
}

/// Drops items from the end of the largest lists, each down to `floor` items, until `value`
/// takes at most `room` bytes; returns its size then.
fn shorten_lists(
    value: &mut Value,
    room: usize,
    mut total: usize,
    floor: usize,
    cuts: &mut Vec<Cut>,
) -> usize {
    while total > room {
        let Some((pointer, len)) = largest_list(value, floor) else {
            break;
        };
        let excess = total - room;
        let Some(list) = value.pointer_mut(&pointer).and_then(Value::as_array_mut) else {
            break;
        };
        let mut freed = 0usize;
        let mut keep = len;
        while keep > floor && freed < excess {
            keep -= 1;
            freed += size(&list[keep]) + 1;
        }
        list.truncate(keep);
        record(cuts, &pointer, keep, len, false);
        total = size(value);
    }
    total
}

/// Notes a cut; a list cut twice keeps its first total.
fn record(cuts: &mut Vec<Cut>, pointer: &str, shown: usize, total: usize, text: bool) {
    match cuts.iter_mut().find(|c| c.pointer == pointer) {
        Some(c) => c.shown = shown,
        None => cuts.push(Cut {
            pointer: pointer.to_owned(),
            shown,
            total,
            text,
        }),
    }
}

/// The list with the most bytes that has more than `floor` items: its pointer and length.
fn largest_list(value: &Value, floor: usize) -> Option<(String, usize)> {
    let mut best: Option<(String, usize, usize)> = None;
    walk(value, &mut String::new(), &mut |pointer, v| {
        if let Value::Array(items) = v
            && items.len() > floor
        {
            let bytes = size(v);
            if best.as_ref().is_none_or(|b| bytes > b.2) {
                best = Some((pointer.to_owned(), items.len(), bytes));
            }
        }
    });
    best.map(|(pointer, len, _)| (pointer, len))
}

/// The longest text that can still be clipped: its pointer and length in bytes.
fn longest_text(value: &Value) -> Option<(String, usize)> {
    let mut best: Option<(String, usize)> = None;
    walk(value, &mut String::new(), &mut |pointer, v| {
        if let Value::String(s) = v
            && s.len() > MIN_TEXT + 1
            && best.as_ref().is_none_or(|b| s.len() > b.1)
        {
            best = Some((pointer.to_owned(), s.len()));
        }
    });
    best
}

/// Calls `f` on every value below `v` (not `v` itself) with its JSON pointer.
fn walk(v: &Value, pointer: &mut String, f: &mut impl FnMut(&str, &Value)) {
    let at = pointer.len();
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointer.push('/');
                pointer.push_str(&i.to_string());
                f(pointer, item);
                walk(item, pointer, f);
                pointer.truncate(at);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                pointer.push('/');
                pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
                f(pointer, item);
                walk(item, pointer, f);
                pointer.truncate(at);
            }
        }
        _ => {}
    }
}

/// The note a cut result carries (under [`NOTE_KEY`]): per cut, the field, how much is shown
/// of how much, and the link to the rest.
pub(crate) fn note(cuts: &[Cut], link: impl Fn(&Cut) -> String) -> Value {
    Value::Array(
        cuts.iter()
            .map(|c| {
                let mut o = Map::new();
                o.insert("field".into(), json!(c.field()));
                o.insert("shown".into(), json!(c.shown));
                o.insert("total".into(), json!(c.total));
                if c.text {
                    o.insert("unit".into(), json!("bytes"));
                }
                o.insert("rest".into(), json!(link(c)));
                Value::Object(o)
            })
            .collect(),
    )
}

/// One page of what a link names in `full` (the kept result): the items of the list at
/// `pointer` from `from`, or the text there from byte `from`, as many as `room` bytes allow
/// (at least one item); with `next`, the offset the following page starts at.
pub(crate) fn page(full: &Value, pointer: &str, from: usize, room: usize) -> Option<Page> {
    match full.pointer(pointer)? {
        Value::Array(items) => {
            let from = from.min(items.len());
            let mut used = 64usize;
            let mut to = from;
            while to < items.len() {
                let n = size(&items[to]) + 1;
                if to > from && used + n > room {
                    break;
                }
                used += n;
                to += 1;
            }
            let mut shown: Vec<Value> = items[from..to].to_vec();
            // A single item over the room is cut itself, so that no page breaks the budget.
            if let [one] = shown.as_mut_slice() {
                fit(one, room.saturating_sub(64));
            }
            Some(Page {
                body: json!({"from": from, "total": items.len(), "items": shown}),
                next: (to < items.len()).then_some(to),
            })
        }
        Value::String(s) => {
            let from = floor_boundary(s, from.min(s.len()));
            // JSON escapes can double a text's bytes: half the room is sure to fit.
            let to = floor_boundary(s, (from + room / 2).min(s.len()));
            let to = if to == from && from < s.len() {
                ceil_boundary(s, from + 1)
            } else {
                to
            };
            Some(Page {
                body: json!({"from": from, "total": s.len(), "text": &s[from..to]}),
                next: (to < s.len()).then_some(to),
            })
        }
        other => Some(Page {
            body: other.clone(),
            next: None,
        }),
    }
}

/// A page of a kept result and where the next starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Page {
    pub(crate) body: Value,
    pub(crate) next: Option<usize>,
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i.min(s.len())
}

/// Bytes a tool result takes in a client's window: its content blocks and its structured
/// content, as compact JSON.
pub(crate) fn result_bytes(r: &CallToolResult) -> usize {
    content_bytes(&r.content) + r.structured_content.as_ref().map_or(0, size)
}

/// [`size`] of content blocks, a plain text block (no annotations, no `_meta`) counted from its
/// text without writing its JSON: a result's text is its structured content written out, so
/// escaping it only to count was a pass over the whole result.
fn content_bytes(blocks: &[ContentBlock]) -> usize {
    // `{"type":"text","text":` and `}` around the string.
    const TEXT_BLOCK: usize = 23;
    let items: usize = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) if t.meta.is_none() && t.annotations.is_none() => {
                TEXT_BLOCK + string_bytes(&t.text)
            }
            other => size(other),
        })
        .sum();
    // The brackets and the commas between items.
    items + 2 + blocks.len().saturating_sub(1)
}

/// Bytes of `s` as a JSON string, quotes and escapes included, as serde_json writes it.
fn string_bytes(s: &str) -> usize {
    let escapes: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    s.len() + 2 + escapes
}

/// Whether `r` must be cut to take at most `tokens`: a result (not an error) over the budget
/// that has structured content to cut.
pub(crate) fn over(r: &CallToolResult, tokens: usize) -> bool {
    r.is_error != Some(true) && r.structured_content.is_some() && result_bytes(r) > bytes(tokens)
}

/// `r` cut to take at most `tokens`: its structured content (and the same as text) cut by
/// [`fit`], with a note of what was cut under [`NOTE_KEY`] and `resource_link`s to the rest
/// (`link` makes a cut's address).
pub(crate) fn cut(
    r: &CallToolResult,
    tokens: usize,
    link: impl Fn(&Cut) -> String,
) -> CallToolResult {
    let full = r.structured_content.clone().unwrap_or(Value::Null);
    let budget = bytes(tokens);
    // The text block repeats the structured content: each gets half, less the links.
    let mut room = budget / 2;
    loop {
        let mut v = full.clone();
        let cuts = fit(&mut v, room);
        if let Value::Object(o) = &mut v {
            o.insert(NOTE_KEY.into(), note(&cuts, &link));
        }
        let mut out = CallToolResult::structured(v);
        out.meta = r.meta.clone();
        for c in cuts.iter().take(MAX_LINKS) {
            let mut res = Resource::new(link(c), format!("rest of {}", c.field()));
            res.description = Some(c.describe());
            res.mime_type = Some("application/json".into());
            out.content.push(ContentBlock::resource_link(res));
        }
        if result_bytes(&out) <= budget || room < 256 {
            return out;
        }
        room = room * 4 / 5;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Value {
        let list: Vec<Value> = (0..n)
            .map(|i| json!({"id": format!("m_{i:04}"), "content": "x".repeat(40), "score": 1.0}))
            .collect();
        json!({"reached": n, "nodes": list})
    }

    #[test]
    fn content_is_counted_as_serde_json_writes_it() {
        let texts = [
            String::new(),
            "plain".to_owned(),
            "quotes \" and \\ back\\slash".to_owned(),
            "\u{8}\t\n\u{c}\r: short escapes".to_owned(),
            (0u8..0x20).map(char::from).collect::<String>() + "\u{7f}",
            "ünïcödé 咖啡 🍵 \u{2028}".to_owned(),
            nodes(40).to_string(),
        ];
        for text in &texts {
            let block = ContentBlock::text(text.clone());
            assert_eq!(
                content_bytes(std::slice::from_ref(&block)),
                size(&[&block]),
                "{text:?}"
            );
        }
        let mut annotated = rmcp::model::TextContent::new("with meta");
        annotated.meta = Some(rmcp::model::MetaObject::default());
        let blocks: Vec<ContentBlock> = texts
            .iter()
            .map(|t| ContentBlock::text(t.clone()))
            .chain([
                ContentBlock::Text(annotated),
                ContentBlock::image("aGk=", "image/png"),
            ])
            .collect();
        assert_eq!(content_bytes(&blocks), size(&blocks));
        assert_eq!(content_bytes(&[]), size(&Vec::<ContentBlock>::new()));
        let r = CallToolResult::structured(nodes(5));
        assert_eq!(
            result_bytes(&r),
            size(&r.content) + size(r.structured_content.as_ref().unwrap())
        );
    }

    #[test]
    fn a_value_that_fits_is_left_alone() {
        let mut v = nodes(3);
        let before = v.clone();
        assert!(fit(&mut v, 10_000).is_empty());
        assert_eq!(v, before);
    }

    #[test]
    fn the_longest_list_loses_its_last_items_and_the_cut_says_how_many_there_were() {
        let full = nodes(1_000);
        let mut v = full.clone();
        let cuts = fit(&mut v, 4_000);
        assert!(size(&v) <= 4_000, "{}", size(&v));
        assert_eq!(cuts.len(), 1);
        let c = &cuts[0];
        assert_eq!(
            (c.pointer.as_str(), c.total, c.text),
            ("/nodes", 1_000, false)
        );
        let shown = v["nodes"].as_array().unwrap();
        assert_eq!(shown.len(), c.shown);
        assert!(c.shown > 20, "{}", c.shown);
        // The best first: the kept items are the first of the full list.
        assert_eq!(shown[..], full["nodes"].as_array().unwrap()[..c.shown]);
        assert_eq!(v["reached"], 1_000);
    }

    #[test]
    fn a_long_text_is_clipped_at_a_character_boundary_when_lists_cannot_help() {
        let text = "é".repeat(10_000);
        let mut v = json!({"memories": [{"id": "m_1", "content": text}]});
        let cuts = fit(&mut v, 2_000);
        assert!(size(&v) <= 2_000, "{}", size(&v));
        assert_eq!(cuts.len(), 1);
        assert!(cuts[0].text);
        assert_eq!(cuts[0].pointer, "/memories/0/content");
        assert_eq!(cuts[0].total, 20_000);
        let shown = v["memories"][0]["content"].as_str().unwrap();
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn pages_walk_a_list_and_a_text_to_their_end_within_the_room() {
        let full = nodes(500);
        let mut from = 0;
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let p = page(&full, "/nodes", from, 3_000).unwrap();
            assert!(size(&p.body) <= 3_000, "{}", size(&p.body));
            seen += p.body["items"].as_array().unwrap().len();
            pages += 1;
            match p.next {
                Some(n) => from = n,
                None => break,
            }
        }
        assert_eq!(seen, 500);
        assert!(pages > 5);
        let text = json!({"t": "ab€".repeat(3_000)});
        let (mut from, mut whole) = (0, String::new());
        loop {
            let p = page(&text, "/t", from, 2_000).unwrap();
            assert!(size(&p.body) <= 2_000);
            whole.push_str(p.body["text"].as_str().unwrap());
            match p.next {
                Some(n) => from = n,
                None => break,
            }
        }
        assert_eq!(whole, text["t"].as_str().unwrap());
        assert!(page(&full, "/nowhere", 0, 1_000).is_none());
    }

    #[test]
    fn a_cut_result_fits_with_its_note_and_links() {
        let r = CallToolResult::structured(nodes(2_000));
        assert!(over(&r, 4_000));
        let out = cut(&r, 4_000, |c| {
            format!("mnemograph://results/t{}?from={}", c.pointer, c.shown)
        });
        assert!(result_bytes(&out) <= bytes(4_000), "{}", result_bytes(&out));
        let v = out.structured_content.as_ref().unwrap();
        assert_eq!(v[NOTE_KEY][0]["field"], "nodes");
        assert_eq!(v[NOTE_KEY][0]["total"], 2_000);
        let shown = v["nodes"].as_array().unwrap().len();
        assert_eq!(v[NOTE_KEY][0]["shown"], shown);
        assert_eq!(
            v[NOTE_KEY][0]["rest"],
            format!("mnemograph://results/t/nodes?from={shown}")
        );
        let link = out
            .content
            .iter()
            .find_map(|c| c.as_resource_link())
            .unwrap();
        assert_eq!(link.uri, v[NOTE_KEY][0]["rest"]);
        assert!(!over(&out, 4_000));
        assert!(!over(&CallToolResult::structured(nodes(3)), 4_000));
    }
}
