//! Jobs in curation. A memory filed under a job merges only with memories of the same job (the
//! merge step asks [`same_job`]) and is not archived for low salience while its job is open or
//! closed less than the policy's `job_retention_days` ago ([`kept`]). A closed job gets one
//! summary memory — its last checkpoint and the most central sentences of its memories — linked
//! `summarizes` to its memories (the summarise step, [`summarise`]); once its retention has
//! passed, its memories are archived (the archive step, [`archive`]). The summary stays live: it
//! is what the job leaves in recall once its context is archived, and its links lead back.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::engine::curate::summarise::{self, SUMMARY, extract};
use crate::engine::curate::{Batch, Example, Run, truncate};
use crate::engine::vectors::WriteVectors;
use crate::error::Result;
use crate::model::{JobRef, JobRow, MemoryKey, Millis, NewMemory, format_time};
use crate::store::{Db, jobs, memories};

const DAY_MS: f64 = 86_400_000.0;
/// Closed jobs summarised (or archived) per pass of a step over a namespace.
const JOBS_PER_PASS: usize = 100;
/// Most memories of a job a summary draws on and links to (the newest; the count says all).
const MAX_SOURCES: usize = 1_000;
/// Memories archived per transaction.
const PER_BATCH: usize = 500;

/// The time before which a job must have been closed for its context to be archived.
pub(super) fn retention_cutoff(run: &Run<'_>) -> Millis {
    run.now - (run.policy.job_retention_days * DAY_MS) as Millis
}

/// The job of each of `keys` that is filed under one.
pub(super) fn jobs_of(db: &Db, keys: &[MemoryKey]) -> Result<HashMap<MemoryKey, JobRef>> {
    Ok(jobs::jobs_of(db, keys)?.into_iter().collect())
}

/// Whether `a` and `b` belong to the same job, or both to none.
pub(super) fn same_job(filed: &HashMap<MemoryKey, JobRef>, a: MemoryKey, b: MemoryKey) -> bool {
    filed.get(&a) == filed.get(&b)
}

/// Those of `keys` that their job keeps from archiving.
pub(super) fn kept(run: &Run<'_>, db: &Db, keys: &[MemoryKey]) -> Result<HashSet<MemoryKey>> {
    Ok(jobs::kept_by_jobs(db, keys, retention_cutoff(run))?
        .into_iter()
        .collect())
}

/// A closed job's summary as planned: the memory and the sources it links.
struct Planned {
    job: JobRow,
    memory: NewMemory,
    sources: Vec<MemoryKey>,
}

/// The summarise step for the closed jobs of `ns` that have no summary yet.
pub(super) fn summarise(run: &mut Run<'_>, ns: &str) -> Result<()> {
    let engine = run.engine;
    let due = engine
        .store
        .read(|c| jobs::closed_unsummarised(c, ns, JOBS_PER_PASS))?;
    for job in due {
        let planned = engine.store.read(|c| plan(run, c, job.clone()))?;
        if run.dry_run {
            run.add(Batch {
                counts: crate::engine::curate::Counts {
                    summaries: 1,
                    ..Default::default()
                },
                examples: vec![example(&planned, None)],
            });
        } else {
            let m = &planned.memory;
            let vecs = engine.embed_for_write(&[Some((m.name.as_deref(), m.content.as_str()))]);
            run.commit(|run, tx| write(run, tx, &planned, vecs.as_ref()))?;
        }
        run.tick()?;
    }
    Ok(())
}

fn plan(run: &Run<'_>, db: &Db, job: JobRow) -> Result<Planned> {
    let mut keys = Vec::new();
    let mut after = MemoryKey(0);
    loop {
        let page = jobs::memory_keys(db, &job.namespace, &job.name, after, 10_000)?;
        let Some(last) = page.last() else { break };
        after = *last;
        keys.extend(page);
    }
    let n = keys.len();
    // The newest memories (largest keys) when the job has more than a summary draws on.
    let sources: Vec<MemoryKey> = keys.split_off(n.saturating_sub(MAX_SOURCES));
    let mut rows = memories::by_keys(db, &sources)?;
    rows.retain(|m| m.deleted_at.is_none());
    rows.sort_by_key(|m| (m.created_at, m.key));
    // Those forgotten (or merged away) are not counted; beyond the sources, all are.
    let n = n - (sources.len() - rows.len());
    let (_, results) = jobs::results(db, &job.namespace, &job.name, 0)?;
    let head = match job.head {
        0 => None,
        v => jobs::version(db, &job.namespace, &job.name, v)?,
    };
    let closed = job.closed_at.map_or_else(String::new, |t| {
        format!("closed {}; ", &format_time(t)[..10])
    });
    let mut header = format!(
        "Summary of job {} ({closed}{n} memories, {results} task results):",
        job.name
    );
    if let Some(body) = head.as_ref().map(|h| &h.body) {
        let list = |field: &str| -> Option<String> {
            let items: Vec<&str> = body
                .get(field)?
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            (!items.is_empty()).then(|| items.join("; "))
        };
        if let Some(note) = body.get("note").and_then(Value::as_str) {
            header.push_str(&format!(
                " Last checkpoint: {}.",
                note.trim_end_matches('.')
            ));
        }
        if let Some(l) = list("learned") {
            header.push_str(&format!(" Learned: {l}."));
        }
        if let Some(q) = list("open_questions") {
            header.push_str(&format!(" Open questions: {q}."));
        }
    }
    let max = run.policy.summary_max_chars;
    let header = truncate(&header, max * 2 / 3);
    let texts: Vec<(&str, f32)> = rows.iter().map(|m| (m.content.as_str(), 1.0)).collect();
    let content = extract(&header, &texts, max);
    Ok(Planned {
        memory: NewMemory {
            namespace: job.namespace.clone(),
            kind: SUMMARY.into(),
            name: None,
            content,
            tags: vec![SUMMARY.into(), "job".into()],
            importance: 0.5,
            metadata: json!({"summary_of_job": job.name, "sources": n, "task_results": results}),
            valid_from: None,
            valid_until: None,
        },
        sources: rows.iter().map(|m| m.key).collect(),
        job,
    })
}

fn example(p: &Planned, id: Option<String>) -> Example {
    Example {
        step: "summarise".into(),
        ids: id.into_iter().collect(),
        into: None,
        text: truncate(&p.memory.content, 400),
    }
}

/// Writes a planned job summary, unless the job was summarised meanwhile.
/// `vecs`: the summary's vector, computed before the transaction.
fn write(run: &Run<'_>, db: &Db, p: &Planned, vecs: Option<&WriteVectors>) -> Result<Batch> {
    let mut batch = Batch::default();
    if !jobs::unsummarised(db, &p.job.namespace, &p.job.name)? {
        return Ok(batch);
    }
    let summary = run.insert_memory(db, &p.memory, memories::Stamps::now(run.now), "summarise")?;
    if let Some(v) = vecs {
        v.store(db, 0, summary.key, summary.version)?;
    }
    for &dst in &p.sources {
        summarise::link(run, db, summary.key, dst)?;
    }
    jobs::set_summary(db, &p.job.namespace, &p.job.name, summary.key)?;
    batch.counts.summaries += 1;
    batch.examples.push(example(p, Some(summary.id)));
    Ok(batch)
}

/// The archive step for the closed jobs of `ns` whose retention has passed: their memories are
/// archived (a summary was written first; without one, the job waits for the summarise step).
pub(super) fn archive(run: &mut Run<'_>, ns: &str) -> Result<()> {
    let engine = run.engine;
    let cutoff = retention_cutoff(run);
    let due = engine
        .store
        .read(|c| jobs::due_for_archive(c, ns, cutoff, JOBS_PER_PASS))?;
    for job in due {
        let mut after = MemoryKey(0);
        loop {
            let keys = engine
                .store
                .read(|c| jobs::memory_keys(c, &job.namespace, &job.name, after, PER_BATCH))?;
            let Some(last) = keys.last() else { break };
            after = *last;
            if run.dry_run {
                let batch = engine.store.read(|c| archive_keys(run, c, &job, &keys))?;
                run.add(batch);
            } else {
                run.commit(|run, tx| archive_keys(run, tx, &job, &keys))?;
            }
        }
        if !run.dry_run {
            run.commit(|run, tx| {
                jobs::set_archived(tx, &job.namespace, &job.name, run.now)?;
                Ok(Batch::default())
            })?;
        }
    }
    Ok(())
}

/// Archives the live, unarchived memories of `keys` (filed under the closed `job`).
fn archive_keys(run: &Run<'_>, db: &Db, job: &JobRow, keys: &[MemoryKey]) -> Result<Batch> {
    let mut batch = Batch::default();
    for m in memories::by_keys(db, keys)? {
        if m.deleted_at.is_some() || m.archived_at.is_some() {
            continue;
        }
        batch.counts.archived += 1;
        if batch.examples.is_empty() {
            batch.examples.push(Example {
                step: "archive".into(),
                ids: vec![m.id.clone()],
                into: None,
                text: format!(
                    "the context of job {} (closed, retention passed): {}",
                    job.name,
                    truncate(&m.content, 160)
                ),
            });
        }
        if !run.dry_run {
            let mut archived = m.clone();
            archived.archived_at = Some(run.now);
            run.save_memory(db, &m, &archived, "archive")?;
        }
    }
    Ok(batch)
}
