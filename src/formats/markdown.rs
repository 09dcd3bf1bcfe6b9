//! Reader for Markdown and plain text: a record for the document, then chunks of it split by
//! ATX heading and paragraph, each linked to the document.

use std::io::BufRead;

use serde_json::json;

use crate::formats::{Flow, LinkRecord, MemoryRecord, Record, Ref, Sink};

/// Consecutive paragraphs of a section are merged while the chunk stays within this many bytes.
const CHUNK_BYTES: usize = 1_500;
/// A paragraph longer than this is split into pieces of at most this many bytes.
const PIECE_BYTES: usize = 4_000;
/// The most text held at once: a longer paragraph (or line) is flushed in pieces.
const SECTION_BYTES: usize = 4 << 20;
/// How much chunk text is held back, before the document record goes out, while looking for the
/// first heading (the document's title).
const LOOKAHEAD_BYTES: usize = 64 << 10;

/// Reads one document, line by line, and pushes its document record and then its chunks.
/// Empty or whitespace-only input is an error.
pub fn read(input: &mut dyn BufRead, doc: &str, sink: &mut Sink<'_>) -> crate::Result<()> {
    let mut lines = Lines::new(input, SECTION_BYTES);
    let mut chunker = Chunker::new(doc, sink);
    while let Some(piece) = lines.next_piece()? {
        chunker.piece(&piece)?;
        if chunker.stopped {
            return Ok(());
        }
    }
    chunker.finish()
}

/// Part of a line (all of it unless the line is longer than the reader's limit).
#[derive(Debug, PartialEq)]
struct Piece {
    text: String,
    /// 1-based line number.
    line: u64,
    /// Whether the piece begins its line.
    starts_line: bool,
}

/// Reads lines in pieces of at most `limit` bytes (plus at most three carried over), never
/// splitting a UTF-8 character; invalid UTF-8 is replaced.
struct Lines<'r> {
    input: &'r mut dyn BufRead,
    limit: usize,
    buf: Vec<u8>,
    /// Bytes of a character cut off at the end of the last piece.
    carry: Vec<u8>,
    line: u64,
    mid_line: bool,
}

impl<'r> Lines<'r> {
    fn new(input: &'r mut dyn BufRead, limit: usize) -> Self {
        Lines {
            input,
            limit,
            buf: Vec::new(),
            carry: Vec::new(),
            line: 1,
            mid_line: false,
        }
    }

    fn next_piece(&mut self) -> std::io::Result<Option<Piece>> {
        self.buf.clear();
        self.buf.append(&mut self.carry);
        let n = std::io::Read::take(&mut *self.input, self.limit as u64)
            .read_until(b'\n', &mut self.buf)?;
        if self.buf.is_empty() {
            return Ok(None);
        }
        let ends_line = self.buf.last() == Some(&b'\n') || n < self.limit;
        if !ends_line && let Err(e) = std::str::from_utf8(&self.buf) {
            // A character cut at the limit goes with the next piece.
            if e.error_len().is_none() {
                self.carry = self.buf.split_off(e.valid_up_to());
            }
        }
        let mut text = String::from_utf8_lossy(&self.buf).into_owned();
        if ends_line {
            if text.ends_with('\n') {
                text.pop();
            }
            if text.ends_with('\r') {
                text.pop();
            }
        }
        let piece = Piece {
            text,
            line: self.line,
            starts_line: !self.mid_line,
        };
        self.mid_line = !ends_line;
        if ends_line {
            self.line += 1;
        }
        Ok(Some(piece))
    }
}

/// An ATX heading's level and text: up to three spaces, 1–6 `#`, then a space or the end; a
/// closing run of `#` is dropped.
fn heading(line: &str) -> Option<(usize, &str)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let level = rest.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let after = &rest[level..];
    if !after.is_empty() && !after.starts_with([' ', '\t']) {
        return None;
    }
    let text = after.trim();
    let unclosed = text.trim_end_matches('#');
    Some(if unclosed.is_empty() {
        (level, "")
    } else if unclosed.ends_with([' ', '\t']) {
        (level, unclosed.trim_end())
    } else {
        (level, text)
    })
}

/// The character and length of a code fence opening on this line (three or more backticks or
/// tildes after up to three spaces).
fn fence_open(line: &str) -> Option<(char, usize)> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let c = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let n = rest.chars().take_while(|&x| x == c).count();
    // A backtick fence's info string has no backticks (else it is inline code).
    (n >= 3 && !(c == '`' && rest[n..].contains('`'))).then_some((c, n))
}

/// Whether this line closes a fence opened with `open`.
fn fence_close(line: &str, (c, n): (char, usize)) -> bool {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return false;
    }
    let run = rest.chars().take_while(|&x| x == c).count();
    run >= n && rest[run * c.len_utf8()..].trim().is_empty()
}

/// Splits a long paragraph into pieces of at most `max` bytes, each with its byte offset: at the
/// last sentence end or line break in the second half of the limit, else at the last
/// whitespace, else at the last character boundary.
fn split_long(text: &str, max: usize) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let rest = &text[start..];
        let trimmed = rest.trim_start();
        start += rest.len() - trimmed.len();
        if trimmed.is_empty() {
            return out;
        }
        if trimmed.len() <= max {
            out.push((start, trimmed.trim_end()));
            return out;
        }
        let mut cut = max;
        while !trimmed.is_char_boundary(cut) {
            cut -= 1;
        }
        let b = &trimmed.as_bytes()[..=cut];
        let half = cut / 2;
        let sentence = (half..cut)
            .rev()
            .find(|&i| matches!(b[i], b'.' | b'!' | b'?') && b[i + 1].is_ascii_whitespace())
            .map(|i| i + 1);
        let newline = (half..=cut).rev().find(|&i| b[i] == b'\n');
        let space = (1..=cut).rev().find(|&i| b[i].is_ascii_whitespace());
        let end = sentence.or(newline).or(space).unwrap_or(cut);
        out.push((start, trimmed[..end].trim_end()));
        start += end;
    }
}

struct Chunker<'d, 's, 'a> {
    doc: &'d str,
    sink: &'s mut Sink<'a>,
    /// Headings above the current line: level and text.
    trail: Vec<(usize, String)>,
    /// The open code fence, if any.
    fence: Option<(char, usize)>,
    /// The paragraph being read and its first line.
    para: String,
    para_line: u64,
    /// Paragraphs merged so far for the next chunk, and its first line.
    chunk: String,
    chunk_line: u64,
    index: u64,
    /// Whether any non-blank line was read.
    any_text: bool,
    first_heading: Option<String>,
    /// Whether the document record went out; until then chunks wait in `held`.
    doc_sent: bool,
    held: Vec<(u64, Record)>,
    held_bytes: usize,
    stopped: bool,
}

impl<'d, 's, 'a> Chunker<'d, 's, 'a> {
    fn new(doc: &'d str, sink: &'s mut Sink<'a>) -> Self {
        Chunker {
            doc,
            sink,
            trail: Vec::new(),
            fence: None,
            para: String::new(),
            para_line: 0,
            chunk: String::new(),
            chunk_line: 0,
            index: 0,
            any_text: false,
            first_heading: None,
            doc_sent: false,
            held: Vec::new(),
            held_bytes: 0,
            stopped: false,
        }
    }

    fn piece(&mut self, piece: &Piece) -> crate::Result<()> {
        let line = piece.text.as_str();
        if !piece.starts_line {
            // The rest of an over-long line.
            if self.para.is_empty() {
                self.para_line = piece.line;
            }
            self.any_text |= !line.trim().is_empty();
            self.para.push_str(line);
            return self.bound();
        }
        if !line.trim().is_empty() {
            self.any_text = true;
        }
        if let Some(open) = self.fence {
            self.append(line, piece.line);
            if fence_close(line, open) {
                self.fence = None;
                self.end_paragraph()?;
            }
            return self.bound();
        }
        if let Some(open) = fence_open(line) {
            self.end_paragraph()?;
            self.fence = Some(open);
            self.append(line, piece.line);
            return self.bound();
        }
        if line.trim().is_empty() {
            return self.end_paragraph();
        }
        if let Some((level, text)) = heading(line) {
            self.end_paragraph()?;
            self.flush_chunk()?;
            while self.trail.last().is_some_and(|(l, _)| *l >= level) {
                self.trail.pop();
            }
            self.trail.push((level, text.to_string()));
            if self.first_heading.is_none() && !text.is_empty() {
                self.first_heading = Some(text.to_string());
                if !self.doc_sent {
                    self.send_doc()?;
                }
            }
            return Ok(());
        }
        self.append(line, piece.line);
        self.bound()
    }

    fn append(&mut self, line: &str, line_no: u64) {
        if self.para.is_empty() {
            self.para_line = line_no;
        } else {
            self.para.push('\n');
        }
        self.para.push_str(line);
    }

    /// Flushes the paragraph when it holds more than the section limit.
    fn bound(&mut self) -> crate::Result<()> {
        if self.para.len() > SECTION_BYTES {
            self.end_paragraph()?;
        }
        Ok(())
    }

    fn end_paragraph(&mut self) -> crate::Result<()> {
        let para = std::mem::take(&mut self.para);
        let text = para.trim();
        if text.is_empty() {
            return Ok(());
        }
        // Offsets below count from the trimmed text, whose first line is the paragraph's.
        if text.len() > PIECE_BYTES {
            self.flush_chunk()?;
            let (mut line, mut seen) = (self.para_line, 0);
            for (offset, piece) in split_long(text, PIECE_BYTES) {
                line += text[seen..offset].matches('\n').count() as u64;
                seen = offset;
                self.emit_chunk(piece, line)?;
            }
        } else {
            if !self.chunk.is_empty() && self.chunk.len() + 2 + text.len() > CHUNK_BYTES {
                self.flush_chunk()?;
            }
            if self.chunk.is_empty() {
                self.chunk_line = self.para_line;
            } else {
                self.chunk.push_str("\n\n");
            }
            self.chunk.push_str(text);
        }
        self.para = para;
        self.para.clear();
        Ok(())
    }

    fn flush_chunk(&mut self) -> crate::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.chunk);
        self.emit_chunk(&chunk, self.chunk_line)?;
        self.chunk = chunk;
        self.chunk.clear();
        Ok(())
    }

    fn emit_chunk(&mut self, text: &str, line: u64) -> crate::Result<()> {
        let trail = self
            .trail
            .iter()
            .map(|(_, t)| t.as_str())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join(" > ");
        let content = if trail.is_empty() {
            text.to_string()
        } else {
            format!("{trail}\n\n{text}")
        };
        let record = Record::Memory(Box::new(MemoryRecord {
            kind: Some("chunk".into()),
            content,
            metadata: Some(json!({
                "doc": self.doc,
                "chunk": self.index,
                "heading": if trail.is_empty() { None } else { Some(trail) },
            })),
            links: vec![LinkRecord {
                to: Ref::Ext(format!("doc:{}", self.doc)),
                kind: "part_of".into(),
                weight: None,
            }],
            ..Default::default()
        }));
        self.index += 1;
        if self.doc_sent {
            return self.push(line, record);
        }
        self.held_bytes += text.len();
        self.held.push((line, record));
        if self.held_bytes > LOOKAHEAD_BYTES {
            self.send_doc()?;
        }
        Ok(())
    }

    /// The document record, then the chunks held back until now.
    fn send_doc(&mut self) -> crate::Result<()> {
        self.doc_sent = true;
        let mut content = format!("Document {}", self.doc);
        if let Some(h) = &self.first_heading {
            content.push_str(": ");
            content.push_str(h);
        }
        let record = Record::Memory(Box::new(MemoryRecord {
            ext: Some(format!("doc:{}", self.doc)),
            kind: Some("document".into()),
            name: Some(self.doc.to_string()),
            content,
            ..Default::default()
        }));
        self.push(1, record)?;
        for (line, record) in std::mem::take(&mut self.held) {
            self.push(line, record)?;
        }
        self.held_bytes = 0;
        Ok(())
    }

    fn push(&mut self, line: u64, record: Record) -> crate::Result<()> {
        if !self.stopped && (self.sink)(Ok((line, record)))? == Flow::Stop {
            self.stopped = true;
        }
        Ok(())
    }

    fn finish(mut self) -> crate::Result<()> {
        self.end_paragraph()?;
        self.flush_chunk()?;
        if !self.any_text {
            return Err(crate::Error::invalid(
                "input",
                format!("document {:?} is empty", self.doc),
                "give a Markdown or text file with some text in it",
            ));
        }
        if !self.doc_sent {
            self.send_doc()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Item;
    use crate::formats::testing::{sink_error_ends_the_read, stops_when_told};

    fn read_doc(input: &[u8], doc: &str) -> crate::Result<Vec<(u64, MemoryRecord)>> {
        let mut out = Vec::new();
        read(&mut &input[..], doc, &mut |item: Item| {
            match item {
                Ok((line, Record::Memory(m))) => out.push((line, *m)),
                other => panic!("unexpected item {other:?}"),
            }
            Ok(Flow::Continue)
        })?;
        Ok(out)
    }

    /// (line, content) of each chunk, after checking the document record.
    fn chunks(input: &str) -> Vec<(u64, String)> {
        let recs = read_doc(input.as_bytes(), "d.md").expect("read");
        assert_eq!(recs[0].1.kind.as_deref(), Some("document"));
        recs[1..]
            .iter()
            .map(|(l, m)| (*l, m.content.clone()))
            .collect()
    }

    const NOTES: &str = "# Title\n\
\n\
Intro paragraph,\n\
two lines.\n\
\n\
## Part A\n\
\n\
Para A1.\n\
\n\
Para A2.\n\
\n\
### Deep\n\
Deep text.\n\
\n\
## Part B ##\n\
B text\n";

    #[test]
    fn records_map_field_by_field() {
        let recs = read_doc(NOTES.as_bytes(), "notes/a.md").expect("read");
        assert_eq!(recs.len(), 5);
        assert_eq!(
            recs[0],
            (
                1,
                MemoryRecord {
                    ext: Some("doc:notes/a.md".into()),
                    kind: Some("document".into()),
                    name: Some("notes/a.md".into()),
                    content: "Document notes/a.md: Title".into(),
                    ..Default::default()
                }
            )
        );
        assert_eq!(
            recs[2],
            (
                8,
                MemoryRecord {
                    kind: Some("chunk".into()),
                    content: "Title > Part A\n\nPara A1.\n\nPara A2.".into(),
                    metadata: Some(json!({
                        "doc": "notes/a.md", "chunk": 1, "heading": "Title > Part A"
                    })),
                    links: vec![LinkRecord {
                        to: Ref::Ext("doc:notes/a.md".into()),
                        kind: "part_of".into(),
                        weight: None,
                    }],
                    ..Default::default()
                }
            )
        );
    }

    #[test]
    fn headings_split_sections_and_make_a_trail() {
        assert_eq!(
            chunks(NOTES),
            vec![
                (3, "Title\n\nIntro paragraph,\ntwo lines.".to_string()),
                (8, "Title > Part A\n\nPara A1.\n\nPara A2.".to_string()),
                (13, "Title > Part A > Deep\n\nDeep text.".to_string()),
                (16, "Title > Part B\n\nB text".to_string()),
            ]
        );
    }

    #[test]
    fn heading_syntax() {
        assert_eq!(heading("# A"), Some((1, "A")));
        assert_eq!(heading("###### Six ######"), Some((6, "Six")));
        assert_eq!(heading("   ## Indented"), Some((2, "Indented")));
        assert_eq!(heading("## C#"), Some((2, "C#")));
        assert_eq!(heading("#"), Some((1, "")));
        assert_eq!(heading("## ##"), Some((2, "")));
        assert_eq!(heading("#hashtag"), None);
        assert_eq!(heading("####### seven"), None);
        assert_eq!(heading("    # code"), None);
        assert_eq!(heading("text # not"), None);
    }

    #[test]
    fn fenced_code_keeps_hash_lines_and_blank_lines() {
        let input = "# Setup\n\
\n\
```sh\n\
# install\n\
make\n\
\n\
# run\n\
./app\n\
```\n\
\n\
~~~~\n\
## still code\n\
~~~\n\
~~~~\n\
\n\
## Next\n\
text\n";
        assert_eq!(
            chunks(input),
            vec![
                (
                    3,
                    "Setup\n\n```sh\n# install\nmake\n\n# run\n./app\n```\n\n~~~~\n## still code\n~~~\n~~~~"
                        .to_string()
                ),
                (17, "Setup > Next\n\ntext".to_string()),
            ]
        );
        // An unclosed fence runs to the end.
        assert_eq!(
            chunks("```\n# a\n\n# b\n"),
            vec![(1, "```\n# a\n\n# b".to_string())]
        );
        assert_eq!(fence_open("``` rust"), Some(('`', 3)));
        assert_eq!(fence_open("``not"), None);
        assert_eq!(fence_open("```a`b"), None);
        assert!(fence_close("````", ('`', 3)));
        assert!(!fence_close("``", ('`', 3)));
        assert!(!fence_close("``` x", ('`', 3)));
    }

    #[test]
    fn paragraphs_merge_up_to_the_chunk_limit() {
        let para = "word ".repeat(80).trim_end().to_string(); // 399 bytes
        let input = (0..10)
            .map(|_| para.clone())
            .collect::<Vec<_>>()
            .join("\n\n");
        let got = chunks(&input);
        let lines: Vec<u64> = got.iter().map(|c| c.0).collect();
        assert_eq!(lines, vec![1, 7, 13, 19]);
        let sizes: Vec<usize> = got.iter().map(|c| c.1.len()).collect();
        assert_eq!(sizes, vec![399 * 3 + 4, 399 * 3 + 4, 399 * 3 + 4, 399]);
        assert!(sizes.iter().all(|&s| s <= CHUNK_BYTES));
        // A paragraph between the chunk and piece limits stands alone.
        let big = "x".repeat(2_000);
        let got = chunks(&format!("a\n\n{big}\n\nb"));
        assert_eq!(
            got.iter().map(|c| c.1.len()).collect::<Vec<_>>(),
            vec![1, 2_000, 1]
        );
    }

    #[test]
    fn long_paragraphs_split_at_sentences_within_the_piece_limit() {
        let sentences: String = (0..300)
            .map(|i| format!("Sentence number {i} is here. "))
            .collect();
        let input = format!(
            "# H\n\nshort\n\n{}\nlast line.\n\nafter",
            sentences.trim_end()
        );
        let got = chunks(&input);
        assert_eq!(got[0], (3, "H\n\nshort".to_string()));
        let pieces = &got[1..got.len() - 1];
        assert!(pieces.len() >= 3, "{}", pieces.len());
        for (line, p) in pieces {
            let body = p.strip_prefix("H\n\n").expect("trail");
            assert!(body.len() <= PIECE_BYTES, "{}", body.len());
            assert!(body.ends_with('.'), "{body:?}");
            assert!(
                body.starts_with("Sentence") || body.starts_with("last"),
                "{body:?}"
            );
            assert_eq!(*line, if body.starts_with("last") { 6 } else { 5 });
        }
        let joined: Vec<&str> = pieces.iter().map(|(_, p)| &p[3..]).collect();
        assert_eq!(
            joined.join(" ").split_whitespace().collect::<Vec<_>>(),
            format!("{sentences} last line.")
                .split_whitespace()
                .collect::<Vec<_>>()
        );
        assert_eq!(got.last().map(|c| c.1.as_str()), Some("H\n\nafter"));
    }

    #[test]
    fn splitting_never_cuts_a_character() {
        let text = "é".repeat(5_000); // 10,000 bytes, no whitespace
        let pieces = split_long(&text, PIECE_BYTES);
        assert!(pieces.iter().all(|(_, p)| p.len() <= PIECE_BYTES));
        assert_eq!(pieces.iter().map(|(_, p)| *p).collect::<String>(), text);
        assert_eq!(pieces[1].0, pieces[0].1.len());
        let mixed = format!("{}\n{}", "a".repeat(3_000), "b".repeat(3_000));
        let pieces = split_long(&mixed, PIECE_BYTES);
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[1], (3_001, "b".repeat(3_000).as_str()));
    }

    #[test]
    fn plain_text_without_headings() {
        let recs =
            read_doc(b"First para\nstill first.\n\n\n\nSecond para.\n", "a.txt").expect("read");
        assert_eq!(recs[0].1.content, "Document a.txt");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].0, 1);
        assert_eq!(
            recs[1].1.content,
            "First para\nstill first.\n\nSecond para."
        );
        assert_eq!(
            recs[1].1.metadata,
            Some(json!({"doc": "a.txt", "chunk": 0, "heading": null}))
        );
    }

    #[test]
    fn crlf_and_invalid_utf8() {
        let recs = read_doc(b"# T\r\n\r\nbad \xff byte\r\n", "x.md").expect("read");
        assert_eq!(recs[0].1.content, "Document x.md: T");
        assert_eq!(recs[1].1.content, "T\n\nbad \u{fffd} byte");
    }

    #[test]
    fn empty_documents_are_an_error() {
        for input in ["", "\n\n", "  \t\n   \r\n"] {
            match read_doc(input.as_bytes(), "e.md") {
                Err(e @ crate::Error::InvalidArgument { .. }) => {
                    assert!(e.to_string().contains("\"e.md\" is empty"), "{e}")
                }
                other => panic!("{input:?}: {other:?}"),
            }
        }
        // Headings only: the document, no chunks.
        let recs = read_doc(b"# Just a title\n", "t.md").expect("read");
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].1.content, "Document t.md: Just a title");
    }

    #[test]
    fn document_record_comes_first_even_when_the_heading_is_far() {
        let filler = "Some words here.\n\n".repeat(5_000); // ~90 KiB before the heading
        let recs = read_doc(format!("{filler}# Late\n\ntext").as_bytes(), "far.md").expect("read");
        assert_eq!(recs[0].0, 1);
        assert_eq!(recs[0].1.content, "Document far.md");
        assert!(
            recs[1..]
                .iter()
                .all(|(_, m)| m.kind.as_deref() == Some("chunk"))
        );
        let indexes: Vec<u64> = recs[1..]
            .iter()
            .map(|(_, m)| {
                m.metadata.as_ref().expect("metadata")["chunk"]
                    .as_u64()
                    .expect("n")
            })
            .collect();
        assert_eq!(indexes, (0..indexes.len() as u64).collect::<Vec<_>>());
        // A heading within the look-ahead still names the document.
        let recs = read_doc(b"intro\n\n# Name\n\nbody", "near.md").expect("read");
        assert_eq!(recs[0].1.content, "Document near.md: Name");
        assert_eq!(recs[1].1.content, "intro");
        assert_eq!(recs[1].0, 1);
    }

    #[test]
    fn stop_is_honoured() {
        stops_when_told(|sink| read(&mut NOTES.as_bytes(), "n.md", sink), 2);
        sink_error_ends_the_read(|sink| read(&mut NOTES.as_bytes(), "n.md", sink), 1);
    }

    #[test]
    fn long_lines_are_read_in_pieces_without_cutting_characters() {
        let input = "aéé\nbc\nxyz".as_bytes();
        let mut input = input;
        let mut lines = Lines::new(&mut input, 4);
        let mut got = Vec::new();
        while let Some(p) = lines.next_piece().expect("read") {
            got.push((p.text, p.line, p.starts_line));
        }
        assert_eq!(
            got,
            vec![
                ("aé".to_string(), 1, true),
                ("é".to_string(), 1, false),
                ("bc".to_string(), 2, true),
                ("xyz".to_string(), 3, true),
            ]
        );
    }

    #[test]
    fn a_huge_line_is_flushed_in_bounded_pieces() {
        let line = "word ".repeat((SECTION_BYTES + (1 << 20)) / 5);
        let recs = read_doc(format!("# Big\n{line}\nend").as_bytes(), "big.md").expect("read");
        let chunks = &recs[1..];
        assert!(chunks.len() > SECTION_BYTES / PIECE_BYTES);
        assert!(
            chunks
                .iter()
                .all(|(_, m)| m.content.len() <= PIECE_BYTES + 5)
        );
        let lines: Vec<u64> = chunks.iter().map(|(l, _)| *l).collect();
        assert!(lines.iter().all(|&l| l == 2 || l == 3), "{lines:?}");
        assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
        let words: usize = chunks
            .iter()
            .map(|(_, m)| m.content[5..].split_whitespace().count())
            .sum();
        assert_eq!(words, line.split_whitespace().count() + 1);
    }
}
