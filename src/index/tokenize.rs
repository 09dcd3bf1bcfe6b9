//! The word splitter shared by the text index and snippets: Latin-style words, one token per CJK character.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

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

/// Splits on anything that is not a letter or digit; ideographs become one token each.
#[derive(Clone, Default)]
pub struct WordTokenizer {
    token: Token,
}

/// Token stream of [`WordTokenizer`].
pub struct WordTokenStream<'a> {
    text: &'a str,
    pos: usize,
    token: &'a mut Token,
}

impl Tokenizer for WordTokenizer {
    type TokenStream<'a> = WordTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> WordTokenStream<'a> {
        self.token.reset();
        WordTokenStream {
            text,
            pos: 0,
            token: &mut self.token,
        }
    }
}

impl TokenStream for WordTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.token.text.clear();
        let rest = &self.text[self.pos..];
        let mut chars = rest.char_indices();
        let start = loop {
            match chars.next() {
                None => {
                    self.pos = self.text.len();
                    return false;
                }
                Some((i, c)) if c.is_alphanumeric() => break (i, c),
                Some(_) => {}
            }
        };
        let (start_rel, first) = start;
        let mut end_rel = start_rel + first.len_utf8();
        if !is_ideographic(first) {
            for (i, c) in chars {
                if !c.is_alphanumeric() || is_ideographic(c) {
                    break;
                }
                end_rel = i + c.len_utf8();
            }
        }
        let from = self.pos + start_rel;
        let to = self.pos + end_rel;
        self.token.offset_from = from;
        self.token.offset_to = to;
        self.token.position = self.token.position.wrapping_add(1);
        self.token.text.push_str(&self.text[from..to]);
        self.pos = to;
        true
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

/// Lower-cased words of `text`, in order, as the index sees them before stemming.
pub fn words(text: &str) -> Vec<(usize, usize, String)> {
    let mut tokenizer = WordTokenizer::default();
    let mut stream = tokenizer.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        let t = stream.token();
        out.push((t.offset_from, t.offset_to, t.text.to_lowercase()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn offsets_point_into_the_text() {
        let s = "ab, 咖啡";
        for (from, to, w) in words(s) {
            assert_eq!(s[from..to].to_lowercase(), w);
        }
    }
}
