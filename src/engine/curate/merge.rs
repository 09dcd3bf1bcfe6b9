//! The merge step: finds near-duplicates within a namespace and kind — the same content, or at
//! least `merge_overlap` of their words shared (found through an index of their rarest words,
//! exactly and never by comparing all pairs) and vectors at least `merge_similarity` alike — and
//! folds each group into one survivor.
//! The survivor keeps its content plus the distinct sentences of the others, the union of tags,
//! the highest importance, the summed use and the earliest creation; relations move to it. The
//! others are marked `merged_into` it and forgotten. A named memory is never merged away, and
//! memories of two jobs (or of a job and none) never merge.

use std::collections::{HashMap, HashSet};

use crate::engine::curate::identity::{Identity, identity};
use crate::engine::curate::{Batch, Example, Run, jobs, pairs, truncate};
use crate::engine::overlap::{jaccard, word_set};
use crate::error::Result;
use crate::model::{Memory, MemoryKey};
use crate::store::relations::{self, RelationRow};
use crate::store::{Db, memories, new_id, vectors};

/// Clusters applied per transaction.
pub(super) const CLUSTERS_PER_BATCH: usize = 50;

/// One group to fold: the survivor, the others, and every member's version when planned.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cluster {
    pub survivor: MemoryKey,
    pub members: Vec<MemoryKey>,
    pub versions: Vec<(MemoryKey, i64)>,
}

/// Sort key of [`rank`].
type Rank = (
    std::cmp::Reverse<bool>,
    std::cmp::Reverse<i64>,
    std::cmp::Reverse<i64>,
    i64,
    std::cmp::Reverse<usize>,
    MemoryKey,
);

/// The order in which memories become survivors: named first, then the most important, the
/// most used, the oldest (the first wording; later ones add their new sentences), the longest.
fn rank(m: &Memory) -> Rank {
    (
        std::cmp::Reverse(m.name.is_some()),
        std::cmp::Reverse((m.importance * 1e6) as i64),
        std::cmp::Reverse(m.access_count),
        m.created_at,
        std::cmp::Reverse(m.content.len()),
        m.key,
    )
}

/// Whether two metadata objects disagree on a key both carry (a source's identity: a turn id, a
/// URL, a session): such memories are different records even when they read the same.
fn metadata_conflicts(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return false;
    };
    a.iter()
        .any(|(k, v)| k != "merged_from" && b.get(k).is_some_and(|w| w != v))
}

/// Whether `a` and `b` may be one memory: same namespace, kind and validity, both live and not
/// archived, not two names, no metadata in conflict.
fn compatible(a: &Memory, b: &Memory) -> bool {
    a.key != b.key
        && a.namespace == b.namespace
        && a.kind == b.kind
        && a.valid_from == b.valid_from
        && a.valid_until == b.valid_until
        && a.deleted_at.is_none()
        && b.deleted_at.is_none()
        && a.archived_at.is_none()
        && b.archived_at.is_none()
        && !(a.name.is_some() && b.name.is_some())
        && !metadata_conflicts(&a.metadata, &b.metadata)
}

pub(super) fn run(run: &mut Run<'_>, ns: &str) -> Result<()> {
    let clusters = plan(run, ns)?;
    for chunk in clusters.chunks(CLUSTERS_PER_BATCH) {
        if run.dry_run {
            let batch = run.engine.store.read(|c| fold_all(run, c, chunk))?;
            run.add(batch);
            run.tick()?;
        } else {
            run.commit(|run, tx| fold_all(run, tx, chunk))?;
            run.tick()?;
        }
    }
    Ok(())
}

fn fold_all(run: &Run<'_>, db: &Db, clusters: &[Cluster]) -> Result<Batch> {
    let mut batch = Batch::default();
    for c in clusters {
        fold(run, db, c, &mut batch)?;
    }
    Ok(batch)
}

/// Finds the groups of `ns`: exact repeats first, then close vectors among the rest.
fn plan(run: &mut Run<'_>, ns: &str) -> Result<Vec<Cluster>> {
    let engine = run.engine;
    let mut clusters = Vec::new();
    let mut taken: HashSet<MemoryKey> = HashSet::new();
    for group in engine.store.read(|c| memories::exact_repeats(c, ns))? {
        let (mut rows, filed) = engine
            .store
            .read(|c| Ok((memories::by_keys(c, &group)?, jobs::jobs_of(c, &group)?)))?;
        rows.sort_by_key(rank);
        // The best-ranked takes every compatible one of its job; the rest group again among
        // themselves.
        while !rows.is_empty() {
            let survivor = rows.remove(0);
            let (members, rest): (Vec<Memory>, Vec<Memory>) = rows.into_iter().partition(|m| {
                m.name.is_none()
                    && compatible(&survivor, m)
                    && jobs::same_job(&filed, survivor.key, m.key)
            });
            rows = rest;
            if members.is_empty() {
                continue;
            }
            taken.insert(survivor.key);
            taken.extend(members.iter().map(|m| m.key));
            clusters.push(Cluster {
                survivor: survivor.key,
                members: members.iter().map(|m| m.key).collect(),
                versions: std::iter::once(&survivor)
                    .chain(&members)
                    .map(|m| (m.key, m.version))
                    .collect(),
            });
        }
    }
    let Some(embedder) = engine.embedder().cloned() else {
        run.warnings.push(
            "no embedder is configured: only exact repeats were merged (start with an embedder to find near-duplicates)".into(),
        );
        return Ok(clusters);
    };
    // Every memory of the scope must have its vector (embedded first when it is new).
    engine.ensure_vectors(true)?;
    engine.sync_vectors(None)?;
    let model = embedder.model_id().to_owned();
    let (keys, sets) = word_sets(run, ns)?;
    // Pairs that share enough words (exact, through an index of rare words: never all pairs),
    // then those whose vectors are close enough.
    let alike = pairs::similar_pairs(&sets, run.policy.merge_overlap, |_| run.tick())?;
    drop(sets);
    let mut involved: Vec<MemoryKey> = alike
        .iter()
        .flat_map(|&(a, b, _)| [keys[a], keys[b]])
        .collect();
    involved.sort_unstable();
    involved.dedup();
    let mut stored = HashMap::with_capacity(involved.len());
    for chunk in involved.chunks(super::PAGE) {
        stored.extend(engine.store.read(|c| vectors::current(c, &model, chunk))?);
        run.tick()?;
    }
    let unembedded = involved.iter().filter(|k| !stored.contains_key(k)).count();
    let min_sim = run.policy.merge_similarity as f32;
    let close: Vec<(MemoryKey, MemoryKey)> = alike
        .iter()
        .map(|&(a, b, _)| (keys[a], keys[b]))
        .filter(|(a, b)| match (stored.get(a), stored.get(b)) {
            (Some(va), Some(vb)) => cosine(&va.vec, &vb.vec) >= min_sim,
            _ => false,
        })
        .collect();
    drop(stored);
    let mut wanted: Vec<MemoryKey> = close.iter().flat_map(|&(a, b)| [a, b]).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut known: HashMap<MemoryKey, Memory> = HashMap::with_capacity(wanted.len());
    let mut filed = HashMap::new();
    for chunk in wanted.chunks(super::PAGE) {
        let (rows, jobs) = engine
            .store
            .read(|c| Ok((memories::by_keys(c, chunk)?, jobs::jobs_of(c, chunk)?)))?;
        known.extend(rows.into_iter().map(|m| (m.key, m)));
        filed.extend(jobs);
    }
    // What identifies (numbers, ids, names, negations) must agree: near-duplicates that differ
    // in one say different things, and stay apart.
    let ids: HashMap<MemoryKey, Identity> = known
        .iter()
        .map(|(k, m)| (*k, identity(&m.content)))
        .collect();
    let mut pairs: HashMap<MemoryKey, Vec<MemoryKey>> = HashMap::new();
    for (a, b) in close {
        if let (Some(ma), Some(mb)) = (known.get(&a), known.get(&b))
            && compatible(ma, mb)
        {
            // Notes of two jobs (or of a job and none) stay apart however alike they read.
            if ids[&a].differs(&ids[&b]).is_some() || !jobs::same_job(&filed, a, b) {
                run.counts.kept_apart += 1;
                continue;
            }
            pairs.entry(a).or_default().push(b);
            pairs.entry(b).or_default().push(a);
        }
    }
    known.retain(|key, _| pairs.contains_key(key));
    if unembedded > 0 {
        run.warnings.push(format!(
            "{unembedded} memories of {ns:?} that read like others have no vector yet and were merged only with exact repeats; the next run covers them"
        ));
    }
    // Star clusters around the best-ranked memories, so a group never chains away from its
    // survivor.
    let mut centres: Vec<&Memory> = pairs.keys().filter_map(|k| known.get(k)).collect();
    centres.sort_by_key(|m| rank(m));
    for centre in centres {
        if taken.contains(&centre.key) {
            continue;
        }
        let mut candidates: Vec<&Memory> = pairs[&centre.key]
            .iter()
            .filter(|k| {
                !taken.contains(k) && known[k].name.is_none() && compatible(centre, &known[k])
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .map(|k| &known[k])
            .collect();
        // Best-ranked first; each member must agree with every one already taken too (two that
        // each only add to the centre may still differ from each other).
        candidates.sort_by_key(|m| rank(m));
        let mut members: Vec<MemoryKey> = Vec::with_capacity(candidates.len());
        for m in candidates {
            if members
                .iter()
                .all(|k| ids[k].differs(&ids[&m.key]).is_none())
            {
                members.push(m.key);
            }
        }
        if members.is_empty() {
            continue;
        }
        members.sort();
        taken.insert(centre.key);
        taken.extend(members.iter().copied());
        let versions = std::iter::once(centre.key)
            .chain(members.iter().copied())
            .map(|k| (k, known[&k].version))
            .collect();
        clusters.push(Cluster {
            survivor: centre.key,
            members,
            versions,
        });
    }
    Ok(clusters)
}

/// The word set of every live, unarchived memory of `ns` (in key order, with their keys), in
/// groups of the same kind and validity: only those may merge.
fn word_sets(run: &mut Run<'_>, ns: &str) -> Result<(Vec<MemoryKey>, Vec<pairs::WordSet>)> {
    let mut vocab: HashMap<String, u32> = HashMap::new();
    let mut groups: HashMap<(String, Option<i64>, Option<i64>), u32> = HashMap::new();
    let (mut keys, mut sets) = (Vec::new(), Vec::new());
    super::for_each_page(run, ns, |_, page| {
        for m in page {
            let next = groups.len() as u32;
            let group = *groups
                .entry((m.kind.clone(), m.valid_from, m.valid_until))
                .or_insert(next);
            let words = word_set(&m.content)
                .into_iter()
                .map(|w| {
                    let next = vocab.len() as u32;
                    *vocab.entry(w).or_insert(next)
                })
                .collect();
            keys.push(m.key);
            sets.push(pairs::WordSet { group, words });
        }
        Ok(())
    })?;
    Ok((keys, sets))
}

/// Cosine similarity of two vectors (0 when either is all zeros).
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}

/// Sentences of a text: split after `.`, `!` or `?` followed by a space, and at line breaks.
pub(super) fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let b = text.as_bytes();
    for i in 0..b.len() {
        let end = match b[i] {
            b'\n' => Some(i),
            b'.' | b'!' | b'?' if b.get(i + 1).is_none_or(|c| *c == b' ') => Some(i + 1),
            _ => None,
        };
        if let Some(end) = end {
            let s = text[start..end].trim();
            if !s.is_empty() {
                out.push(s);
            }
            start = end;
        }
    }
    let s = text[start..].trim();
    if !s.is_empty() {
        out.push(s);
    }
    out
}

/// The survivor's content plus the sentences of `others` that say something it does not (word
/// overlap below `overlap` with every sentence kept, or a number, id or name the text kept so
/// far never mentions), within `max_bytes`.
fn union_of_sentences(survivor: &str, others: &[&str], overlap: f64, max_bytes: usize) -> String {
    let mut kept: Vec<Vec<String>> = sentences(survivor).into_iter().map(word_set).collect();
    let mut out = survivor.to_owned();
    let mut said = identity(&out);
    for other in others {
        for s in sentences(other) {
            let words = word_set(s);
            if words.is_empty() {
                continue;
            }
            let repeated = kept.iter().any(|k| jaccard(k, &words) as f64 >= overlap);
            if repeated && !identity(s).adds_to(&said) {
                continue;
            }
            if out.len() + 1 + s.len() > max_bytes {
                return out;
            }
            out.push(' ');
            out.push_str(s);
            kept.push(words);
            said = identity(&out);
        }
    }
    out
}

/// Folds one cluster (skipped when any of its memories changed since it was planned).
fn fold(run: &Run<'_>, db: &Db, c: &Cluster, batch: &mut Batch) -> Result<()> {
    let keys: Vec<MemoryKey> = c.versions.iter().map(|(k, _)| *k).collect();
    let rows: HashMap<MemoryKey, Memory> = memories::by_keys(db, &keys)?
        .into_iter()
        .map(|m| (m.key, m))
        .collect();
    let unchanged = c.versions.iter().all(|(k, v)| {
        rows.get(k)
            .is_some_and(|m| m.version == *v && m.deleted_at.is_none() && m.archived_at.is_none())
    });
    if !unchanged {
        return Ok(());
    }
    let survivor = &rows[&c.survivor];
    let members: Vec<&Memory> = c.members.iter().map(|k| &rows[k]).collect();
    let mut merged = survivor.clone();
    let contents: Vec<&str> = members.iter().map(|m| m.content.as_str()).collect();
    merged.content = union_of_sentences(
        &survivor.content,
        &contents,
        run.policy.merge_overlap,
        run.engine.cfg.limits.max_content_bytes,
    );
    for m in &members {
        for t in &m.tags {
            if !merged.tags.contains(t) {
                merged.tags.push(t.clone());
            }
        }
        merged.importance = merged.importance.max(m.importance);
        merged.access_count += m.access_count;
        merged.created_at = merged.created_at.min(m.created_at);
        merged.accessed_at = merged.accessed_at.max(m.accessed_at);
        if super::salience::of(m, run.now) > super::salience::of(&merged, run.now) {
            merged.salience = m.salience;
            merged.salience_at = m.salience_at;
        }
    }
    if let Some(meta) = merged.metadata.as_object_mut() {
        let from = meta
            .entry("merged_from")
            .or_insert_with(|| serde_json::json!([]));
        if let Some(list) = from.as_array_mut() {
            list.extend(
                members
                    .iter()
                    .map(|m| serde_json::Value::from(m.id.clone())),
            );
        }
    }
    if merged.content != survivor.content {
        merged.version += 1;
    }
    merged.updated_at = run.now;
    batch.counts.survivors += 1;
    batch.counts.merged += members.len() as u64;
    batch.examples.push(Example {
        step: "merge".into(),
        ids: members.iter().map(|m| m.id.clone()).collect(),
        into: Some(survivor.id.clone()),
        text: truncate(&merged.content, 200),
    });
    if run.dry_run {
        return Ok(());
    }
    run.save_memory(db, survivor, &merged, "merge")?;
    let member_keys: HashSet<i64> = members.iter().map(|m| m.key.0).collect();
    for m in &members {
        let mut gone = (*m).clone();
        gone.deleted_at = Some(run.now);
        gone.merged_into = Some(survivor.id.clone());
        run.save_memory(db, m, &gone, "merged")?;
    }
    for m in &members {
        for r in relations::rows_around(db, m.key)? {
            let to = |k: i64| {
                if member_keys.contains(&k) {
                    survivor.key.0
                } else {
                    k
                }
            };
            repoint(run, db, &r, to, &mut batch.counts)?;
        }
    }
    Ok(())
}

/// Combined weight of two relations folded into one: either holds.
fn combine(a: f64, b: f64) -> f64 {
    (1.0 - (1.0 - a) * (1.0 - b)).clamp(0.0, 1.0)
}

/// Moves relation `r` to the ends `to` maps its ends to: closed when that makes a self-loop,
/// folded into the relation already there, or re-created between the new ends. Nothing when
/// the ends stay.
pub(super) fn repoint(
    run: &Run<'_>,
    db: &Db,
    r: &RelationRow,
    to: impl Fn(i64) -> i64,
    counts: &mut super::Counts,
) -> Result<()> {
    let (src, dst) = (to(r.src), to(r.dst));
    if (src, dst) == (r.src, r.dst) {
        return Ok(());
    }
    let mut closed = r.clone();
    closed.deleted_at = Some(run.now);
    run.save_relation(db, r, &closed, "moved")?;
    if src == dst {
        counts.relations_closed += 1;
        return Ok(());
    }
    match relations::row_between(db, src, dst, &r.kind)? {
        Some(there) if there.deleted_at.is_none() => {
            let mut folded = there.clone();
            folded.weight = combine(there.weight, r.weight);
            folded.reinforced_at = there.reinforced_at.max(r.reinforced_at);
            folded.created_at = there.created_at.min(r.created_at);
            run.save_relation(db, &there, &folded, "fold")?;
            counts.relations_folded += 1;
        }
        Some(forgotten) => {
            // The unique (src, dst, kind) row exists, forgotten: it takes the moved relation.
            let revived = RelationRow {
                key: forgotten.key,
                id: forgotten.id.clone(),
                src,
                dst,
                deleted_at: None,
                ..r.clone()
            };
            run.save_relation(db, &forgotten, &revived, "fold")?;
            counts.relations_moved += 1;
        }
        None => {
            let mut metadata = r.metadata.clone();
            if let Some(o) = metadata.as_object_mut() {
                o.insert("moved_from".into(), r.id.clone().into());
            }
            let moved = RelationRow {
                key: 0,
                id: new_id("r_"),
                src,
                dst,
                metadata,
                deleted_at: None,
                ..r.clone()
            };
            run.insert_relation(db, &moved, "moved")?;
            counts.relations_moved += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_split_at_ends_and_lines() {
        assert_eq!(
            sentences("Alice leads Atlas. She drinks tea!\nBob? yes 3.5 kg"),
            vec![
                "Alice leads Atlas.",
                "She drinks tea!",
                "Bob?",
                "yes 3.5 kg"
            ]
        );
        assert!(sentences("  ").is_empty());
    }

    #[test]
    fn the_union_adds_only_sentences_that_say_something_new() {
        let u = union_of_sentences(
            "Alice leads Atlas.",
            &["Alice leads Atlas!", "Atlas ships in March."],
            0.5,
            1_000,
        );
        assert_eq!(u, "Alice leads Atlas. Atlas ships in March.");
        let capped = union_of_sentences("Alice leads Atlas.", &["Atlas ships in March."], 0.5, 20);
        assert_eq!(capped, "Alice leads Atlas.");
        // A sentence much like one kept, that names what the text kept never mentions, stays.
        let u = union_of_sentences(
            "The invoice is paid.",
            &["The invoice INV-7 is paid.", "The invoice is paid!"],
            0.5,
            1_000,
        );
        assert_eq!(u, "The invoice is paid. The invoice INV-7 is paid.");
        assert_eq!(combine(0.5, 0.5), 0.75);
    }

    #[test]
    fn metadata_that_disagrees_keeps_records_apart() {
        use serde_json::json;
        assert!(metadata_conflicts(
            &json!({"turn": "D1:3"}),
            &json!({"turn": "D7:5"})
        ));
        assert!(!metadata_conflicts(
            &json!({"turn": "D1:3"}),
            &json!({"turn": "D1:3", "x": 1})
        ));
        assert!(!metadata_conflicts(
            &json!({"merged_from": ["a"]}),
            &json!({"merged_from": ["b"]})
        ));
        assert!(!metadata_conflicts(&json!({}), &json!(null)));
    }
}
