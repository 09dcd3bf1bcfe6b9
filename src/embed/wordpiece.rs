//! BERT's WordPiece tokenizer (uncased): clean, split on whitespace, punctuation and CJK
//! characters, lower-case and strip accents, then greedy longest-match pieces with `##`
//! continuations. Reads the vocabulary from a `tokenizer.json` or a `vocab.txt`.

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;

use crate::error::{Error, Result};

/// Words longer than this (in chars) become `[UNK]`, as in BERT.
const MAX_WORD_CHARS: usize = 100;

/// An uncased WordPiece vocabulary and the rules to cut text with it.
#[derive(Debug, Clone)]
pub struct WordPiece {
    vocab: HashMap<String, u32, TokenHash>,
    /// Bytes of the longest token: no longer piece is looked up.
    longest: usize,
    size: usize,
    unk: u32,
    cls: Option<u32>,
    sep: Option<u32>,
    pad: Option<u32>,
}

impl WordPiece {
    /// Builds from token → id pairs; `[UNK]` must be among them.
    pub fn from_vocab(vocab: HashMap<String, u32>) -> Result<WordPiece> {
        let unk = *vocab.get("[UNK]").ok_or_else(|| Error::Corrupted {
            what: "tokenizer vocabulary".into(),
            reason: "it has no [UNK] token".into(),
        })?;
        let size = vocab.values().map(|&i| i as usize + 1).max().unwrap_or(0);
        let longest = vocab.keys().map(String::len).max().unwrap_or(0);
        Ok(WordPiece {
            cls: vocab.get("[CLS]").copied(),
            sep: vocab.get("[SEP]").copied(),
            pad: vocab.get("[PAD]").copied(),
            unk,
            size,
            longest,
            vocab: vocab.into_iter().collect(),
        })
    }

    /// Reads `model.vocab` of a Hugging Face `tokenizer.json` (a WordPiece model).
    pub fn from_tokenizer_json(bytes: &[u8]) -> Result<WordPiece> {
        #[derive(serde::Deserialize)]
        struct File {
            model: Model,
        }
        #[derive(serde::Deserialize)]
        struct Model {
            vocab: HashMap<String, u32>,
        }
        let f: File = serde_json::from_slice(bytes).map_err(|e| Error::Corrupted {
            what: "tokenizer.json".into(),
            reason: format!("no WordPiece vocabulary in it: {e}"),
        })?;
        WordPiece::from_vocab(f.model.vocab)
    }

    /// Reads a `vocab.txt`: one token a line, the id is the line number.
    pub fn from_vocab_txt(text: &str) -> Result<WordPiece> {
        let vocab = text
            .lines()
            .enumerate()
            .map(|(i, t)| (t.to_owned(), i as u32))
            .collect();
        WordPiece::from_vocab(vocab)
    }

    /// Number of ids (the largest id + 1).
    pub fn vocab_size(&self) -> usize {
        self.size
    }

    pub fn unk_id(&self) -> u32 {
        self.unk
    }

    pub fn cls_id(&self) -> Option<u32> {
        self.cls
    }

    pub fn sep_id(&self) -> Option<u32> {
        self.sep
    }

    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// The id of one exact token, if the vocabulary has it.
    pub fn id_of(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    /// Token ids of `text`, without special tokens. Words no piece sequence covers give `[UNK]`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        self.encode_into(text, &mut ids);
        ids
    }

    /// Appends the token ids of `text` to `ids` (no special tokens).
    pub fn encode_into(&self, text: &str, ids: &mut Vec<u32>) {
        let mut word = String::new();
        for c in text.chars() {
            if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
                continue;
            }
            if c.is_whitespace() {
                self.flush(&mut word, ids);
            } else if is_punctuation(c) || is_cjk(c) {
                self.flush(&mut word, ids);
                word.push(c);
                self.flush(&mut word, ids);
            } else {
                word.push(c);
            }
        }
        self.flush(&mut word, ids);
    }

    /// Lower-cases and strips accents from the pending word, then cuts it into pieces.
    fn flush(&self, word: &mut String, ids: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        let clean: String = if word.is_ascii() {
            word.to_ascii_lowercase()
        } else {
            word.to_lowercase()
                .nfd()
                .filter(|c| !is_combining_mark(*c))
                .collect()
        };
        word.clear();
        // Stripping accents can leave nothing, or reveal punctuation (rare); split again.
        let mut start = 0;
        for (i, c) in clean.char_indices() {
            if is_punctuation(c) {
                self.pieces(&clean[start..i], ids);
                self.pieces(&clean[i..i + c.len_utf8()], ids);
                start = i + c.len_utf8();
            }
        }
        self.pieces(&clean[start..], ids);
    }

    /// Greedy longest-match-first pieces of one word.
    fn pieces(&self, word: &str, ids: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if word.chars().count() > MAX_WORD_CHARS {
            ids.push(self.unk);
            return;
        }
        let before = ids.len();
        let mut start = 0;
        let mut buf = String::with_capacity(word.len() + 2);
        while start < word.len() {
            // The longest piece that could be a token, on a character boundary.
            let prefix = if start > 0 { 2 } else { 0 };
            let mut end = word
                .len()
                .min(start.saturating_add(self.longest.saturating_sub(prefix)));
            while !word.is_char_boundary(end) {
                end -= 1;
            }
            let mut found = None;
            while start < end {
                buf.clear();
                if start > 0 {
                    buf.push_str("##");
                }
                buf.push_str(&word[start..end]);
                if let Some(&id) = self.vocab.get(buf.as_str()) {
                    found = Some(id);
                    break;
                }
                // Step back one char.
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |(i, _)| i);
            }
            match found {
                Some(id) => {
                    ids.push(id);
                    start = end;
                }
                None => {
                    ids.truncate(before);
                    ids.push(self.unk);
                    return;
                }
            }
        }
    }
}

/// The vocabulary's hasher: FNV-1a over the bytes, where the standard SipHash was a fifth of
/// tokenizing (a word not in the vocabulary is looked up once per shorter prefix). The table
/// is fixed when built, so a lookup of chosen text cannot make it slower than it is.
#[derive(Clone, Copy)]
pub(crate) struct TokenHasher(u64);

impl Default for TokenHasher {
    fn default() -> TokenHasher {
        TokenHasher(crate::fnv::OFFSET)
    }
}

impl std::hash::Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bytes.iter().fold(self.0, |h, &b| crate::fnv::step(h, b));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type TokenHash = std::hash::BuildHasherDefault<TokenHasher>;

/// BERT's punctuation: ASCII symbol ranges and Unicode punctuation.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    matches!(c,
        '\u{2000}'..='\u{206F}' // general punctuation
        | '\u{3000}'..='\u{303F}' // CJK punctuation
        | '\u{FF01}'..='\u{FF0F}' | '\u{FF1A}'..='\u{FF20}' | '\u{FF3B}'..='\u{FF40}' | '\u{FF5B}'..='\u{FF65}'
        | '\u{00A1}' | '\u{00A7}' | '\u{00AB}' | '\u{00B6}' | '\u{00B7}' | '\u{00BB}' | '\u{00BF}'
        | '\u{2E00}'..='\u{2E7F}')
        && !c.is_whitespace()
}

/// CJK ideographs, which BERT treats as one token each.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// Combining marks (what accent stripping removes after NFD).
fn is_combining_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> WordPiece {
        let tokens = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "hello", ",", "world",
            "!", "cafe", "中", "国", "run", "##ning",
        ];
        WordPiece::from_vocab_txt(&tokens.join("\n")).unwrap()
    }

    #[test]
    fn greedy_pieces_punctuation_and_unknown_words() {
        let wp = tiny();
        assert_eq!(wp.encode("unaffable"), vec![4, 5, 6]);
        assert_eq!(wp.encode("Hello, WORLD!"), vec![7, 8, 9, 10]);
        assert_eq!(wp.encode("running xyz"), vec![14, 15, 1]);
        assert_eq!(wp.encode("  \t\n"), Vec::<u32>::new());
    }

    #[test]
    fn no_piece_longer_than_the_longest_token_is_looked_up_and_nothing_changes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(crate::embed::static_model::BUILTIN_DIR)
            .join("tokenizer.json");
        let wp = WordPiece::from_tokenizer_json(&std::fs::read(path).unwrap()).unwrap();
        assert!(wp.longest > 10 && wp.longest < 40, "{}", wp.longest);
        let mut every_length = wp.clone();
        every_length.longest = usize::MAX;
        let texts = [
            "Antidisestablishmentarianism and pneumonoultramicroscopicsilicovolcanoconiosis",
            "unbelievably-overcomplicated internationalisation of électroencéphalographie",
            "x".repeat(99).as_str(),
            "ab".repeat(60).as_str(),
            "Донауданпфшиффартсгезельшафт 東京都庁舎 🍵🍵🍵 naïveté",
            "supercalifragilisticexpialidocious!!! state-of-the-art, well-known",
        ]
        .map(str::to_owned);
        for text in &texts {
            assert_eq!(wp.encode(text), every_length.encode(text), "{text}");
        }
    }

    #[test]
    fn accents_stripped_and_cjk_split() {
        let wp = tiny();
        assert_eq!(wp.encode("Café"), vec![11]);
        assert_eq!(wp.encode("中国"), vec![12, 13]);
        assert_eq!(wp.cls_id(), Some(2));
        assert_eq!(wp.vocab_size(), 16);
    }
}
