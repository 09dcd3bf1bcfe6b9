//! Snippets: the window of a memory's content where the query's words are densest.

use crate::index::tokenize::words;

/// Characters of content shown around the best match.
pub const SNIPPET_CHARS: usize = 200;

/// A window of about `SNIPPET_CHARS` characters of `content` with the most query words in it,
/// with `…` where text was cut. Matching is on lower-cased words and their prefixes (so "teas"
/// finds "tea"), which is close enough to the index's stemming for display.
pub fn snippet(content: &str, query: &str) -> String {
    let n_chars = content.chars().count();
    if n_chars <= SNIPPET_CHARS {
        return content.to_owned();
    }
    let wanted: Vec<String> = words(query).into_iter().map(|(_, _, w)| w).collect();
    let stem = |w: &str| w.chars().take(5).collect::<String>();
    let wanted_stems: Vec<String> = wanted.iter().map(|w| stem(w)).collect();
    let hits: Vec<usize> = words(content)
        .into_iter()
        .filter(|(_, _, w)| wanted_stems.iter().any(|s| stem(w) == *s))
        .map(|(from, _, _)| from)
        .collect();
    let window_bytes = |start: usize| -> usize {
        content[start..]
            .char_indices()
            .nth(SNIPPET_CHARS)
            .map_or(content.len(), |(i, _)| start + i)
    };
    // Pick the start (at a hit) whose window covers the most hits.
    let mut best = (0usize, 0usize);
    for (i, &start) in hits.iter().enumerate() {
        let end = window_bytes(start);
        let covered = hits[i..].iter().take_while(|&&h| h < end).count();
        if covered > best.1 {
            best = (start, covered);
        }
    }
    // Back up a little so the first hit has some context before it.
    let mut start = best.0;
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
    fn multibyte_content_is_cut_on_char_boundaries() {
        let content = "咖啡".repeat(300);
        let s = snippet(&content, "咖");
        assert!(s.chars().count() <= SNIPPET_CHARS + 2);
    }
}
