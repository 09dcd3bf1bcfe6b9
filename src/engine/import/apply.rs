//! One batch of an import: each record checked against the limits and against what is stored
//! (new, already there, to merge), then written in one transaction, each record in a savepoint
//! so a bad one leaves nothing half-written. Also the read-only twin a dry run uses.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::engine::write::{
    DEFAULT_WEIGHT, RememberItem, existing_identity, same_memory, snapshot,
};
use crate::engine::{Access, Engine, validate};
use crate::error::{Error, Result};
use crate::formats::{MemoryRecord, Ref, RelationRecord};
use crate::model::{DEFAULT_NAMESPACE, Memory, MemoryKey, Millis, NewMemory};
use crate::store::history::{self, Entity};
use crate::store::memories::{self, Stamps};
use crate::store::relations::{self, NewRelation, RelationStamps};
use crate::store::{self, Db, changes, import_keys, jobs, new_id, vectors};

/// A record of a batch after validation.
pub(super) enum Item {
    Memory {
        line: u64,
        rec: Box<MemoryRecord>,
        new: NewMemory,
    },
    Relation {
        line: u64,
        rec: RelationRecord,
    },
    Bad {
        line: u64,
        reason: String,
    },
}

impl Item {
    /// This item, or a bad one when it is a memory for a namespace outside `access`.
    pub(super) fn within(self, access: &Access) -> Item {
        match self {
            Item::Memory { line, new, .. } if !access.allows(&new.namespace) => Item::Bad {
                line,
                reason: access.refusal("namespace", &new.namespace).to_string(),
            },
            other => other,
        }
    }
}

/// What one batch did.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Counts {
    pub memories_added: u64,
    pub memories_existing: u64,
    pub memories_merged: u64,
    pub relations_added: u64,
    pub relations_existing: u64,
    pub vectors_added: u64,
    /// (line, reason) of records that failed.
    pub errors: Vec<(u64, String)>,
}

/// How a memory record stands against the database.
enum Found {
    New,
    Present(MemoryKey),
    Merge(Box<Memory>),
}

fn valid_id(id: &str, prefix: &str) -> bool {
    id.starts_with(prefix)
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Finds the stored memory a record stands for: by import identity, by kept id, then as
/// `remember` does (a named record by its name, an unnamed one by content, kind and validity
/// among unnamed memories), except that an unnamed record with its own source id is new.
fn classify(c: &Db, rec: &MemoryRecord, new: &NewMemory) -> Result<Found> {
    let ns = &new.namespace;
    if let Some(ext) = &rec.ext
        && let Some(k) = import_keys::get(c, ns, ext)?
    {
        return Ok(Found::Present(k));
    }
    if let Some(id) = &rec.id
        && let Some(m) = memories::by_id(c, id)?
        && m.namespace == *ns
    {
        return Ok(Found::Present(m.key));
    }
    if foreign_identity(rec) && new.name.is_none() {
        // Not imported before (above): a source's own record, even if another says the same.
        return Ok(Found::New);
    }
    match (existing_identity(c, new)?, &new.name) {
        (None, _) => Ok(Found::New),
        (Some(m), Some(_)) if rec.merge_by_name => Ok(Found::Merge(Box::new(m))),
        (Some(m), Some(name)) if !same_memory(&m, new) => Err(Error::Conflict {
            reason: format!(
                "name {name:?} is taken in namespace {ns:?} by {} with other content, kind or validity",
                m.id
            ),
            hint: "rename one of them, or import into another namespace".into(),
        }),
        (Some(m), _) => Ok(Found::Present(m.key)),
    }
}

/// Whether a record carries an identity from its source other than a mnemograph id (a
/// MemoryGraph memory's id, a LoCoMo turn): such records are told apart by that id alone.
fn foreign_identity(rec: &MemoryRecord) -> bool {
    rec.ext.is_some() && rec.id.is_none()
}

/// Where a relation end points: the memory a source id became, a stored id, or a name in
/// `ns`. Source ids and stored ids are looked up in the namespaces the import writes to only
/// (`ns` first, then `written`): a record whose id was taken by a memory of another namespace
/// got a new id, and its relations follow it there, never to the memory that holds the id.
fn resolve(c: &Db, ns: &str, written: &BTreeSet<String>, r: &Ref) -> Result<Option<MemoryKey>> {
    let live = |m: Option<Memory>| m.filter(|m| m.deleted_at.is_none()).map(|m| m.key);
    let within = |m: &Memory| m.namespace == ns || written.contains(&m.namespace);
    let by_source_id = |e: &str| -> Result<Option<MemoryKey>> {
        for n in std::iter::once(ns).chain(written.iter().map(String::as_str).filter(|n| *n != ns))
        {
            if let Some(k) = import_keys::get(c, n, e)? {
                return Ok(Some(k));
            }
        }
        Ok(None)
    };
    Ok(match r {
        Ref::Ext(e) => match by_source_id(e)? {
            Some(k) => Some(k),
            None if e.starts_with("m_") => live(memories::by_id(c, e)?.filter(within)),
            None => None,
        },
        Ref::Id(id) => match by_source_id(id)? {
            Some(k) => Some(k),
            None => live(memories::by_id(c, id)?.filter(within)),
        },
        Ref::Name(n) => live(memories::by_name(c, ns, n, false)?),
    })
}

fn describe(r: &Ref) -> String {
    match r {
        Ref::Ext(e) | Ref::Id(e) => e.clone(),
        Ref::Name(n) => format!("{n:?}"),
    }
}

/// Lines of `extra` that `content` lacks, appended; `None` when it has them all.
fn merged_content(content: &str, extra: &str) -> Option<String> {
    let have: HashSet<&str> = content.lines().map(str::trim).collect();
    let missing: Vec<&str> = extra
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !have.contains(l))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut out = content.trim_end().to_owned();
    for l in missing {
        out.push('\n');
        out.push_str(l);
    }
    Some(out)
}

impl Engine {
    /// Checks a record against the limits and turns it into a memory to store.
    pub(super) fn validate_record(
        &self,
        line: u64,
        rec: MemoryRecord,
        namespace: Option<&str>,
    ) -> Item {
        let item = RememberItem {
            content: rec.content.clone(),
            kind: rec.kind.clone(),
            name: rec.name.clone(),
            tags: rec.tags.clone(),
            importance: rec.importance,
            namespace: namespace.map(str::to_owned).or(rec.namespace.clone()),
            metadata: rec.metadata.clone(),
            valid_from: rec.valid_from,
            valid_until: rec.valid_until,
            links: Vec::new(),
        };
        let mut checked = self.validate_new("", &item);
        if checked.is_ok() {
            for (j, l) in rec.links.iter().enumerate() {
                let f = format!("links[{j}]");
                let bad = validate::label(
                    &format!("{f}.kind"),
                    &l.kind,
                    self.cfg.limits.max_name_bytes,
                )
                .and_then(|_| {
                    l.weight
                        .map_or(Ok(()), |w| validate::unit(&format!("{f}.weight"), w))
                });
                if let Err(e) = bad {
                    checked = Err(e);
                    break;
                }
            }
        }
        match checked {
            Ok(new) => Item::Memory {
                line,
                rec: Box::new(rec),
                new,
            },
            Err(e) => Item::Bad {
                line,
                reason: e.to_string(),
            },
        }
    }

    /// Checks a relation record against the limits.
    pub(super) fn validate_relation(&self, line: u64, rec: RelationRecord) -> Item {
        let limits = &self.cfg.limits;
        let checked = validate::label("kind", &rec.kind, limits.max_name_bytes)
            .and_then(|_| rec.weight.map_or(Ok(()), |w| validate::unit("weight", w)))
            .and_then(|_| {
                rec.metadata
                    .as_ref()
                    .map_or(Ok(()), |m| validate::metadata("metadata", m, limits))
            });
        match checked {
            Ok(()) => Item::Relation { line, rec },
            Err(e) => Item::Bad {
                line,
                reason: e.to_string(),
            },
        }
    }

    /// Indexes (into `items`) of the memory records that are not stored yet, read without
    /// taking the write lock (so embedding them can happen outside it).
    pub(super) fn new_records(&self, items: &[Item]) -> Result<Vec<usize>> {
        self.store.read(|c| {
            let mut out = Vec::new();
            for (i, it) in items.iter().enumerate() {
                if let Item::Memory { rec, new, .. } = it
                    && matches!(classify(c, rec, new), Ok(Found::New))
                {
                    out.push(i);
                }
            }
            Ok(out)
        })
    }

    /// Writes one batch in `tx`. `vectors` holds embeddings computed beforehand, by item index.
    pub(super) fn apply_batch(
        &self,
        tx: &Db,
        items: &[Item],
        vectors: &HashMap<usize, Vec<f32>>,
        req: &super::ImportRequest,
        written: &BTreeSet<String>,
        now: Millis,
    ) -> Result<Counts> {
        let namespace = req.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        let (actor, access) = (req.actor.as_str(), &req.access);
        let mut counts = Counts::default();
        let model = self.embedder.as_ref().map(|e| (e.model_id(), e.dim()));
        let mut keys: HashMap<usize, (MemoryKey, Millis)> = HashMap::new();
        // What the batch taught the job it is filed under: memories added, or added to.
        let mut learned = Vec::new();
        for (i, it) in items.iter().enumerate() {
            match it {
                Item::Bad { line, reason } => counts.errors.push((*line, reason.clone())),
                Item::Memory { line, rec, new } => {
                    let res = store::in_savepoint(tx, || {
                        self.apply_memory(tx, rec, new, vectors.get(&i), model, actor, now)
                    });
                    match res {
                        Ok((key, outcome, vector)) => {
                            keys.insert(i, (key, rec.created_at.unwrap_or(now)));
                            match outcome {
                                Outcome::Added => counts.memories_added += 1,
                                Outcome::Existing => counts.memories_existing += 1,
                                Outcome::Merged => counts.memories_merged += 1,
                            }
                            if outcome != Outcome::Existing {
                                learned.push(key);
                            }
                            counts.vectors_added += u64::from(vector);
                        }
                        Err(e) => counts.errors.push((*line, e.to_string())),
                    }
                }
                Item::Relation { .. } => {}
            }
        }
        // Relations after every memory of the batch, so they may point forward within it.
        for (i, it) in items.iter().enumerate() {
            match it {
                Item::Memory { line, rec, new } => {
                    let Some(&(src, created)) = keys.get(&i) else {
                        continue;
                    };
                    for link in &rec.links {
                        let r = RelationRecord {
                            id: None,
                            from: Ref::Ext(String::new()),
                            to: link.to.clone(),
                            kind: link.kind.clone(),
                            weight: link.weight,
                            metadata: None,
                            created_at: Some(created),
                            reinforced_at: None,
                            valid_from: None,
                            valid_until: None,
                        };
                        let res = store::in_savepoint(tx, || {
                            let at = (new.namespace.as_str(), written);
                            self.apply_relation(tx, at, Some(src), &r, now, access)
                        });
                        tally(&mut counts, *line, res);
                    }
                }
                Item::Relation { line, rec } => {
                    let res = store::in_savepoint(tx, || {
                        self.apply_relation(tx, (namespace, written), None, rec, now, access)
                    });
                    tally(&mut counts, *line, res);
                }
                Item::Bad { .. } => {}
            }
        }
        if let Some(job) = &req.job
            && !learned.is_empty()
        {
            jobs::open(tx, &job.namespace, &job.name, actor, now)?;
            jobs::file_memories(tx, &job.namespace, &job.name, &learned, now)?;
        }
        counts.errors.sort_by_key(|(line, _)| *line);
        Ok(counts)
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_memory(
        &self,
        tx: &Db,
        rec: &MemoryRecord,
        new: &NewMemory,
        embedded: Option<&Vec<f32>>,
        model: Option<(&str, usize)>,
        actor: &str,
        now: Millis,
    ) -> Result<(MemoryKey, Outcome, bool)> {
        match classify(tx, rec, new)? {
            Found::Present(key) => {
                if let Some(ext) = &rec.ext {
                    import_keys::put(tx, &new.namespace, ext, key)?;
                }
                Ok((key, Outcome::Existing, false))
            }
            Found::Merge(old) => {
                let Some(content) = merged_content(&old.content, &new.content) else {
                    return Ok((old.key, Outcome::Existing, false));
                };
                validate::content("content", &content, &self.cfg.limits)?;
                history::record(
                    tx,
                    Entity::Memory,
                    old.key.0,
                    "import",
                    actor,
                    now,
                    &snapshot(&old),
                )?;
                let mut m = (*old).clone();
                m.content = content;
                m.version += 1;
                m.updated_at = now;
                memories::save(tx, &m)?;
                changes::log_memory(tx, m.key, changes::ChangeOp::Upsert)?;
                Ok((m.key, Outcome::Merged, false))
            }
            Found::New => {
                let id = match &rec.id {
                    Some(id) if valid_id(id, "m_") && memories::by_id(tx, id)?.is_none() => {
                        id.clone()
                    }
                    _ => new_id("m_"),
                };
                let created = rec.created_at.unwrap_or(now);
                let stamps = Stamps {
                    created_at: created,
                    updated_at: rec.updated_at.unwrap_or(created),
                    accessed_at: rec.accessed_at,
                    access_count: rec.access_count.unwrap_or(0).max(0),
                    stored_at: now,
                    archived_at: rec.archived_at,
                };
                let m = memories::insert_with(tx, &id, new, stamps)?;
                changes::log_memory(tx, m.key, changes::ChangeOp::Insert)?;
                for h in &rec.history {
                    // The snapshot names the memory as this database knows it.
                    let mut previous = h.previous.clone();
                    if let Some(o) = previous.as_object_mut() {
                        o.insert("key".into(), m.key.0.into());
                        o.insert("id".into(), m.id.clone().into());
                    }
                    history::record(
                        tx,
                        Entity::Memory,
                        m.key.0,
                        &h.op,
                        &h.actor,
                        h.at,
                        &previous,
                    )?;
                }
                if let Some(ext) = &rec.ext
                    && *ext != m.id
                {
                    import_keys::put(tx, &new.namespace, ext, m.key)?;
                }
                let mut stored = false;
                if let Some((model, dim)) = model {
                    let carried = rec.vector.as_ref().filter(|v| {
                        v.model == model
                            && v.vec.len() == dim
                            && v.vec.iter().all(|x| x.is_finite())
                    });
                    if let Some(v) = carried.map(|v| &v.vec).or(embedded) {
                        stored = vectors::put(tx, m.key, model, m.version, v)?;
                    }
                }
                Ok((m.key, Outcome::Added, stored))
            }
        }
    }

    fn apply_relation(
        &self,
        tx: &Db,
        (namespace, written): (&str, &BTreeSet<String>),
        from: Option<MemoryKey>,
        rec: &RelationRecord,
        now: Millis,
        access: &Access,
    ) -> Result<bool> {
        let missing = |end: &str, r: &Ref| unresolved(&format!("{end} {}", describe(r)), written);
        let src = match from {
            Some(k) => k,
            None => resolve(tx, namespace, written, &rec.from)?
                .ok_or_else(|| missing("from", &rec.from))?,
        };
        let dst =
            resolve(tx, namespace, written, &rec.to)?.ok_or_else(|| missing("to", &rec.to))?;
        if !access.is_all() {
            // An end outside the importer's namespaces does not exist for it.
            for (end, key, r) in [("from", src, &rec.from), ("to", dst, &rec.to)] {
                if let Some(m) = memories::by_key(tx, key)?
                    && !access.allows(&m.namespace)
                {
                    return Err(missing(end, r));
                }
            }
        }
        let id = match &rec.id {
            Some(id) if valid_id(id, "r_") && relations::by_id(tx, id)?.is_none() => id.clone(),
            _ => new_id("r_"),
        };
        let created = rec.created_at.unwrap_or(now);
        let new = NewRelation {
            src,
            dst,
            kind: &rec.kind,
            weight: rec.weight.unwrap_or(DEFAULT_WEIGHT),
            metadata: rec.metadata.as_ref(),
        };
        let stamps = RelationStamps {
            created_at: created,
            // Like a memory's salience, an imported relation's strength counts from when it
            // enters this database, unless the record says when it was last used.
            reinforced_at: rec.reinforced_at.unwrap_or(now),
            valid_from: rec.valid_from,
            valid_until: rec.valid_until,
        };
        match relations::insert_if_absent(tx, &id, &new, stamps)? {
            Some(key) => {
                changes::log_relation(tx, key)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// What a batch would do, written nowhere. `seen` carries what earlier batches of the same
    /// dry run would have added (identities: ext, id, name, unnamed content with kind and
    /// validity).
    pub(super) fn dry_batch(
        &self,
        items: &[Item],
        namespace: &str,
        written: &BTreeSet<String>,
        seen: &mut HashSet<String>,
    ) -> Result<Counts> {
        // One snapshot, not a read: it records what it saw in `seen`, so it is never run twice.
        self.store.snapshot(|c| {
            let mut counts = Counts::default();
            for it in items {
                match it {
                    Item::Bad { line, reason } => counts.errors.push((*line, reason.clone())),
                    Item::Memory { line, rec, new } => {
                        let ns = &new.namespace;
                        let idents: Vec<String> = [
                            rec.ext.as_ref().map(|e| format!("ext:{ns}:{e}")),
                            rec.id.as_ref().map(|e| format!("id:{e}")),
                            new.name.as_ref().map(|n| format!("name:{ns}:{n}")),
                            (new.name.is_none() && !foreign_identity(rec)).then(|| {
                                let h = memories::content_hash(&new.content);
                                format!(
                                    "hash:{ns}:{}:{:?}:{:?}:{}",
                                    new.kind,
                                    new.valid_from,
                                    new.valid_until,
                                    hex(&h)
                                )
                            }),
                        ]
                        .into_iter()
                        .flatten()
                        .collect();
                        match classify(c, rec, new) {
                            Err(e) => counts.errors.push((*line, e.to_string())),
                            Ok(Found::Present(_)) => counts.memories_existing += 1,
                            Ok(Found::Merge(m)) => {
                                if merged_content(&m.content, &new.content).is_some() {
                                    counts.memories_merged += 1;
                                } else {
                                    counts.memories_existing += 1;
                                }
                            }
                            Ok(Found::New) if idents.iter().any(|i| seen.contains(i)) => {
                                counts.memories_existing += 1
                            }
                            Ok(Found::New) => {
                                counts.memories_added += 1;
                                if self.embedder.is_some() {
                                    counts.vectors_added += 1;
                                }
                                seen.extend(idents);
                            }
                        }
                        for link in &rec.links {
                            let ok = resolve(c, ns, written, &link.to)?.is_some()
                                || known(seen, ns, &link.to);
                            tally(&mut counts, *line, dry_relation(ok, &link.to, written));
                        }
                    }
                    Item::Relation { line, rec } => {
                        let from = resolve(c, namespace, written, &rec.from)?;
                        let to = resolve(c, namespace, written, &rec.to)?;
                        let res = match (from, to) {
                            (Some(s), Some(d)) => {
                                Ok(relations::find(c, s, d, &rec.kind)?.is_none())
                            }
                            (f, _) if f.is_none() && !known(seen, namespace, &rec.from) => {
                                dry_relation(false, &rec.from, written)
                            }
                            (_, t) if t.is_none() && !known(seen, namespace, &rec.to) => {
                                dry_relation(false, &rec.to, written)
                            }
                            _ => Ok(true),
                        };
                        tally(&mut counts, *line, res);
                    }
                }
            }
            counts.errors.sort_by_key(|(line, _)| *line);
            Ok(counts)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Added,
    Existing,
    Merged,
}

fn tally(counts: &mut Counts, line: u64, res: Result<bool>) {
    match res {
        Ok(true) => counts.relations_added += 1,
        Ok(false) => counts.relations_existing += 1,
        Err(e) => counts.errors.push((line, e.to_string())),
    }
}

fn dry_relation(resolvable: bool, r: &Ref, written: &BTreeSet<String>) -> Result<bool> {
    if resolvable {
        Ok(true)
    } else {
        Err(unresolved(&describe(r), written))
    }
}

/// The error of a relation end that names no memory of the namespaces the import writes to.
fn unresolved(end: &str, written: &BTreeSet<String>) -> Error {
    let namespaces = written
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Error::not_found(
        "memory",
        end.to_owned(),
        format!(
            "import the memory before the relations that use it (same source, earlier), or create it first; ids are looked up in the namespaces this import writes to ({namespaces})"
        ),
    )
}

fn known(seen: &HashSet<String>, ns: &str, r: &Ref) -> bool {
    match r {
        Ref::Ext(e) | Ref::Id(e) => {
            seen.contains(&format!("ext:{ns}:{e}")) || seen.contains(&format!("id:{e}"))
        }
        Ref::Name(n) => seen.contains(&format!("name:{ns}:{n}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_adds_only_missing_lines() {
        assert_eq!(merged_content("a\nb", "b\na"), None);
        assert_eq!(merged_content("a\nb", "c\n\nb"), Some("a\nb\nc".into()));
        assert!(valid_id("m_abc-1", "m_"));
        assert!(!valid_id("m_a b", "m_"));
        assert!(!valid_id("r_x", "m_"));
    }
}
