//! Writes: remember, relate, update, forget, restore. Each is one SQLite transaction that also
//! appends to the change log and keeps the previous version in history.

use crate::engine::vectors::WriteVectors;
use crate::engine::{Access, Engine, validate};
use crate::error::{Error, Result};
use crate::model::{
    DEFAULT_IMPORTANCE, DEFAULT_KIND, Memory, MemoryKey, MemoryPatch, MemoryRef, Millis, NewMemory,
    Relation, now_millis,
};
use crate::store::history::{self, Entity};
use crate::store::relations::{self, NewRelation};
use crate::store::{self, Db, changes, memories, new_id};

/// Weight of a relation that names none.
pub(crate) const DEFAULT_WEIGHT: f64 = 1.0;

/// A link created together with a memory: from the new memory to `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Id or name (in the new memory's namespace) of the target.
    pub to: String,
    pub kind: String,
    pub weight: Option<f64>,
}

/// One memory to remember, as a caller gives it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RememberItem {
    pub content: String,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub tags: Vec<String>,
    pub importance: Option<f64>,
    pub namespace: Option<String>,
    pub metadata: Option<serde_json::Value>,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
    pub links: Vec<Link>,
}

/// What `remember` did with one item.
#[derive(Debug, Clone, PartialEq)]
pub struct Remembered {
    pub id: String,
    /// True when the same memory already existed (see [`Engine::remember`]); its id is returned.
    pub duplicate: bool,
    pub n_links: usize,
}

/// One relation to create or update.
#[derive(Debug, Clone, PartialEq)]
pub struct RelateItem {
    pub from: String,
    pub to: String,
    pub kind: String,
    pub weight: Option<f64>,
    pub metadata: Option<serde_json::Value>,
    pub namespace: Option<String>,
}

/// A relation named by id, or by its two ends and kind.
#[derive(Debug, Clone, PartialEq)]
pub enum RelationRef {
    Id(String),
    Ends {
        from: String,
        to: String,
        kind: String,
        namespace: Option<String>,
    },
}

impl std::fmt::Display for RelationRef {
    /// As messages name it: the id, or its ends and kind.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelationRef::Id(id) => f.write_str(id),
            RelationRef::Ends {
                from,
                to,
                kind,
                namespace,
            } => {
                write!(f, "{from} -[{kind}]-> {to}")?;
                match namespace {
                    Some(ns) => write!(f, " in namespace {ns:?}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// What `forget` or `restore` changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ForgetReport {
    pub memories: Vec<String>,
    pub relations: Vec<String>,
}

/// A caller's reference: an id when it looks like one (`m_…`) and exists, else a name.
pub(crate) fn memory_ref(s: &str, namespace: &str) -> MemoryRef {
    if s.starts_with("m_") {
        MemoryRef::Id(s.to_owned())
    } else {
        MemoryRef::Name {
            namespace: namespace.to_owned(),
            name: s.to_owned(),
        }
    }
}

/// Finds a memory by reference; forgotten ones only with `include_forgotten`.
pub(crate) fn lookup(conn: &Db, r: &MemoryRef, include_forgotten: bool) -> Result<Option<Memory>> {
    let found = match r {
        MemoryRef::Id(id) => match memories::by_id(conn, id)? {
            Some(m) => Some(m),
            // An id-looking string may still be someone's name.
            None => {
                memories::by_name(conn, crate::model::DEFAULT_NAMESPACE, id, include_forgotten)?
            }
        },
        MemoryRef::Name { namespace, name } => {
            memories::by_name(conn, namespace, name, include_forgotten)?
        }
    };
    Ok(found.filter(|m| include_forgotten || m.deleted_at.is_none()))
}

/// [`lookup`] for a caller with `access`: a memory outside its namespaces does not exist for
/// it, so that the answer does not tell whether one is there.
pub(crate) fn lookup_in(
    conn: &Db,
    r: &MemoryRef,
    include_forgotten: bool,
    access: &Access,
) -> Result<Option<Memory>> {
    Ok(lookup(conn, r, include_forgotten)?.filter(|m| access.allows(&m.namespace)))
}

fn require(conn: &Db, field: &str, r: &MemoryRef, access: &Access) -> Result<Memory> {
    lookup_in(conn, r, false, access)?.ok_or_else(|| {
        Error::not_found(
            "memory",
            r.to_string(),
            format!("check `{field}`: use an id returned by remember/recall, or a name in the right namespace"),
        )
    })
}

pub(crate) fn snapshot(m: &Memory) -> serde_json::Value {
    serde_json::to_value(m).unwrap_or(serde_json::Value::Null)
}

impl Engine {
    fn validate_item(&self, i: usize, item: &RememberItem) -> Result<NewMemory> {
        self.validate_new(&format!("memories[{i}]."), item)
    }

    /// Checks one memory against the limits; field names in errors start with `prefix`.
    pub(crate) fn validate_new(&self, prefix: &str, item: &RememberItem) -> Result<NewMemory> {
        let limits = &self.cfg.limits;
        let f = |name: &str| format!("{prefix}{name}");
        validate::content(&f("content"), &item.content, limits)?;
        let namespace = self.resolve_namespace(&f("namespace"), item.namespace.as_deref())?;
        let kind = item.kind.as_deref().unwrap_or(DEFAULT_KIND);
        validate::label(&f("kind"), kind, limits.max_name_bytes)?;
        if let Some(name) = &item.name {
            validate::name(&f("name"), name, limits)?;
        }
        validate::tags(&f("tags"), &item.tags, limits)?;
        let importance = item.importance.unwrap_or(DEFAULT_IMPORTANCE);
        validate::unit(&f("importance"), importance)?;
        if let Some(m) = &item.metadata {
            validate::metadata(&f("metadata"), m, limits)?;
        }
        if let (Some(a), Some(b)) = (item.valid_from, item.valid_until)
            && a > b
        {
            return Err(Error::invalid(
                f("valid_until"),
                "is before valid_from",
                "give a valid_until after valid_from",
            ));
        }
        for (j, link) in item.links.iter().enumerate() {
            validate::label(
                &f(&format!("links[{j}].kind")),
                &link.kind,
                limits.max_name_bytes,
            )?;
            if let Some(w) = link.weight {
                validate::unit(&f(&format!("links[{j}].weight")), w)?;
            }
        }
        let mut tags = item.tags.clone();
        tags.dedup();
        Ok(NewMemory {
            namespace,
            kind: kind.to_owned(),
            name: item.name.clone(),
            content: item.content.clone(),
            tags,
            importance,
            metadata: item
                .metadata
                .clone()
                .unwrap_or_else(|| serde_json::json!({})),
            valid_from: item.valid_from,
            valid_until: item.valid_until,
        })
    }

    /// Stores memories (one transaction for the whole batch). Each item succeeds or fails on its
    /// own: a bad item gets its error and every valid one is kept. Idempotent: a named memory is
    /// identified by its name (the same name with the same content, kind and validity is a
    /// repeat; with anything else a conflict), an unnamed one by (namespace, kind, content,
    /// validity) among live unnamed memories. A repeat returns the existing id with `duplicate`.
    pub fn remember(&self, items: &[RememberItem]) -> Result<Vec<Result<Remembered>>> {
        self.remember_in(items, &Access::All)
    }

    /// [`Engine::remember`] for a caller limited to the namespaces of `access`: an item for
    /// another namespace, or linked to a memory there, fails on its own.
    pub fn remember_in(
        &self,
        items: &[RememberItem],
        access: &Access,
    ) -> Result<Vec<Result<Remembered>>> {
        validate::batch("memories", items.len(), &self.cfg.limits)?;
        let total: usize = items.iter().map(|i| i.content.len()).sum();
        if total > self.cfg.limits.max_call_bytes {
            return Err(Error::invalid(
                "memories",
                format!("carry {total} bytes of content in one call"),
                format!(
                    "send at most {} bytes per call: split the batch, or use `import` for bulk loads",
                    self.cfg.limits.max_call_bytes
                ),
            ));
        }
        let checked: Vec<Result<NewMemory>> = items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                let new = self.validate_item(i, it)?;
                access.check(&format!("memories[{i}].namespace"), &new.namespace)?;
                Ok(new)
            })
            .collect();
        // The writer embeds what it writes, outside the write lock, and stores each vector with
        // its memory: every process sharing the store then finds it there.
        let texts: Vec<Option<(Option<&str>, &str)>> = checked
            .iter()
            .map(|n| {
                n.as_ref()
                    .ok()
                    .map(|n| (n.name.as_deref(), n.content.as_str()))
            })
            .collect();
        let vecs = self.embed_for_write(&texts);
        let vecs = vecs.as_ref();
        let now = now_millis();
        // Without links, no item refers to another: the batch is looked up, inserted and
        // logged a few statements at a time instead of item by item.
        let linked = items.iter().any(|i| !i.links.is_empty());
        let out = self.store.write(|tx| {
            if !linked {
                return remember_unlinked(tx, checked, vecs, now);
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, (item, new)) in items.iter().zip(checked).enumerate() {
                let res = new.and_then(|new| {
                    store::in_savepoint(tx, || remember_one(tx, (i, item, &new), vecs, now, access))
                });
                out.push(res);
            }
            Ok(out)
        })?;
        if out.iter().any(|r| r.is_ok()) {
            self.mark_dirty();
        }
        Ok(out)
    }

    /// Creates relations, or updates weight/metadata of existing ones (unique on from, to, kind).
    /// Each item succeeds or fails on its own.
    pub fn relate(&self, items: &[RelateItem]) -> Result<Vec<Result<(Relation, bool)>>> {
        self.relate_in(items, &Access::All)
    }

    /// [`Engine::relate`] for a caller limited to the namespaces of `access`: both ends of each
    /// relation must lie in them.
    pub fn relate_in(
        &self,
        items: &[RelateItem],
        access: &Access,
    ) -> Result<Vec<Result<(Relation, bool)>>> {
        validate::batch("relations", items.len(), &self.cfg.limits)?;
        let now = now_millis();
        let out = self.store.write(|tx| {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(store::in_savepoint(tx, || {
                    self.relate_one(tx, i, item, now, access)
                }));
            }
            Ok(out)
        })?;
        self.mark_dirty();
        Ok(out)
    }

    fn relate_one(
        &self,
        tx: &Db,
        i: usize,
        item: &RelateItem,
        now: Millis,
        access: &Access,
    ) -> Result<(Relation, bool)> {
        let f = |name: &str| format!("relations[{i}].{name}");
        let ns = self.resolve_namespace(&f("namespace"), item.namespace.as_deref())?;
        validate::label(&f("kind"), &item.kind, self.cfg.limits.max_name_bytes)?;
        let weight = item.weight.unwrap_or(DEFAULT_WEIGHT);
        validate::unit(&f("weight"), weight)?;
        if let Some(m) = &item.metadata {
            validate::metadata(&f("metadata"), m, &self.cfg.limits)?;
        }
        let src = require(tx, &f("from"), &memory_ref(&item.from, &ns), access)?;
        let dst = require(tx, &f("to"), &memory_ref(&item.to, &ns), access)?;
        let new = NewRelation {
            src: src.key,
            dst: dst.key,
            kind: &item.kind,
            weight,
            metadata: item.metadata.as_ref(),
        };
        upsert_relation(tx, &new, (&src.id, &dst.id), now)
    }

    /// Changes one memory; the previous version is kept in history.
    pub fn update(&self, target: &MemoryRef, patch: &MemoryPatch, actor: &str) -> Result<Memory> {
        self.update_in(target, patch, actor, &Access::All)
    }

    /// [`Engine::update`] for a caller limited to the namespaces of `access`.
    pub fn update_in(
        &self,
        target: &MemoryRef,
        patch: &MemoryPatch,
        actor: &str,
        access: &Access,
    ) -> Result<Memory> {
        let limits = &self.cfg.limits;
        if let Some(c) = &patch.content {
            validate::content("content", c, limits)?;
        }
        if let Some(k) = &patch.kind {
            validate::label("kind", k, limits.max_name_bytes)?;
        }
        if let Some(t) = &patch.tags {
            validate::tags("tags", t, limits)?;
        }
        if let Some(i) = patch.importance {
            validate::unit("importance", i)?;
        }
        if let Some(m) = &patch.metadata {
            validate::metadata("metadata", m, limits)?;
        }
        if (MemoryPatch {
            if_version: None,
            ..patch.clone()
        }) == MemoryPatch::default()
        {
            return Err(Error::invalid(
                "update",
                "changes nothing",
                "give at least one of content, kind, tags, importance, metadata, valid_from, valid_until",
            ));
        }
        // New content is embedded here, outside the write lock, and stored with the new version
        // (the name, which the text may carry, is read first and checked again in the write).
        let embedded = match &patch.content {
            Some(content) if self.embedder().is_some() => {
                let name = self
                    .store
                    .read(|c| Ok(lookup(c, target, false)?.and_then(|m| m.name)))?;
                self.embed_for_write(&[Some((name.as_deref(), content.as_str()))])
                    .map(|v| (name, v))
            }
            _ => None,
        };
        let now = now_millis();
        let updated = self.store.write(|tx| {
            let old = require(tx, "id", target, access)?;
            if let Some(expected) = patch.if_version
                && expected != old.version
            {
                let by = history::of(tx, Entity::Memory, old.key.0, 1)?
                    .pop()
                    .map(|h| h.actor);
                return Err(Error::Conflict {
                    reason: format!(
                        "{} is at version {}, not {expected}: it changed after it was read ({}at {})",
                        old.id,
                        old.version,
                        by.map_or_else(String::new, |a| format!("by {a} ")),
                        crate::model::format_time(old.updated_at)
                    ),
                    hint: format!(
                        "get it again, apply your change to what it says now, and update with if_version {}",
                        old.version
                    ),
                });
            }
            let mut m = old.clone();
            if let Some(c) = &patch.content {
                m.content = c.clone();
            }
            if let Some(k) = &patch.kind {
                m.kind = k.clone();
            }
            if let Some(t) = &patch.tags {
                m.tags = t.clone();
            }
            if let Some(i) = patch.importance {
                m.importance = i;
            }
            if let Some(md) = &patch.metadata {
                m.metadata = md.clone();
            }
            if let Some(v) = patch.valid_from {
                m.valid_from = v;
            }
            if let Some(v) = patch.valid_until {
                m.valid_until = v;
            }
            if let (Some(a), Some(b)) = (m.valid_from, m.valid_until)
                && a > b
            {
                return Err(Error::invalid(
                    "valid_until",
                    "is before valid_from",
                    "give a valid_until after valid_from",
                ));
            }
            m.version += 1;
            m.updated_at = now;
            history::record(
                tx,
                Entity::Memory,
                old.key.0,
                "update",
                actor,
                now,
                &snapshot(&old),
            )?;
            memories::save(tx, &m)?;
            if let Some((name, v)) = &embedded
                && m.name == *name
            {
                v.store(tx, 0, m.key, m.version)?;
            }
            changes::log_memory(tx, m.key, changes::ChangeOp::Upsert)?;
            Ok(m)
        })?;
        self.mark_dirty();
        Ok(updated)
    }

    /// Soft-deletes memories and relations; each is kept in history and can be restored.
    pub fn forget(
        &self,
        mems: &[MemoryRef],
        rels: &[RelationRef],
        actor: &str,
    ) -> Result<ForgetReport> {
        self.forget_or_restore_in(mems, rels, actor, true, &Access::All)
    }

    /// Undoes `forget` for these memories and relations.
    pub fn restore(
        &self,
        mems: &[MemoryRef],
        rels: &[RelationRef],
        actor: &str,
    ) -> Result<ForgetReport> {
        self.forget_or_restore_in(mems, rels, actor, false, &Access::All)
    }

    /// [`Engine::forget`] (`forget` true) or [`Engine::restore`] for a caller limited to the
    /// namespaces of `access`: a memory outside them, or a relation with an end outside them,
    /// fails the call and changes nothing.
    pub fn forget_or_restore_in(
        &self,
        mems: &[MemoryRef],
        rels: &[RelationRef],
        actor: &str,
        forget: bool,
        access: &Access,
    ) -> Result<ForgetReport> {
        if mems.is_empty() && rels.is_empty() {
            return Err(Error::invalid(
                "ids",
                "names nothing",
                "give memory ids or names in `ids`/`names`, or relations in `relations`",
            ));
        }
        validate::batch("ids", mems.len() + rels.len(), &self.cfg.limits)?;
        let op = if forget { "forget" } else { "restore" };
        let now = now_millis();
        let report = self.store.write(|tx| {
            let mut report = ForgetReport::default();
            for (i, r) in mems.iter().enumerate() {
                let field = format!("ids[{i}]");
                let m = lookup_in(tx, r, true, access)?.ok_or_else(|| {
                    Error::not_found("memory", r.to_string(), format!("check `{field}`"))
                })?;
                if !forget && m.deleted_at.is_none() && m.archived_at.is_some() {
                    // Restoring an archived memory brings it back for good.
                    history::record(tx, Entity::Memory, m.key.0, op, actor, now, &snapshot(&m))?;
                    let mut back = m.clone();
                    back.archived_at = None;
                    back.updated_at = now;
                    memories::save(tx, &back)?;
                    changes::log_memory(tx, m.key, changes::ChangeOp::Upsert)?;
                    report.memories.push(m.id);
                    continue;
                }
                if m.deleted_at.is_some() == forget {
                    report.memories.push(m.id); // already in the wanted state
                    continue;
                }
                if !forget
                    && let Some(name) = &m.name
                    && memories::by_name(tx, &m.namespace, name, false)?.is_some()
                {
                    return Err(Error::Conflict {
                        reason: format!("a live memory named {name:?} exists in {:?}", m.namespace),
                        hint: "forget or rename the live one first".into(),
                    });
                }
                history::record(tx, Entity::Memory, m.key.0, op, actor, now, &snapshot(&m))?;
                let mut changed = m.clone();
                changed.deleted_at = forget.then_some(now);
                if !forget {
                    changed.merged_into = None;
                }
                changed.version += 1;
                changed.updated_at = now;
                memories::save(tx, &changed)?;
                let change = if forget {
                    changes::ChangeOp::Delete
                } else {
                    changes::ChangeOp::Upsert
                };
                changes::log_memory(tx, m.key, change)?;
                report.memories.push(m.id);
            }
            for (i, r) in rels.iter().enumerate() {
                let field = format!("relations[{i}]");
                let missing = || {
                    Error::not_found(
                        "relation",
                        r.to_string(),
                        format!("check `{field}`: give a relation id or its from, to and kind"),
                    )
                };
                let (key, rel) = find_relation(tx, r)?.ok_or_else(missing)?;
                if !access.is_all() {
                    // A relation touching a memory outside the caller's namespaces does not
                    // exist for it.
                    for end in [&rel.from, &rel.to] {
                        if let Some(m) = memories::by_id(tx, end)?
                            && !access.allows(&m.namespace)
                        {
                            return Err(missing());
                        }
                    }
                }
                if rel.deleted_at.is_none() == forget {
                    let prev = serde_json::to_value(&rel)?;
                    history::record(tx, Entity::Relation, key, op, actor, now, &prev)?;
                    relations::set_deleted(tx, key, forget.then_some(now))?;
                    changes::log_relation(tx, key)?;
                }
                report.relations.push(rel.id);
            }
            Ok(report)
        })?;
        self.mark_dirty();
        Ok(report)
    }
}

fn find_relation(conn: &Db, r: &RelationRef) -> Result<Option<(i64, Relation)>> {
    match r {
        RelationRef::Id(id) => relations::by_id(conn, id),
        RelationRef::Ends {
            from,
            to,
            kind,
            namespace,
        } => {
            let ns = namespace
                .as_deref()
                .unwrap_or(crate::model::DEFAULT_NAMESPACE);
            let (Some(src), Some(dst)) = (
                lookup(conn, &memory_ref(from, ns), true)?,
                lookup(conn, &memory_ref(to, ns), true)?,
            ) else {
                return Ok(None);
            };
            relations::find(conn, src.key, dst.key, kind)
        }
    }
}

fn upsert_relation(
    tx: &Db,
    new: &NewRelation<'_>,
    ends: (&str, &str),
    now: Millis,
) -> Result<(Relation, bool)> {
    let fresh = new_id("r_");
    let stored = relations::upsert(tx, &fresh, new, now)?;
    changes::log_relation(tx, stored.key)?;
    let created = stored.id == fresh;
    Ok((
        Relation {
            id: stored.id,
            from: ends.0.to_owned(),
            to: ends.1.to_owned(),
            kind: new.kind.to_owned(),
            weight: new.weight,
            metadata: stored.metadata,
            created_at: stored.created_at,
            reinforced_at: now,
            valid_from: stored.valid_from,
            valid_until: stored.valid_until,
            deleted_at: None,
        },
        created,
    ))
}

/// The live memory a new one is "the same memory" as, if any: for a named memory, the live
/// memory of that name; for an unnamed one, a live unnamed memory with the same content, kind
/// and validity (see [`same_memory`]). `remember` and `import` share this rule.
pub(crate) fn existing_identity(c: &Db, new: &NewMemory) -> Result<Option<Memory>> {
    match &new.name {
        Some(name) => memories::by_name(c, &new.namespace, name, false),
        None => memories::unnamed_twin(
            c,
            &new.namespace,
            &memories::content_hash(&new.content),
            &new.kind,
            new.valid_from,
            new.valid_until,
        ),
    }
}

/// Whether `new` repeats `stored` (content, kind and validity equal): a repeat is idempotent;
/// the same name with anything else is a conflict.
pub(crate) fn same_memory(stored: &Memory, new: &NewMemory) -> bool {
    stored.content == new.content
        && stored.kind == new.kind
        && stored.valid_from == new.valid_from
        && stored.valid_until == new.valid_until
}

/// [`Engine::remember`] of items without links: the identities of the whole batch are read
/// together (live names, and unnamed memories by content hash, per namespace), the new ones
/// inserted and logged many per statement. Each item comes out as it would one by one in order:
/// a repeat of a stored memory or of an earlier item is a duplicate with that memory's id; a
/// name taken with other content, kind or validity is a conflict of that item alone.
fn remember_unlinked(
    tx: &Db,
    checked: Vec<Result<NewMemory>>,
    vecs: Option<&WriteVectors>,
    now: Millis,
) -> Result<Vec<Result<Remembered>>> {
    use std::collections::HashMap;
    // The content hash of each unnamed item, computed once.
    let item_hash: Vec<Option<Vec<u8>>> = checked
        .iter()
        .map(|n| {
            let n = n.as_ref().ok().filter(|n| n.name.is_none())?;
            Some(memories::content_hash(&n.content))
        })
        .collect();
    let mut names: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut hashes: HashMap<&str, Vec<Vec<u8>>> = HashMap::new();
    for (new, hash) in checked.iter().zip(&item_hash) {
        let Ok(new) = new else { continue };
        match (&new.name, hash) {
            (Some(name), _) => names.entry(&new.namespace).or_default().push(name),
            (None, Some(hash)) => hashes.entry(&new.namespace).or_default().push(hash.clone()),
            (None, None) => {}
        }
    }
    // What each identity is already: (namespace, name) or (namespace, hash) → id and content.
    let mut by_name: HashMap<(String, String), Identity> = HashMap::new();
    let mut by_hash: HashMap<(String, Vec<u8>), Vec<Identity>> = HashMap::new();
    for (ns, list) in &names {
        for m in memories::live_named(tx, ns, list)? {
            let name = m.name.clone().unwrap_or_default();
            by_name.insert((m.namespace.clone(), name), Identity::of(&m));
        }
    }
    for (ns, list) in &hashes {
        for m in memories::unnamed_with_hashes(tx, ns, list)? {
            let hash = memories::content_hash(&m.content);
            by_hash
                .entry((m.namespace.clone(), hash))
                .or_default()
                .push(Identity::of(&m));
        }
    }
    let mut out: Vec<Option<Result<Remembered>>> = Vec::with_capacity(checked.len());
    let mut fresh: Vec<(usize, String, NewMemory)> = Vec::new();
    for (i, (new, hash)) in checked.into_iter().zip(item_hash).enumerate() {
        let new = match new {
            Ok(new) => new,
            Err(e) => {
                out.push(Some(Err(e)));
                continue;
            }
        };
        let found = match (&new.name, &hash) {
            (Some(name), _) => by_name.get(&(new.namespace.clone(), name.clone())).cloned(),
            (None, Some(hash)) => by_hash
                .get(&(new.namespace.clone(), hash.clone()))
                .and_then(|c| c.iter().find(|t| t.twin_of(&new)).cloned()),
            (None, None) => None,
        };
        if let Some(existing) = found {
            out.push(Some(match &new.name {
                Some(name) if !existing.repeats(&new) => Err(Error::Conflict {
                    reason: format!(
                        "memories[{i}].name {name:?} is taken in namespace {:?} by {} with other content, kind or validity",
                        new.namespace, existing.id
                    ),
                    hint: "use `update` to change that memory, or choose another name".into(),
                }),
                _ => Ok(Remembered {
                    id: existing.id,
                    duplicate: true,
                    n_links: 0,
                }),
            }));
            continue;
        }
        let id = new_id("m_");
        let identity = Identity {
            id: id.clone(),
            content: new.content.clone(),
            kind: new.kind.clone(),
            valid_from: new.valid_from,
            valid_until: new.valid_until,
        };
        match (&new.name, hash) {
            (Some(name), _) => {
                by_name.insert((new.namespace.clone(), name.clone()), identity);
            }
            (None, Some(hash)) => by_hash
                .entry((new.namespace.clone(), hash))
                .or_default()
                .push(identity),
            (None, None) => {}
        }
        out.push(None);
        fresh.push((i, id, new));
    }
    let rows: Vec<(String, &NewMemory)> = fresh.iter().map(|(_, id, m)| (id.clone(), m)).collect();
    let stored = memories::insert_many(tx, &rows, now)?;
    let keys: Vec<MemoryKey> = stored.iter().map(|m| m.key).collect();
    changes::log_memories(tx, &keys, changes::ChangeOp::Insert)?;
    for ((i, _, _), m) in fresh.iter().zip(stored) {
        if let Some(v) = vecs {
            v.store(tx, *i, m.key, m.version)?;
        }
        out[*i] = Some(Ok(Remembered {
            id: m.id,
            duplicate: false,
            n_links: 0,
        }));
    }
    Ok(out.into_iter().flatten().collect())
}

/// What identifies a stored (or just planned) memory to [`remember_unlinked`].
#[derive(Debug, Clone)]
struct Identity {
    id: String,
    content: String,
    kind: String,
    valid_from: Option<Millis>,
    valid_until: Option<Millis>,
}

impl Identity {
    fn of(m: &Memory) -> Identity {
        Identity {
            id: m.id.clone(),
            content: m.content.clone(),
            kind: m.kind.clone(),
            valid_from: m.valid_from,
            valid_until: m.valid_until,
        }
    }

    /// `new` repeats it (see [`same_memory`]).
    fn repeats(&self, new: &NewMemory) -> bool {
        self.content == new.content && self.twin_of(new)
    }

    /// It is the unnamed twin of `new` (same hash, so same content; kind and validity equal).
    fn twin_of(&self, new: &NewMemory) -> bool {
        self.kind == new.kind
            && self.valid_from == new.valid_from
            && self.valid_until == new.valid_until
    }
}

fn remember_one(
    tx: &Db,
    (i, item, new): (usize, &RememberItem, &NewMemory),
    vecs: Option<&WriteVectors>,
    now: Millis,
    access: &Access,
) -> Result<Remembered> {
    if let Some(existing) = existing_identity(tx, new)? {
        if let Some(name) = &new.name
            && !same_memory(&existing, new)
        {
            return Err(Error::Conflict {
                reason: format!(
                    "memories[{i}].name {name:?} is taken in namespace {:?} by {} with other content, kind or validity",
                    new.namespace, existing.id
                ),
                hint: "use `update` to change that memory, or choose another name".into(),
            });
        }
        return Ok(Remembered {
            id: existing.id,
            duplicate: true,
            n_links: 0,
        });
    }
    // Resolve links before inserting, so a bad link leaves nothing half-written.
    let mut targets: Vec<((MemoryKey, String), &Link)> = Vec::with_capacity(item.links.len());
    for (j, link) in item.links.iter().enumerate() {
        let t = require(
            tx,
            &format!("memories[{i}].links[{j}].to"),
            &memory_ref(&link.to, &new.namespace),
            access,
        )?;
        targets.push(((t.key, t.id), link));
    }
    let m = memories::insert(tx, &new_id("m_"), new, now)?;
    changes::log_memory(tx, m.key, changes::ChangeOp::Insert)?;
    if let Some(v) = vecs {
        v.store(tx, i, m.key, m.version)?;
    }
    for (dst, link) in &targets {
        let rel = NewRelation {
            src: m.key,
            dst: dst.0,
            kind: &link.kind,
            weight: link.weight.unwrap_or(DEFAULT_WEIGHT),
            metadata: None,
        };
        upsert_relation(tx, &rel, (&m.id, &dst.1), now)?;
    }
    Ok(Remembered {
        id: m.id,
        duplicate: false,
        n_links: targets.len(),
    })
}
