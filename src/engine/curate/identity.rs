//! What in a text names one thing rather than another: numbers, dates, versions, amounts and ids
//! (any token with a digit: `3`, `2024-03-05`, `v1.2.3`, `$120`, `etl-42`, `INV-2024-0042`),
//! proper names (capitalised words that do not start a sentence), and negations (`not`, `no`,
//! `never`, `n't`, …). Two memories that read alike but differ in these say different things —
//! job `etl-42` failed is not job `etl-43` failed, "is" is not "is not" — so merge keeps them
//! apart. Pure: text in, tokens out.

use std::collections::{BTreeSet, HashSet};

/// Words that negate what they stand in (besides those ending in `n't`).
const NEGATIONS: [&str; 11] = [
    "not", "no", "never", "nothing", "nobody", "none", "neither", "nor", "nowhere", "cannot",
    "without",
];

/// The identifying tokens of a text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Tokens with a digit, lower-cased, with surrounding punctuation and a possessive `'s`
    /// trimmed (a leading `$`, `€`, `£` or `#` and a trailing `%` stay).
    pub marks: BTreeSet<String>,
    /// Capitalised words other than a sentence's first (and other than `I`), lower-cased.
    pub names: BTreeSet<String>,
    /// How many negations the text holds.
    pub negations: usize,
    /// Every word of the text, lower-cased and trimmed like the marks: a name that starts a
    /// sentence in one text is still found in it.
    words: HashSet<String>,
}

/// How two texts differ in what identifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Difference {
    /// Each names something the other does not (`3` / `4`, `Alice` / `Bob`): the first's, the
    /// second's.
    Names(Vec<String>, Vec<String>),
    /// One negates where the other does not ("is" / "is not"): their counts of negations.
    Negation(usize, usize),
}

/// Whether `c` may start a mark (kept in front of its digits).
fn leading_sign(c: char) -> bool {
    matches!(c, '$' | '€' | '£' | '#')
}

/// `raw` without surrounding punctuation (a leading currency sign or `#` and a trailing `%`
/// kept) and without a possessive `'s`.
fn core(raw: &str) -> &str {
    let start = raw
        .char_indices()
        .find(|&(_, c)| c.is_alphanumeric() || leading_sign(c))
        .map_or(raw.len(), |(i, _)| i);
    let s = &raw[start..];
    let end = s
        .char_indices()
        .rev()
        .find(|&(_, c)| c.is_alphanumeric() || c == '%')
        .map_or(0, |(i, c)| i + c.len_utf8());
    let s = &s[..end];
    s.strip_suffix("'s")
        .or_else(|| s.strip_suffix("’s"))
        .filter(|rest| !rest.is_empty())
        .unwrap_or(s)
}

/// Whether `raw` ends a sentence (or a label such as `Alice:`), closing quotes and brackets
/// aside.
fn ends_sentence(raw: &str) -> bool {
    let trimmed = raw.trim_end_matches(['"', '\'', '’', '”', ')', ']', '*']);
    trimmed.ends_with(['.', '!', '?', ':', '…'])
}

/// Whether lower-cased `w` is a negation.
fn is_negation(w: &str) -> bool {
    NEGATIONS.contains(&w) || w.ends_with("n't") || w.ends_with("n’t")
}

/// The pronoun `I` and its contractions, capitalised wherever they stand.
fn is_first_person(w: &str) -> bool {
    matches!(
        w,
        "I" | "I'm" | "I’m" | "I'd" | "I’d" | "I'll" | "I’ll" | "I've" | "I’ve"
    )
}

/// The identifying tokens of `text` (see the module docs).
pub(crate) fn identity(text: &str) -> Identity {
    let mut id = Identity::default();
    for line in text.lines() {
        let mut starts = true;
        for raw in line.split_whitespace() {
            let w = core(raw);
            if w.is_empty() {
                // A bullet or a dash: the sentence has not started yet.
                continue;
            }
            let lower = w.to_lowercase();
            if w.chars().any(|c| c.is_ascii_digit()) {
                id.marks.insert(lower.clone());
            } else if !starts
                && w.chars().next().is_some_and(char::is_uppercase)
                && !is_first_person(w)
            {
                id.names.insert(lower.clone());
            }
            if is_negation(&lower) {
                id.negations += 1;
            }
            id.words.insert(lower);
            starts = ends_sentence(raw);
        }
    }
    id
}

impl Identity {
    /// The marks and names of `self` that `other` never mentions.
    fn unmatched(&self, other: &Identity) -> Vec<String> {
        self.marks
            .iter()
            .chain(&self.names)
            .filter(|t| !other.words.contains(*t))
            .cloned()
            .collect()
    }

    /// How `self` and `other` differ in what identifies, if they do: in negation, or when each
    /// names something the other does not. One that only adds to the other (a date, a name the
    /// other leaves out) does not differ: it says more about the same thing.
    pub(crate) fn differs(&self, other: &Identity) -> Option<Difference> {
        if self.negations != other.negations {
            return Some(Difference::Negation(self.negations, other.negations));
        }
        let (mine, theirs) = (self.unmatched(other), other.unmatched(self));
        (!mine.is_empty() && !theirs.is_empty()).then_some(Difference::Names(mine, theirs))
    }

    /// Whether `self` names something `other` never mentions (what a sentence would add).
    pub(crate) fn adds_to(&self, other: &Identity) -> bool {
        !self.unmatched(other).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(text: &str) -> Vec<String> {
        identity(text).marks.into_iter().collect()
    }

    fn names(text: &str) -> Vec<String> {
        identity(text).names.into_iter().collect()
    }

    fn differs(a: &str, b: &str) -> Option<Difference> {
        identity(a).differs(&identity(b))
    }

    #[test]
    fn tokens_with_digits_are_marks_whatever_their_shape() {
        assert_eq!(
            marks("Job etl-42 failed on 2024-03-05 (v1.2.3), invoice INV-2024-0042: $120."),
            vec!["$120", "2024-03-05", "etl-42", "inv-2024-0042", "v1.2.3"]
        );
        assert_eq!(marks("Note number 3 about topic 8."), vec!["3", "8"]);
        assert_eq!(
            marks("at 10:30, 50% done, #7, build 9f3c2e1's log"),
            vec!["#7", "10:30", "50%", "9f3c2e1"]
        );
        assert!(marks("no digits here").is_empty());
    }

    #[test]
    fn names_are_capitalised_words_that_do_not_start_a_sentence() {
        assert_eq!(
            names("Yesterday Alice met Bob in Porto. They talked."),
            vec!["alice", "bob", "porto"]
        );
        // `I` is no name; a label's colon and a line break start a sentence again.
        assert_eq!(
            names("Melanie: I think Caroline's right.\nThanks!"),
            vec!["caroline"]
        );
        assert_eq!(names("- Hello there"), Vec::<String>::new());
        assert_eq!(names("\"Great,\" said Ana. \"Really?\" Yes"), vec!["ana"]);
    }

    #[test]
    fn negations_are_counted() {
        assert_eq!(identity("The build is green").negations, 0);
        assert_eq!(identity("The build is not green").negations, 1);
        assert_eq!(identity("It isn't and never was; no.").negations, 3);
        assert_eq!(identity("I can’t, I cannot").negations, 2);
    }

    #[test]
    fn texts_that_name_different_things_differ() {
        assert_eq!(
            differs(
                "Unrelated note number 3 about topic 8",
                "Unrelated note number 4 about topic 8"
            ),
            Some(Difference::Names(vec!["3".into()], vec!["4".into()]))
        );
        assert!(differs("Job etl-42 failed at night", "Job etl-43 failed at night").is_some());
        assert!(
            differs(
                "Invoice INV-2024-0042 is paid",
                "Invoice INV-2024-0043 is paid"
            )
            .is_some()
        );
        assert!(differs("The release is v1.2.3", "The release is v1.2.4").is_some());
        assert!(
            differs(
                "The meeting is on 2024-03-05",
                "The meeting is on 2024-03-06"
            )
            .is_some()
        );
        assert!(differs("The ticket costs $120", "The ticket costs $150").is_some());
        assert!(differs("The lead is Alice Moreau", "The lead is Bruno Keller").is_some());
        assert_eq!(
            differs("The deploy is done", "The deploy is not done"),
            Some(Difference::Negation(0, 1))
        );
        assert!(differs("It works", "It doesn't work").is_some());
    }

    #[test]
    fn rewordings_and_additions_do_not_differ() {
        // Another order, a name that starts a sentence in one only, other words.
        assert_eq!(
            differs(
                "Melanie: I went to the beach with Caroline. It was great!",
                "Melanie said: It was wonderful! Caroline and I headed to the beach."
            ),
            None
        );
        // One says more (a date, a name) about the same thing.
        assert_eq!(
            differs(
                "Alice leads the Atlas project.",
                "Alice leads the Atlas project! She joined in 2021."
            ),
            None
        );
        assert_eq!(differs("Thanks!", "Thanks, Caroline!"), None);
        assert_eq!(differs("ETL-42 failed", "etl-42 failed."), None);
        assert!(identity("She joined in 2021.").adds_to(&identity("Alice leads Atlas.")));
        assert!(!identity("Atlas is led by Alice.").adds_to(&identity("Alice leads Atlas.")));
    }
}
