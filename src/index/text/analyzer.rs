//! The text index's analyzer: the shared word splitter ([`crate::index::tokenize`]) as a tantivy
//! tokenizer, then long words dropped, lower-casing and English stemming.

use tantivy::tokenizer::{
    LowerCaser, RemoveLongFilter, Stemmer, TextAnalyzer, Token, TokenStream, Tokenizer,
};

use crate::index::tokenize::{WordSpans, word_spans};

/// Longest word indexed, in bytes; longer ones (hashes, base64) are left out.
const LONGEST_WORD: usize = 48;

/// The analyzer of the content and name fields, and of queries.
pub(super) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(WordTokenizer::default())
        .filter(RemoveLongFilter::limit(LONGEST_WORD))
        .filter(LowerCaser)
        .filter(Stemmer::default())
        .build()
}

/// [`word_spans`] as a tantivy tokenizer.
#[derive(Clone, Default)]
struct WordTokenizer {
    token: Token,
}

/// Token stream of [`WordTokenizer`].
struct WordTokenStream<'a> {
    text: &'a str,
    spans: WordSpans<'a>,
    token: &'a mut Token,
}

impl Tokenizer for WordTokenizer {
    type TokenStream<'a> = WordTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> WordTokenStream<'a> {
        self.token.reset();
        WordTokenStream {
            text,
            spans: word_spans(text),
            token: &mut self.token,
        }
    }
}

impl TokenStream for WordTokenStream<'_> {
    fn advance(&mut self) -> bool {
        let Some((from, to)) = self.spans.next() else {
            return false;
        };
        self.token.text.clear();
        self.token.offset_from = from;
        self.token.offset_to = to;
        self.token.position = self.token.position.wrapping_add(1);
        self.token.text.push_str(&self.text[from..to]);
        true
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut a = analyzer();
        let mut stream = a.token_stream(text);
        let mut terms = Vec::new();
        while stream.advance() {
            terms.push(stream.token().text.clone());
        }
        terms
    }

    #[test]
    fn analyzed_terms_are_lowercased_stemmed_words() {
        assert_eq!(
            terms("Running DOGS, 東京 and a-very-long-word"),
            ["run", "dog", "東", "京", "and", "a", "veri", "long", "word"]
        );
        let long = "x".repeat(LONGEST_WORD + 1);
        assert!(
            terms(&long).is_empty(),
            "words past the limit are not indexed"
        );
    }
}
