//! The summarise step: a group of old episodes — the parts (`part_of`) of one memory, such as
//! the turns of a session — gets a `summary` memory linked `summarizes` to every episode and to
//! the memory they are part of. Extractive, no model call: the sentences most central to the
//! group (their memory's vector near the group's centroid, their words shared with other
//! episodes), without repeats, preferring sentences that bring names, dates and numbers not yet
//! kept, capped in length, in the order they were said, under a header naming the group and its
//! dates. Episodes stay as they are; a group already summarised is left alone.

use std::collections::{HashMap, HashSet};

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::embed::chat::{self, Summarizer};
use crate::engine::control::duration_words;
use crate::engine::curate::merge::sentences;
use crate::engine::curate::{Batch, Example, Run, truncate};
use crate::engine::overlap::{jaccard, word_set};
use crate::engine::vectors::WriteVectors;
use crate::error::Result;
use crate::model::{Memory, MemoryKey, Millis, NewMemory, format_time};
use crate::store::relations::{self, RelationRow};
use crate::store::{Db, memories, new_id, vectors};

/// The kind of memory this step condenses.
const EPISODE: &str = "episode";
/// The kind of memory it writes, and the relation kind that links it to its sources.
pub(super) const SUMMARY: &str = "summary";
pub(super) const SUMMARIZES: &str = "summarizes";
/// Groups summarised per transaction.
const GROUPS_PER_BATCH: usize = 20;
/// Sentences a summary may draw on per group (the earliest, when a group says more).
const MAX_SENTENCES: usize = 1_000;
/// Share of words two kept sentences may have in common.
const REPEAT_OVERLAP: f32 = 0.5;
/// Weight of each name, date or number a sentence adds to what is kept (at most three count).
const NEW_FACT_BONUS: f32 = 0.15;
/// Share of the best sentence's score a sentence needs to be kept.
const MIN_SHARE_OF_BEST: f32 = 0.3;
const DAY_MS: f64 = 86_400_000.0;

/// A summary planned for one group, with the versions it was planned from.
struct Planned {
    /// The header, and the episodes' texts in the order said (for an abstractive summary).
    about: String,
    texts: Vec<String>,
    anchor: (MemoryKey, i64),
    sources: Vec<(MemoryKey, i64)>,
    memory: NewMemory,
    created_at: Millis,
}

pub(super) fn run(run: &mut Run<'_>, ns: &str) -> Result<()> {
    let engine = run.engine;
    let groups = engine
        .store
        .read(|c| relations::part_of_groups(c, ns, EPISODE, run.policy.summarise_min_sources))?;
    let mut abstractive = engine.summarizer().cloned();
    // Without a summarizer of the server's own, the client's model writes them when the
    // client declared sampling and the run can ask it (a task).
    let mut sampling =
        abstractive.is_none() && !run.dry_run && run.answers.sampling && run.ctl.can_ask();
    for chunk in groups.chunks(GROUPS_PER_BATCH) {
        let mut planned = engine.store.read(|c| plan(run, c, ns, chunk))?;
        if let Some(s) = &abstractive {
            if let Err(why) = rewrite(run, s.as_ref(), &mut planned) {
                run.warnings.push(format!(
                    "the summarizer failed ({why}); extractive summaries were written instead"
                ));
                tracing::warn!(reason = %why, "summarizer failed; writing extractive summaries");
                abstractive = None;
            }
            run.tick()?;
        } else if sampling && !planned.is_empty() {
            let unwritten = sample(run, &mut planned)?;
            if unwritten > 0 {
                run.warnings.push(format!(
                    "the client's model wrote no summary for {unwritten} group(s) within {}; \
                     extractive summaries were written for them and the rest of the run",
                    duration_words(Duration::from_secs_f64(run.policy.answer_wait_s))
                ));
                // A client that did not answer is not kept waiting again.
                sampling = false;
            }
            run.tick()?;
        }
        run.saw(chunk.iter().map(|(_, m)| m.len()).sum());
        if run.dry_run {
            let batch = engine.store.read(|c| write(run, c, &planned, None))?;
            run.add(batch);
        } else {
            let texts: Vec<Option<(Option<&str>, &str)>> = planned
                .iter()
                .map(|p| Some((p.memory.name.as_deref(), p.memory.content.as_str())))
                .collect();
            let vecs = engine.embed_for_write(&texts);
            run.commit(|run, tx| write(run, tx, &planned, vecs.as_ref()))?;
        }
        run.tick()?;
    }
    Ok(())
}

/// Plans the summaries of `groups` that are due: anchor live, not summarised yet, every episode
/// older than the policy's age.
fn plan(
    run: &Run<'_>,
    db: &Db,
    ns: &str,
    groups: &[(MemoryKey, Vec<MemoryKey>)],
) -> Result<Vec<Planned>> {
    let cutoff = run.now - (run.policy.summarise_after_days * DAY_MS) as Millis;
    let model = run.engine.embedder().map(|e| e.model_id().to_owned());
    let mut out = Vec::new();
    for (anchor, members) in groups {
        let Some(anchor) = memories::by_key(db, *anchor)? else {
            continue;
        };
        if anchor.deleted_at.is_some() || relations::is_summarised(db, anchor.key)? {
            continue;
        }
        let rows = memories::by_keys(db, members)?;
        let by_key: HashMap<MemoryKey, Memory> = rows.into_iter().map(|m| (m.key, m)).collect();
        let episodes: Vec<&Memory> = members.iter().filter_map(|k| by_key.get(k)).collect();
        let newest = episodes
            .iter()
            .map(|m| m.created_at)
            .max()
            .unwrap_or(Millis::MAX);
        if episodes.len() < run.policy.summarise_min_sources || newest > cutoff {
            continue;
        }
        let vecs = match &model {
            Some(model) => vectors::current(db, model, members)?,
            None => HashMap::new(),
        };
        let central = centrality(
            episodes
                .iter()
                .map(|m| vecs.get(&m.key).map(|v| &v.vec[..])),
        );
        let texts: Vec<(&str, f32)> = episodes
            .iter()
            .zip(&central)
            .map(|(m, c)| (m.content.as_str(), *c))
            .collect();
        let oldest = episodes
            .iter()
            .map(|m| m.created_at)
            .min()
            .unwrap_or(newest);
        let about = header(&anchor.content, episodes.len(), oldest, newest);
        let content = extract(&about, &texts, run.policy.summary_max_chars);
        out.push(Planned {
            about,
            texts: episodes.iter().map(|m| m.content.clone()).collect(),
            anchor: (anchor.key, anchor.version),
            sources: episodes.iter().map(|m| (m.key, m.version)).collect(),
            memory: NewMemory {
                namespace: ns.to_owned(),
                kind: SUMMARY.into(),
                name: None,
                content,
                tags: vec![SUMMARY.into()],
                importance: 0.5,
                metadata: serde_json::json!({"summary_of": anchor.id, "sources": episodes.len()}),
                valid_from: None,
                valid_until: None,
            },
            created_at: newest,
        });
    }
    Ok(out)
}

/// Replaces the extractive text of each planned summary by the summarizer's (after the same
/// header, within the same length); stops at the first failure, keeping the extractive rest.
fn rewrite(
    run: &Run<'_>,
    s: &dyn Summarizer,
    planned: &mut [Planned],
) -> std::result::Result<(), String> {
    for p in planned {
        if run.ctl.is_cancelled() {
            break; // the caller's next tick stops the run before anything is written
        }
        let texts: Vec<&str> = p.texts.iter().map(String::as_str).collect();
        let room = run
            .policy
            .summary_max_chars
            .saturating_sub(p.about.chars().count() + 1);
        let text = s.summarize(&p.about, &texts, room)?;
        p.memory.content = format!("{} {text}", p.about);
        if let Some(o) = p.memory.metadata.as_object_mut() {
            o.insert("summarizer".into(), s.describe().into());
        }
    }
    Ok(())
}

/// What the client's model gets to write a planned summary in: the room after its header.
fn room(run: &Run<'_>, p: &Planned) -> usize {
    run.policy
        .summary_max_chars
        .saturating_sub(p.about.chars().count() + 1)
}

/// The key of the sampling request for a planned summary: its group as planned (a re-run
/// after a restart finds the answers given for the same groups).
fn sampling_key(p: &Planned) -> String {
    format!("summary-{}-v{}", p.anchor.0.0, p.anchor.1)
}

/// Asks the client's model for the planned summaries (MCP `sampling/createMessage`, through
/// the task's `input_required`), waiting at most the policy's `answer_wait_s`; a summary it
/// does not write stays extractive. Returns how many it did not write.
fn sample(run: &Run<'_>, planned: &mut [Planned]) -> Result<usize> {
    let requests: Map<String, Value> = planned
        .iter()
        .map(|p| {
            let texts: Vec<&str> = p.texts.iter().map(String::as_str).collect();
            let room = room(run, p);
            let (system, user) = chat::prompt(&p.about, &texts, room);
            let request = json!({"method": "sampling/createMessage", "params": {
                "systemPrompt": system,
                "messages": [{"role": "user", "content": {"type": "text", "text": user}}],
                "maxTokens": room / 2 + 32,
                "includeContext": "none",
                "temperature": 0,
            }});
            (sampling_key(p), request)
        })
        .collect();
    let wait = Duration::from_secs_f64(run.policy.answer_wait_s);
    let answers = run.ctl.ask(&requests, wait)?;
    let mut unwritten = 0;
    for p in planned.iter_mut() {
        let room = room(run, p);
        let text = answers
            .get(&sampling_key(p))
            .and_then(sampled_text)
            .map(|t| chat::tidy(t, room))
            .filter(|t| !t.is_empty());
        match text {
            Some(text) => {
                p.memory.content = format!("{} {text}", p.about);
                if let Some(o) = p.memory.metadata.as_object_mut() {
                    o.insert(
                        "summarizer".into(),
                        "the client's model (MCP sampling)".into(),
                    );
                }
            }
            None => unwritten += 1,
        }
    }
    Ok(unwritten)
}

/// The text of a `sampling/createMessage` result: its text content (one block, or the first
/// text block of a list).
fn sampled_text(answer: &Value) -> Option<&str> {
    let content = answer.get("content")?;
    let block = match content {
        Value::Array(blocks) => blocks.iter().find(|b| b["type"] == "text")?,
        block => block,
    };
    block.get("text").and_then(Value::as_str)
}

/// Writes the planned summaries whose group is as planned and still unsummarised.
/// `vecs`: the summaries' vectors, computed before the transaction, by index in `planned`.
fn write(
    run: &Run<'_>,
    db: &Db,
    planned: &[Planned],
    vecs: Option<&WriteVectors>,
) -> Result<Batch> {
    let mut batch = Batch::default();
    'groups: for (i, p) in planned.iter().enumerate() {
        for &(key, version) in std::iter::once(&p.anchor).chain(&p.sources) {
            match memories::by_key(db, key)? {
                Some(m) if m.version == version && m.deleted_at.is_none() => {}
                _ => continue 'groups,
            }
        }
        if relations::is_summarised(db, p.anchor.0)? {
            continue;
        }
        batch.counts.summaries += 1;
        let mut ids = Vec::new();
        if !run.dry_run {
            let stamps = memories::Stamps {
                created_at: p.created_at,
                ..memories::Stamps::now(run.now)
            };
            let summary = run.insert_memory(db, &p.memory, stamps, "summarise")?;
            if let Some(v) = vecs {
                v.store(db, i, summary.key, summary.version)?;
            }
            for &(dst, _) in std::iter::once(&p.anchor).chain(&p.sources) {
                link(run, db, summary.key, dst)?;
            }
            ids.push(summary.id);
        }
        batch.examples.push(Example {
            step: "summarise".into(),
            ids,
            into: None,
            text: truncate(&p.memory.content, 400),
        });
    }
    Ok(batch)
}

/// Links summary `src` to what it summarises, `dst` (recorded as the run's).
pub(super) fn link(run: &Run<'_>, db: &Db, src: MemoryKey, dst: MemoryKey) -> Result<()> {
    let row = RelationRow {
        key: 0,
        id: new_id("r_"),
        src: src.0,
        dst: dst.0,
        kind: SUMMARIZES.into(),
        weight: 1.0,
        metadata: serde_json::json!({}),
        created_at: run.now,
        reinforced_at: run.now,
        valid_from: None,
        valid_until: None,
        deleted_at: None,
    };
    run.insert_relation(db, &row, "summarise")?;
    Ok(())
}

/// How central each episode is: the cosine of its vector to the group's mean, scaled to 0–1
/// over the group (1 for every episode when none has a vector; the middle for one without).
fn centrality<'a>(vecs: impl Iterator<Item = Option<&'a [f32]>>) -> Vec<f32> {
    let vecs: Vec<Option<&[f32]>> = vecs.collect();
    let dim = vecs.iter().flatten().map(|v| v.len()).next().unwrap_or(0);
    let mut mean = vec![0f32; dim];
    for v in vecs.iter().flatten().filter(|v| v.len() == dim) {
        for (m, x) in mean.iter_mut().zip(v.iter()) {
            *m += x;
        }
    }
    let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        return vec![1.0; vecs.len()];
    }
    let cos: Vec<Option<f32>> = vecs
        .iter()
        .map(|v| {
            v.filter(|v| v.len() == dim).map(|v| {
                let n = v
                    .iter()
                    .map(|x| x * x)
                    .sum::<f32>()
                    .sqrt()
                    .max(f32::EPSILON);
                v.iter().zip(&mean).map(|(a, b)| a * b).sum::<f32>() / (n * norm)
            })
        })
        .collect();
    let lo = cos.iter().flatten().copied().fold(f32::INFINITY, f32::min);
    let hi = cos
        .iter()
        .flatten()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let span = (hi - lo).max(f32::EPSILON);
    cos.iter()
        .map(|c| c.map_or(0.5, |c| if hi > lo { (c - lo) / span } else { 1.0 }))
        .collect()
}

/// The first line of a summary: what the group is part of and when it was said.
fn header(anchor: &str, n: usize, oldest: Millis, newest: Millis) -> String {
    let what = sentences(anchor).into_iter().next().unwrap_or("a group");
    let what = truncate(what.trim_end_matches(['.', '!', '?']), 200);
    let (from, to) = (&format_time(oldest)[..10], &format_time(newest)[..10]);
    let when = if from == to {
        from.to_owned()
    } else {
        format!("{from} to {to}")
    };
    format!("Summary of {what} ({n} memories, {when}):")
}

/// The speaker of a line written `Name: text` (one to four words before the colon, the first
/// capitalised), so a later sentence of the same line keeps who said it.
fn speaker(text: &str) -> Option<&str> {
    let (label, rest) = text.split_once(": ")?;
    let words = label.split_whitespace().count();
    let capital = label.chars().next().is_some_and(char::is_uppercase);
    (capital && (1..=4).contains(&words) && label.len() <= 40 && !rest.is_empty())
        .then_some(label)
        .filter(|l| !l.contains(['.', '!', '?']))
}

/// Names, dates and numbers of a sentence, lower-cased: words with a digit, and capitalised
/// words other than the first.
fn facts(sentence: &str) -> HashSet<String> {
    sentence
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '/' || c == ':'))
        .filter(|w| !w.is_empty())
        .enumerate()
        .filter(|(i, w)| {
            w.chars().any(|c| c.is_ascii_digit())
                || (*i > 0 && w.chars().next().is_some_and(char::is_uppercase))
        })
        .map(|(_, w)| w.trim_end_matches(':').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// One sentence that may go into a summary.
struct Candidate {
    order: (usize, usize),
    text: String,
    words: Vec<String>,
    facts: HashSet<String>,
    /// Below 1 for greetings, questions and exclamations.
    weight: f32,
    score: f32,
}

/// The summary text: `header`, then the most central sentences of `sources` (each with its
/// episode's centrality), without repeats, at most `max_chars` characters in all, in the order
/// they were said.
pub(super) fn extract(header: &str, sources: &[(&str, f32)], max_chars: usize) -> String {
    let mut cands: Vec<Candidate> = Vec::new();
    for (i, (text, _)) in sources.iter().enumerate() {
        let label = speaker(text);
        for (j, s) in sentences(text).into_iter().enumerate() {
            if cands.len() >= MAX_SENTENCES {
                break;
            }
            let s = match label {
                Some(l) if j > 0 => format!("{l}: {s}"),
                _ => s.to_owned(),
            };
            let body = label.and_then(|l| s.strip_prefix(l)).unwrap_or(&s);
            cands.push(Candidate {
                order: (i, j),
                words: word_set(body),
                facts: facts(body),
                text: s,
                weight: 1.0,
                score: 0.0,
            });
        }
    }
    // Words said in several episodes are what the group is about.
    let mut df: HashMap<&str, usize> = HashMap::new();
    for (i, _) in sources.iter().enumerate() {
        let words: HashSet<&str> = cands
            .iter()
            .filter(|c| c.order.0 == i)
            .flat_map(|c| c.words.iter().map(String::as_str))
            .collect();
        for w in words {
            *df.entry(w).or_default() += 1;
        }
    }
    let topical: Vec<f32> = cands
        .iter()
        .map(|c| {
            let shared = c
                .words
                .iter()
                .filter(|w| w.chars().count() >= 3 && df.get(w.as_str()).is_some_and(|&n| n > 1))
                .count();
            shared as f32 / (c.words.len() as f32 + 1.0).sqrt()
        })
        .collect();
    let top = topical
        .iter()
        .copied()
        .fold(0f32, f32::max)
        .max(f32::EPSILON);
    for (c, t) in cands.iter_mut().zip(&topical) {
        let central = sources[c.order.0].1;
        // Greetings and one-word answers say nothing worth keeping; questions and exclamations
        // carry fewer facts than statements.
        let numbers = c
            .facts
            .iter()
            .any(|f| f.chars().any(|ch| ch.is_ascii_digit()));
        let mut weight = if c.words.len() < 5 && !numbers {
            0.2
        } else {
            1.0
        };
        if c.text.ends_with('?') {
            weight *= 0.5;
        } else if c.text.ends_with('!') {
            weight *= 0.8;
        }
        c.weight = weight;
        c.score = weight * (0.6 * central + 0.4 * t / top);
    }
    let budget = max_chars.saturating_sub(header.chars().count() + 1);
    let mut used = 0usize;
    let mut kept: Vec<usize> = Vec::new();
    // The header's names and dates, and who speaks, are kept already.
    let mut known: HashSet<String> = facts(header);
    for (text, _) in sources {
        if let Some(l) = speaker(text) {
            known.extend(l.split_whitespace().map(str::to_lowercase));
        }
    }
    // What scores far below the best is filler, even when it would fit; unless it says a
    // number, date or name the header does not (the least central sentence of a small group
    // scores 0 by its meaning, and "3 pottery classes" is not filler).
    let floor = MIN_SHARE_OF_BEST * cands.iter().map(|c| c.score).fold(0f32, f32::max);
    let mut open: Vec<usize> = (0..cands.len())
        .filter(|&i| {
            let c = &cands[i];
            c.score >= floor || (c.weight == 1.0 && !c.facts.is_subset(&known))
        })
        .collect();
    loop {
        let best = open
            .iter()
            .copied()
            .filter(|&i| used + cands[i].text.chars().count() < budget)
            .map(|i| {
                let c = &cands[i];
                let new = c.facts.difference(&known).count().min(3);
                (i, c.score + c.weight * NEW_FACT_BONUS * new as f32)
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((i, _)) = best else { break };
        open.retain(|&o| o != i);
        let c = &cands[i];
        if kept
            .iter()
            .any(|&k| jaccard(&cands[k].words, &c.words) >= REPEAT_OVERLAP)
        {
            continue;
        }
        used += c.text.chars().count() + 1;
        known.extend(c.facts.iter().cloned());
        kept.push(i);
    }
    kept.sort_by_key(|&i| cands[i].order);
    let mut out = header.to_owned();
    for i in kept {
        out.push(' ');
        out.push_str(&cands[i].text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_keeps_central_sentences_names_and_dates_within_its_length() {
        let turns = [
            ("Caroline: Hey Mel! Good to see you.", 0.2),
            (
                "Caroline: I went to the LGBTQ support group on 7 May 2023. It was powerful.",
                1.0,
            ),
            ("Melanie: Wow, the support group sounds great.", 0.8),
            ("Melanie: I took 3 pottery classes with my kids.", 0.6),
            ("Caroline: Thanks!", 0.1),
            ("Caroline: The support group made me feel accepted.", 0.9),
        ];
        let s = extract(
            "Summary of session 1 (6 memories, 2023-05-08):",
            &turns,
            300,
        );
        assert!(s.starts_with("Summary of session 1"), "{s}");
        assert!(s.chars().count() <= 300, "{} chars: {s}", s.chars().count());
        assert!(s.contains("7 May 2023"), "{s}");
        assert!(s.contains("Caroline"), "{s}");
        assert!(s.contains("3 pottery classes"), "{s}");
        assert!(!s.contains("Thanks!"), "{s}");
        // A later sentence of a line keeps who said it.
        assert!(
            s.contains("Caroline: It was powerful.") || !s.contains("powerful"),
            "{s}"
        );
        // In the order said.
        let a = s.find("7 May").unwrap();
        let b = s.find("pottery").unwrap();
        assert!(a < b, "{s}");
    }

    #[test]
    fn a_tight_length_keeps_the_most_central_sentence() {
        let turns = [
            ("Alice: The launch moved to Friday.", 1.0),
            ("Bob: Lunch was fine, nothing else to report today.", 0.0),
        ];
        let s = extract("Summary:", &turns, 50);
        assert_eq!(s, "Summary: Alice: The launch moved to Friday.");
    }

    #[test]
    fn centrality_scales_to_the_group_and_tolerates_missing_vectors() {
        let a = [1.0f32, 0.0];
        let b = [0.9f32, 0.1];
        let c = [0.0f32, 1.0];
        let cs = centrality([Some(&a[..]), Some(&b[..]), Some(&c[..]), None].into_iter());
        assert_eq!(cs.len(), 4);
        assert!(cs[1] >= cs[2] && cs[0] > cs[2], "{cs:?}");
        assert_eq!(cs[3], 0.5);
        assert_eq!(centrality([None, None].into_iter()), vec![1.0, 1.0]);
    }

    #[test]
    fn speakers_are_short_capitalised_labels() {
        assert_eq!(speaker("Caroline: hi there"), Some("Caroline"));
        assert_eq!(speaker("Note: the server restarts at 10:00"), Some("Note"));
        assert_eq!(speaker("it failed: badly"), None);
        assert_eq!(speaker("This is a long sentence. Then: more"), None);
    }
}
