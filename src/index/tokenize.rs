//! The word splitter shared by the text index and snippets: Latin-style words, one token per CJK
//! character.

/// True for scripts written without spaces, where each character is indexed as its own token.
fn is_ideographic(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x2FA1F) // CJK extensions B–F
}

/// Byte spans `(from, to)` of the words of `text`, in order: runs of letters and digits split on
/// anything else; each ideograph is a word of its own.
pub fn word_spans(text: &str) -> WordSpans<'_> {
    WordSpans { text, pos: 0 }
}

/// Iterator of [`word_spans`].
pub struct WordSpans<'a> {
    text: &'a str,
    pos: usize,
}

impl Iterator for WordSpans<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        // ASCII read byte by byte (most text is), the rest character by character: an ASCII
        // character is a letter or digit exactly when its byte is, and no ideograph.
        let bytes = self.text.as_bytes();
        let mut at = self.pos;
        while at < bytes.len() && bytes[at].is_ascii() && !bytes[at].is_ascii_alphanumeric() {
            at += 1;
        }
        self.pos = at;
        if at == bytes.len() {
            return None;
        }
        if !bytes[at].is_ascii_alphanumeric() {
            return self.next_from_char();
        }
        let from = at;
        while at < bytes.len() && bytes[at].is_ascii_alphanumeric() {
            at += 1;
        }
        if at < bytes.len() && !bytes[at].is_ascii() {
            // A letter of another script may go on with the word.
            at = word_end(self.text, at);
        }
        self.pos = at;
        Some((from, at))
    }
}

/// Where the word going on at byte `at` of `text` ends: at the first character that is not a
/// letter or digit, or is an ideograph (a word of its own).
fn word_end(text: &str, at: usize) -> usize {
    text[at..]
        .char_indices()
        .find(|&(_, c)| !c.is_alphanumeric() || is_ideographic(c))
        .map_or(text.len(), |(i, _)| at + i)
}

impl WordSpans<'_> {
    /// [`Iterator::next`] from a character that is not ASCII.
    fn next_from_char(&mut self) -> Option<(usize, usize)> {
        let rest = &self.text[self.pos..];
        let Some((start_rel, first)) = rest.char_indices().find(|(_, c)| c.is_alphanumeric())
        else {
            self.pos = self.text.len();
            return None;
        };
        let from = self.pos + start_rel;
        let mut to = from + first.len_utf8();
        if !is_ideographic(first) {
            to = word_end(self.text, to);
        }
        self.pos = to;
        Some((from, to))
    }
}

/// True when at least half of a name's parts (split at anything not a letter or digit) are
/// letters only: `alice`, `project-atlas`, `conv-26 session 1`, not `D1:3` or a UUID. Such a
/// name is embedded with its memory's content; an identifier is not.
pub fn reads_as_words(name: &str) -> bool {
    let (parts, wordy) = word_parts(name);
    parts > 0 && 2 * wordy >= parts
}

/// True when more than half of a name's parts are letters only: `alice`, `atlas runbook`, not
/// `mem:12` or `conv-26 session 1`. Such a name's words are searched with its memory's content;
/// the pieces of a name half made of numbers would match any number a query holds.
pub fn is_mostly_words(name: &str) -> bool {
    let (parts, wordy) = word_parts(name);
    2 * wordy > parts
}

/// How many parts a name has (split at anything not a letter or digit), and how many of them
/// are letters only.
fn word_parts(name: &str) -> (usize, usize) {
    name.split(|c: char| !c.is_alphanumeric())
        .filter(|p| !p.is_empty())
        .fold((0usize, 0usize), |(n, w), p| {
            (n + 1, w + usize::from(p.chars().all(char::is_alphabetic)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lower-cased words of `text`, in order, as the index sees them before stemming.
    fn words(text: &str) -> Vec<(usize, usize, String)> {
        word_spans(text)
            .map(|(from, to)| (from, to, text[from..to].to_lowercase()))
            .collect()
    }

    fn texts(s: &str) -> Vec<String> {
        words(s).into_iter().map(|(_, _, w)| w).collect()
    }

    #[test]
    fn splits_on_punctuation_and_keeps_operators_as_words() {
        assert_eq!(
            texts("What's \"Alice\" (AND bob): OR NOT?"),
            ["what", "s", "alice", "and", "bob", "or", "not"]
        );
    }

    #[test]
    fn ideographs_are_single_tokens() {
        assert_eq!(
            texts("我喜欢咖啡 tea"),
            ["我", "喜", "欢", "咖", "啡", "tea"]
        );
        assert_eq!(texts("東京abc"), ["東", "京", "abc"]);
    }

    #[test]
    fn other_scripts_split_on_spaces() {
        assert_eq!(texts("Привет, мир! café"), ["привет", "мир", "café"]);
    }

    /// The words of `text` found character by character only, as before ASCII was read by
    /// bytes.
    fn spans_plainly(text: &str) -> Vec<(usize, usize)> {
        let mut spans = WordSpans { text, pos: 0 };
        std::iter::from_fn(|| spans.next_from_char()).collect()
    }

    #[test]
    fn ascii_read_by_bytes_splits_as_characters_do() {
        let pieces = [
            "tea",
            "Caf",
            "é",
            "42",
            " ",
            ", ",
            "-",
            "咖",
            "啡",
            "Привет",
            "\u{a0}",
            "ǅ",
            "²",
            "½",
            "'",
            "\n",
            "x",
            "🍵",
            "٣",
            "İ",
        ];
        let mut seed = 11u64;
        for round in 0..2_000 {
            let mut text = String::new();
            for _ in 0..round % 23 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            assert_eq!(
                word_spans(&text).collect::<Vec<_>>(),
                spans_plainly(&text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn offsets_point_into_the_text() {
        let s = "ab, 咖啡";
        for (from, to, w) in words(s) {
            assert_eq!(s[from..to].to_lowercase(), w);
        }
    }
}
