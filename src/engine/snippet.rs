//! Snippets: the window of a memory's content where the query's words are densest.

use crate::index::tokenize::word_spans;

/// Characters of content shown around the best match.
pub const SNIPPET_CHARS: usize = 200;

/// A window of about `SNIPPET_CHARS` characters of `content` with the most query words in it,
/// with `…` where text was cut. Matching is on lower-cased words and their prefixes (so "teas"
/// finds "tea"), which is close enough to the index's stemming for display.
pub fn snippet(content: &str, query: &str) -> String {
    if content.len() <= SNIPPET_CHARS || content.chars().count() <= SNIPPET_CHARS {
        return content.to_owned();
    }
    let wanted = Stems::of(query);
    let hits: Vec<usize> = word_spans(content)
        .filter(|&(from, to)| wanted.holds(&content[from..to]))
        .map(|(from, _)| from)
        .collect();
    let window_bytes = |start: usize| -> usize {
        content[start..]
            .char_indices()
            .nth(SNIPPET_CHARS)
            .map_or(content.len(), |(i, _)| start + i)
    };
    // Back up a little so the first hit has some context before it.
    let mut start = densest(content, &hits);
    let back: Vec<(usize, char)> = content[..start].char_indices().rev().take(40).collect();
    if let Some(&(i, _)) = back.iter().rev().find(|(_, c)| c.is_whitespace()) {
        start = i + 1;
    } else if let Some(&(i, _)) = back.last() {
        start = i;
    }
    let end = window_bytes(start);
    let mut out = String::with_capacity(end - start + 8);
    if start > 0 {
        out.push('…');
    }
    out.push_str(content[start..end].trim());
    if end < content.len() {
        out.push('…');
    }
    out
}

/// The hit (a byte offset into `content`; `hits` ascending) whose window of `SNIPPET_CHARS`
/// characters covers the most hits, the first of equals (0 without hits): in one pass over the
/// content, as the hits, their windows' ends and the last hit each window covers only move
/// forward.
fn densest(content: &str, hits: &[usize]) -> usize {
    let mut best = (0usize, 0usize);
    let mut ends = content.char_indices().map(|(i, _)| i);
    // `next_char`: the index of the character `ends` yields next; `end`: the window's end.
    let (mut next_char, mut end) = (0usize, 0usize);
    let (mut counted_to, mut chars_before) = (0usize, 0usize);
    let mut covered_to = 0usize;
    for (i, &start) in hits.iter().enumerate() {
        chars_before += content[counted_to..start].chars().count();
        counted_to = start;
        let last = chars_before + SNIPPET_CHARS;
        while next_char <= last {
            match ends.next() {
                Some(at) => end = at,
                None => {
                    end = content.len();
                    break;
                }
            }
            next_char += 1;
        }
        covered_to = covered_to.max(i);
        while covered_to < hits.len() && hits[covered_to] < end {
            covered_to += 1;
        }
        if covered_to - i > best.1 {
            best = (start, covered_to - i);
        }
    }
    best.0
}

/// The stems of a query's words, each also packed into a number when it is ASCII.
struct Stems {
    stems: Vec<String>,
    packed: Vec<u64>,
}

impl Stems {
    fn of(query: &str) -> Stems {
        let stems: Vec<String> = word_spans(query)
            .map(|(from, to)| stem(&query[from..to]))
            .collect();
        let packed = stems.iter().filter_map(|s| packed(s.as_bytes())).collect();
        Stems { stems, packed }
    }

    /// Whether `word` has one of the stems: most content words begin with ASCII letters, and
    /// their first five lower-cased bytes are one number to look up; the rest are compared
    /// character by character (a character outside ASCII may lower-case into it: K, the
    /// kelvin sign, is `k`).
    fn holds(&self, word: &str) -> bool {
        let start = &word.as_bytes()[..word.len().min(STEM_CHARS)];
        match packed(start) {
            Some(key) => self.packed.contains(&key),
            None => self.stems.iter().any(|s| same_stem(word, s)),
        }
    }
}

/// Up to [`STEM_CHARS`] ASCII bytes lower-cased, and their count, in one number (`None` when
/// one is not ASCII).
fn packed(bytes: &[u8]) -> Option<u64> {
    if bytes.len() > STEM_CHARS || !bytes.is_ascii() {
        return None;
    }
    let mut key = (bytes.len() as u64) << 56;
    for (i, b) in bytes.iter().enumerate() {
        key |= u64::from(b.to_ascii_lowercase()) << (8 * i);
    }
    Some(key)
}

/// The first five characters of a word, lower-cased character by character (one character may
/// lower-case to several).
fn stem(word: &str) -> String {
    word.chars()
        .flat_map(char::to_lowercase)
        .take(STEM_CHARS)
        .collect()
}

/// Whether `word` lower-cased begins with the same five characters as `stem` (a [`stem`]), and
/// has no more of them than it: `stem(word) == stem`, without a string for `word`.
fn same_stem(word: &str, stem: &str) -> bool {
    if word.is_ascii() && stem.is_ascii() {
        // One byte a character, and lower-casing keeps it so.
        let n = word.len().min(STEM_CHARS);
        return n == stem.len() && word.as_bytes()[..n].eq_ignore_ascii_case(stem.as_bytes());
    }
    let mut lowered = word.chars().flat_map(char::to_lowercase).take(STEM_CHARS);
    let mut wanted = stem.chars();
    loop {
        match (lowered.next(), wanted.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// Characters of a word's beginning compared for a match.
const STEM_CHARS: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_content_is_whole() {
        assert_eq!(snippet("short text", "text"), "short text");
    }

    #[test]
    fn window_moves_to_the_match() {
        let content = format!(
            "{} the keyword zebra sits here {}",
            "filler ".repeat(80),
            "tail ".repeat(80)
        );
        let s = snippet(&content, "zebras?");
        assert!(s.contains("zebra"), "{s}");
        assert!(s.starts_with('…') && s.ends_with('…'));
        assert!(s.chars().count() <= SNIPPET_CHARS + 2);
    }

    #[test]
    fn stems_are_held_as_compared_one_by_one() {
        let queries = [
            "tea",
            "Teapots and CAFÉS",
            "İstanbul straße",
            "kilo 咖啡 x",
            "",
            "a ab abc",
        ];
        let words = [
            "tea",
            "Teas",
            "TEAPOT",
            "teapoté",
            "teapé",
            "cafés",
            "CAFE",
            "istanbul",
            "i̇stanbul",
            "STRASSE",
            "straße",
            "\u{212a}ilo",
            "kilos",
            "咖",
            "x",
            "X",
            "a",
            "ab",
            "abcd",
            "",
        ];
        for query in queries {
            let stems = Stems::of(query);
            for word in words {
                assert_eq!(
                    stems.holds(word),
                    stems.stems.iter().any(|s| same_stem(word, s)),
                    "{word:?} in {query:?}"
                );
            }
        }
    }

    #[test]
    fn stems_compare_as_lower_cased_prefixes() {
        for (word, query) in [
            ("Teas", "tea"),
            ("TEA", "tea"),
            ("te", "tea"),
            ("teapots", "TEAPOT"),
            ("tea", "té"),
            ("tea", "teas"),
            ("Zebras", "zebra"),
            ("ZEBRAFISH", "zebras"),
            ("İstanbul", "istanbul"),
            ("straße", "STRASSE"),
            ("咖", "咖啡"),
        ] {
            assert_eq!(
                same_stem(word, &stem(query)),
                stem(word) == stem(query),
                "{word} / {query}"
            );
        }
    }

    /// The hit whose window covers the most hits, found the plain way: from each hit, the
    /// hits within `SNIPPET_CHARS` characters of it.
    fn densest_plainly(content: &str, hits: &[usize]) -> usize {
        let mut best = (0, 0);
        for (i, &start) in hits.iter().enumerate() {
            let end = content[start..]
                .char_indices()
                .nth(SNIPPET_CHARS)
                .map_or(content.len(), |(b, _)| start + b);
            let covered = hits[i..].iter().take_while(|&&h| h < end).count();
            if covered > best.1 {
                best = (start, covered);
            }
        }
        best.0
    }

    #[test]
    fn the_window_with_the_most_matches_is_found_in_one_pass() {
        // Matches in clusters at uneven distances, in one- and multi-byte text, up to the end.
        let mut seed = 7u64;
        for round in 0..300 {
            let mut content = String::new();
            let mut hits = Vec::new();
            while content.chars().count() < 300 + round * 3 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let (word, hit) = match (seed >> 33) % 7 {
                    0 => ("zebra", true),
                    1 => ("zèbre", true),
                    2 if round % 2 == 0 => ("咖啡", true),
                    3 => ("ünïcödé", false),
                    _ => ("filler", false),
                };
                if hit {
                    hits.push(content.len());
                }
                content.push_str(word);
                content.push(' ');
            }
            assert_eq!(
                densest(&content, &hits),
                densest_plainly(&content, &hits),
                "round {round}"
            );
        }
        assert_eq!(densest("no hits here", &[]), 0);
    }

    #[test]
    fn multibyte_content_is_cut_on_char_boundaries() {
        let content = "咖啡".repeat(300);
        let s = snippet(&content, "咖");
        assert!(s.chars().count() <= SNIPPET_CHARS + 2);
    }
}
