//! The memory of a job: what a client (or its tasks) learned while working on one logical job,
//! kept by the job's name so that any instance on the same store, after any restart, resumes
//! it. A checkpoint is a version with its parent, written only from the version the writer
//! read (a stale writer gets a conflict naming the newer version); history lists the versions,
//! a diff compares two, a revert restores one as a new version. Memories remembered for the
//! job are filed under it, and resuming says what was learned since the latest checkpoint.

use serde_json::{Map, Value, json};

use crate::engine::validate;
use crate::engine::{Access, Engine};
use crate::error::{Error, Result};
use crate::model::{JobRef, JobResult, JobRow, JobVersion, Memory, MemoryKey, now_millis};
use crate::store::{jobs, memories};

/// Longest job name, in bytes.
pub const MAX_JOB_NAME: usize = 200;
/// Largest checkpoint body, in bytes of JSON.
const MAX_BODY: usize = 64 * 1024;
/// Most items in a checkpoint's `learned` or `open_questions`.
const MAX_ITEMS: usize = 200;

/// A job as its resumer reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// `None`: no checkpoint was ever written under this name.
    pub job: Option<JobRow>,
    pub head: Option<JobVersion>,
    /// Memories filed under the job since its latest checkpoint was written (by the job's head
    /// when they were filed, not by clocks), newest first, and how many.
    pub learned: Vec<Memory>,
    pub learned_total: i64,
    /// Its tasks' results, newest first, and how many.
    pub results: Vec<JobResult>,
    pub results_total: i64,
    /// The results (by id) whose content is left out: their work could read namespaces the
    /// reader may not.
    pub withheld: Vec<String>,
}

/// What changed from one version's body to another's.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionDiff {
    pub from: i64,
    pub to: i64,
    /// Per field of the body: `{"added": [...], "removed": [...]}` for lists, `{"from": …,
    /// "to": …}` for anything else that changed.
    pub changes: Map<String, Value>,
}

impl Engine {
    /// Checks a job's namespace against `access` and its name.
    fn job_key(&self, namespace: Option<&str>, name: &str, access: &Access) -> Result<String> {
        let ns = self.resolve_namespace("namespace", namespace)?;
        access.check("namespace", &ns)?;
        validate::label("name", name, MAX_JOB_NAME)?;
        Ok(ns)
    }

    /// The job `name` of `namespace` for resuming: its latest checkpoint, up to `limit`
    /// memories filed since it and `limit` task results. Writes nothing (a job that was never
    /// checkpointed reads as new).
    pub fn job_resume(
        &self,
        namespace: Option<&str>,
        name: &str,
        access: &Access,
        limit: usize,
    ) -> Result<Resumed> {
        let ns = self.job_key(namespace, name, access)?;
        self.store.snapshot(|c| {
            let job = jobs::get(c, &ns, name)?;
            let head = match &job {
                Some(j) if j.head > 0 => jobs::version(c, &ns, name, j.head)?,
                _ => None,
            };
            let since = head.as_ref().map_or(0, |h| h.version);
            let (keys, learned_total) = jobs::memories_since(c, &ns, name, since, limit)?;
            let mut learned = memories::by_keys(c, &keys)?;
            learned.retain(|m| m.deleted_at.is_none());
            let order = |k: &MemoryKey| keys.iter().position(|x| x == k);
            learned.sort_by_key(|m| order(&m.key));
            let (mut results, results_total) = jobs::results(c, &ns, name, limit)?;
            let mut withheld = Vec::new();
            for r in &mut results {
                if !reaches(access, r) {
                    r.result = None;
                    withheld.push(r.task_id.clone());
                }
            }
            Ok(Resumed {
                job,
                head,
                learned,
                learned_total,
                results,
                results_total,
                withheld,
            })
        })
    }

    /// Writes checkpoint `body` of job `name` from version `base` (0 for the first, which
    /// opens the job): the new version, or a conflict that names the newer version when
    /// another writer was first, or when the job is closed.
    pub fn job_checkpoint(
        &self,
        namespace: Option<&str>,
        name: &str,
        base: i64,
        body: &Value,
        author: &str,
        access: &Access,
    ) -> Result<JobVersion> {
        let ns = self.job_key(namespace, name, access)?;
        check_body(body)?;
        self.write_version(&ns, name, base, body, None, author, None)
    }

    /// Writes version `to`'s body again as a new version from `base` (a revert: history keeps
    /// every version).
    pub fn job_revert(
        &self,
        namespace: Option<&str>,
        name: &str,
        base: i64,
        to: i64,
        author: &str,
        access: &Access,
    ) -> Result<JobVersion> {
        let ns = self.job_key(namespace, name, access)?;
        let old = self.job_version_in(&ns, name, to)?;
        self.write_version(&ns, name, base, &old.body, Some(to), author, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_version(
        &self,
        ns: &str,
        name: &str,
        base: i64,
        body: &Value,
        reverts_to: Option<i64>,
        author: &str,
        task_id: Option<&str>,
    ) -> Result<JobVersion> {
        if base < 0 {
            return Err(Error::invalid(
                "base",
                format!("is {base}"),
                "give the version you read (0 before the first checkpoint)",
            ));
        }
        let now = now_millis();
        let written = self.store.write(|tx| {
            if base == 0 {
                jobs::open(tx, ns, name, author, now)?;
            }
            match jobs::checkpoint(tx, ns, name, base, body, reverts_to, author, task_id, now)? {
                Some(v) => Ok(Ok(v)),
                None => Ok(Err(jobs::get(tx, ns, name)?)),
            }
        })?;
        match written {
            Ok(version) => Ok(JobVersion {
                version,
                parent: (base > 0).then_some(base),
                reverts_to,
                body: body.clone(),
                author: author.to_owned(),
                task_id: task_id.map(str::to_owned),
                created_at: now,
            }),
            Err(current) => Err(conflict(name, base, current.as_ref())),
        }
    }

    fn job_version_in(&self, ns: &str, name: &str, version: i64) -> Result<JobVersion> {
        self.store
            .read(|c| jobs::version(c, ns, name, version))?
            .ok_or_else(|| {
                Error::not_found(
                    "job version",
                    format!("{name} v{version}"),
                    "list the versions with action \"history\"",
                )
            })
    }

    /// Up to `limit` versions of a job below `before`, newest first, with the job.
    pub fn job_history(
        &self,
        namespace: Option<&str>,
        name: &str,
        before: Option<i64>,
        limit: usize,
        access: &Access,
    ) -> Result<(JobRow, Vec<JobVersion>)> {
        let ns = self.job_key(namespace, name, access)?;
        self.store.snapshot(|c| {
            let job = jobs::get(c, &ns, name)?.ok_or_else(|| unknown(name))?;
            Ok((job, jobs::versions(c, &ns, name, before, limit)?))
        })
    }

    /// What changed from version `from` to version `to` of a job.
    pub fn job_diff(
        &self,
        namespace: Option<&str>,
        name: &str,
        from: i64,
        to: i64,
        access: &Access,
    ) -> Result<VersionDiff> {
        let ns = self.job_key(namespace, name, access)?;
        let a = self.job_version_in(&ns, name, from)?;
        let b = self.job_version_in(&ns, name, to)?;
        Ok(VersionDiff {
            from,
            to,
            changes: diff(&a.body, &b.body),
        })
    }

    /// Closes a job: no checkpoint is written to it after this.
    pub fn job_close(
        &self,
        namespace: Option<&str>,
        name: &str,
        access: &Access,
    ) -> Result<JobRow> {
        let ns = self.job_key(namespace, name, access)?;
        let now = now_millis();
        self.store.write(|tx| {
            let job = jobs::get(tx, &ns, name)?.ok_or_else(|| unknown(name))?;
            if job.state == "open" {
                jobs::close(tx, &ns, name, now)?;
            }
            jobs::get(tx, &ns, name)?.ok_or_else(|| unknown(name))
        })
    }

    /// Up to `n` jobs that `access` may read, the most recently updated first.
    pub fn jobs_in(&self, access: &Access, n: usize) -> Result<Vec<JobRow>> {
        let within = match access {
            Access::All => None,
            Access::Only(list) => Some(list.as_slice()),
        };
        self.store.read(|c| jobs::list(c, within, n))
    }

    /// The job a call's work is to be filed under, checked: a name within the limits, a
    /// namespace `access` allows, and a job that is not closed (nothing more is filed in a
    /// closed job). The job need not exist yet: filing opens it.
    pub fn job_to_file(
        &self,
        namespace: Option<&str>,
        name: &str,
        access: &Access,
    ) -> Result<JobRef> {
        let ns = self.job_key(namespace, name, access)?;
        if let Some(j) = self.store.read(|c| jobs::get(c, &ns, name))?
            && j.state != "open"
        {
            return Err(closed(name));
        }
        Ok(JobRef {
            namespace: ns,
            name: name.to_owned(),
        })
    }

    /// Files the outcome of a call under `job` (opened by `by` if new).
    pub fn file_job_result(&self, job: &JobRef, r: &JobResult, by: &str) -> Result<()> {
        self.store.write(|tx| {
            jobs::open(tx, &job.namespace, &job.name, by, r.finished_at)?;
            jobs::file_result(tx, &job.namespace, &job.name, r)
        })
    }

    /// The result filed under a job with id `task_id`, if `access` may read the job's
    /// namespace; its `result` is left out when the work could read namespaces `access` does
    /// not allow.
    pub fn job_result(&self, task_id: &str, access: &Access) -> Result<Option<JobResult>> {
        let Some((job, mut r)) = self.store.read(|c| jobs::result_of(c, task_id))? else {
            return Ok(None);
        };
        if !access.allows(&job.namespace) {
            return Ok(None);
        }
        if !reaches(access, &r) {
            r.result = None;
        }
        Ok(Some(r))
    }

    /// Files the memories with these ids under job `name` of their namespace (a memory already
    /// filed under a job stays there); returns how many were filed.
    pub fn file_in_job(&self, name: &str, ids: &[String], by: &str) -> Result<usize> {
        validate::label("job", name, MAX_JOB_NAME)?;
        let now = now_millis();
        self.store.write(|tx| {
            // The job of each namespace is opened, and its head read, once for all its memories.
            let mut by_namespace: std::collections::BTreeMap<String, Vec<MemoryKey>> =
                Default::default();
            for id in ids {
                if let Some(m) = memories::by_id(tx, id)? {
                    by_namespace.entry(m.namespace).or_default().push(m.key);
                }
            }
            let mut n = 0;
            for (ns, keys) in by_namespace {
                jobs::open(tx, &ns, name, by, now)?;
                n += jobs::file_memories(tx, &ns, name, &keys, now)?;
            }
            Ok(n)
        })
    }
}

/// Whether a reader with `access` may see what result `r` holds: its rights cover every
/// namespace the work could read.
pub fn reaches(access: &Access, r: &JobResult) -> bool {
    access.covers(&Access::from_json(r.reach.as_ref()))
}

/// A closed job, which takes nothing more.
fn closed(name: &str) -> Error {
    Error::Conflict {
        reason: format!("job {name:?} is closed; nothing more is written to it"),
        hint: "start a new job under another name".into(),
    }
}

/// A job nobody checkpointed.
fn unknown(name: &str) -> Error {
    Error::not_found(
        "job",
        name,
        "a job exists once its first checkpoint is written (action \"checkpoint\" with base 0)",
    )
}

/// The conflict of a write from `base` that lost: the job moved on, or is closed.
fn conflict(name: &str, base: i64, current: Option<&JobRow>) -> Error {
    match current {
        Some(j) if j.state != "open" => closed(name),
        Some(j) => Error::Conflict {
            reason: format!(
                "job {name:?} is at version {} (written {}), not {base} that this write started from",
                j.head,
                crate::model::format_time(j.updated_at)
            ),
            hint: format!(
                "resume it to read version {}, merge what changed, and write again with base {}",
                j.head, j.head
            ),
        },
        None => Error::Conflict {
            reason: format!("job {name:?} has no checkpoint yet, so base {base} is not one"),
            hint: "write its first checkpoint with base 0".into(),
        },
    }
}

/// A checkpoint body: a JSON object within the limits.
fn check_body(body: &Value) -> Result<()> {
    let Value::Object(o) = body else {
        return Err(Error::invalid(
            "checkpoint",
            "is not an object",
            "give note, learned, open_questions and/or state",
        ));
    };
    let size = body.to_string().len();
    if size > MAX_BODY {
        return Err(Error::invalid(
            "checkpoint",
            format!("is {size} bytes of JSON"),
            format!(
                "keep a checkpoint under {} KiB: remember the details as memories filed under the job, and keep their gist here",
                MAX_BODY / 1024
            ),
        ));
    }
    for field in ["learned", "open_questions"] {
        if let Some(list) = o.get(field).and_then(Value::as_array)
            && list.len() > MAX_ITEMS
        {
            return Err(Error::invalid(
                field,
                format!("has {} items", list.len()),
                format!("give at most {MAX_ITEMS}"),
            ));
        }
    }
    Ok(())
}

/// What changed from `a` to `b`, per top-level field.
fn diff(a: &Value, b: &Value) -> Map<String, Value> {
    let empty = Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Map::new();
    for k in keys {
        let (x, y) = (
            a.get(k).unwrap_or(&Value::Null),
            b.get(k).unwrap_or(&Value::Null),
        );
        if x == y {
            continue;
        }
        let change = match (x, y) {
            (Value::Array(xs), Value::Array(ys)) => json!({
                "added": ys.iter().filter(|v| !xs.contains(v)).collect::<Vec<_>>(),
                "removed": xs.iter().filter(|v| !ys.contains(v)).collect::<Vec<_>>(),
            }),
            _ => json!({"from": x, "to": y}),
        };
        out.insert(k.clone(), change);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_lists_what_lists_gained_and_lost_and_what_else_changed() {
        let a = json!({"note": "one", "learned": ["a", "b"], "state": {"page": 1}});
        let b = json!({"note": "two", "learned": ["b", "c"], "open_questions": ["why?"], "state": {"page": 1}});
        let d = diff(&a, &b);
        assert_eq!(d["note"], json!({"from": "one", "to": "two"}));
        assert_eq!(d["learned"], json!({"added": ["c"], "removed": ["a"]}));
        assert_eq!(d["open_questions"], json!({"from": null, "to": ["why?"]}));
        assert!(!d.contains_key("state"));
    }
}
