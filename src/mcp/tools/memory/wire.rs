//! The wire shapes of the memory tools (parameters and answers) and their conversion to and
//! from the engine's types, by hand. Every field's doc comment becomes its description in the
//! schema, so keep them short and say units and defaults.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::super::{refs, time};
use crate::engine::{Link, MemoryDetail, RelateItem, RelationRef, RememberItem};
use crate::error::{Error, Result};
use crate::model::{
    DEFAULT_NAMESPACE, HistoryEntry, Memory, MemoryPatch, MemoryRef, Relation, format_time,
};

/// A JSON object, as schemas name free-form metadata.
type JsonObject = serde_json::Map<String, serde_json::Value>;

/// A link from a new memory to an existing one.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LinkInput {
    /// Target id or name.
    pub(crate) to: String,
    /// e.g. about, part_of.
    pub(crate) kind: String,
    /// 0–1, default 1.
    pub(crate) weight: Option<f64>,
}

/// One memory to store.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemoryInput {
    /// Text (≤ 64 KiB).
    pub(crate) content: String,
    /// fact, episode, note (default), …
    pub(crate) kind: Option<String>,
    /// Unique in the namespace.
    pub(crate) name: Option<String>,
    pub(crate) tags: Option<Vec<String>>,
    /// 0–1, default 0.5.
    pub(crate) importance: Option<f64>,
    /// Default "default".
    pub(crate) namespace: Option<String>,
    #[schemars(with = "Option<JsonObject>")]
    pub(crate) metadata: Option<serde_json::Value>,
    /// RFC 3339.
    pub(crate) valid_from: Option<String>,
    /// RFC 3339.
    pub(crate) valid_until: Option<String>,
    /// To stored memories.
    pub(crate) links: Option<Vec<LinkInput>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RememberParams {
    pub(crate) memories: Vec<MemoryInput>,
    /// File under this job.
    pub(crate) job: Option<String>,
}

/// One relation to create or update.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RelationInput {
    /// Source id or name.
    pub(crate) from: String,
    /// Target id or name.
    pub(crate) to: String,
    /// e.g. about, part_of.
    pub(crate) kind: String,
    /// 0–1, default 1.
    pub(crate) weight: Option<f64>,
    #[schemars(with = "Option<JsonObject>")]
    pub(crate) metadata: Option<serde_json::Value>,
    /// For names; default "default".
    pub(crate) namespace: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RelateParams {
    pub(crate) relations: Vec<RelationInput>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetParams {
    pub(crate) ids: Option<Vec<String>>,
    pub(crate) names: Option<Vec<String>>,
    /// For names; default "default".
    pub(crate) namespace: Option<String>,
    /// Include previous versions.
    pub(crate) history: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateParams {
    /// Id, or name in `namespace`.
    pub(crate) id: Option<String>,
    /// A name instead of `id` (accepted; the schema names one identifier).
    #[schemars(skip)]
    pub(crate) name: Option<String>,
    /// Where a name resolves.
    pub(crate) namespace: Option<String>,
    pub(crate) content: Option<String>,
    pub(crate) kind: Option<String>,
    /// Replaces them.
    pub(crate) tags: Option<Vec<String>>,
    /// 0–1.
    pub(crate) importance: Option<f64>,
    /// Replaces it.
    #[schemars(with = "Option<JsonObject>")]
    pub(crate) metadata: Option<serde_json::Value>,
    /// RFC 3339.
    pub(crate) valid_from: Option<String>,
    /// RFC 3339.
    pub(crate) valid_until: Option<String>,
    /// Conflict unless at this version (as read).
    pub(crate) if_version: Option<i64>,
}

/// A relation by id, or by from, to and kind.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RelationRefInput {
    pub(crate) id: Option<String>,
    /// Id or name.
    pub(crate) from: Option<String>,
    /// Id or name.
    pub(crate) to: Option<String>,
    pub(crate) kind: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForgetParams {
    pub(crate) ids: Option<Vec<String>>,
    pub(crate) names: Option<Vec<String>>,
    /// For names; default "default".
    pub(crate) namespace: Option<String>,
    /// By id, or by from, to and kind.
    pub(crate) relations: Option<Vec<RelationRefInput>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsParams {}

/// A memory as tools return it.
#[derive(Debug, Serialize)]
pub(crate) struct MemoryOut {
    pub(crate) id: String,
    pub(crate) namespace: String,
    pub(crate) kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tags: Vec<String>,
    pub(crate) importance: f64,
    #[serde(skip_serializing_if = "is_empty_object")]
    pub(crate) metadata: serde_json::Value,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) valid_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) valid_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) superseded_by: Option<String>,
    pub(crate) version: i64,
    pub(crate) access_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) forgotten_at: Option<String>,
    /// Set when consolidation archived it (out of recall until asked for or restored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) archived_at: Option<String>,
}

fn is_empty_object(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(|o| o.is_empty()) || v.is_null()
}

#[derive(Debug, Serialize)]
pub(crate) struct RelationOut {
    pub(crate) id: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) kind: String,
    pub(crate) weight: f64,
    /// The weight decayed by the days since the relation was last used (what walks rank by).
    pub(crate) strength: f64,
    #[serde(skip_serializing_if = "is_empty_object")]
    pub(crate) metadata: serde_json::Value,
    pub(crate) created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) valid_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) valid_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) forgotten_at: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ItemOut {
    pub(crate) index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) duplicate: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) created: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) links: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl ItemOut {
    /// An item that was stored under `id`.
    pub(crate) fn stored(index: usize, id: String) -> ItemOut {
        ItemOut {
            index,
            id: Some(id),
            duplicate: None,
            created: None,
            links: None,
            error: None,
        }
    }

    /// An item that failed with `error`.
    pub(crate) fn failed(index: usize, error: Option<String>) -> ItemOut {
        ItemOut {
            index,
            id: None,
            duplicate: None,
            created: None,
            links: None,
            error,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct BatchOut {
    pub(crate) results: Vec<ItemOut>,
    pub(crate) ok: usize,
    pub(crate) failed: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct HistoryOut {
    pub(crate) op: String,
    pub(crate) actor: String,
    pub(crate) at: String,
    pub(crate) previous: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub(crate) struct DetailOut {
    /// The id asked for, when consolidation merged it into this memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) merged: Option<String>,
    #[serde(flatten)]
    pub(crate) memory: MemoryOut,
    /// Salience now (0–1): decayed with time unused, reinforced by use.
    pub(crate) salience: f64,
    pub(crate) relations: Vec<RelationOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) history: Option<Vec<HistoryOut>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ForgetOut {
    pub(crate) memories: Vec<String>,
    pub(crate) relations: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct CountOut {
    pub(crate) name: String,
    pub(crate) count: i64,
}

#[derive(Debug, Serialize)]
pub(crate) struct StatsOut {
    pub(crate) memories: i64,
    pub(crate) relations: i64,
    pub(crate) forgotten_memories: i64,
    pub(crate) by_namespace: Vec<CountOut>,
    pub(crate) by_kind: Vec<CountOut>,
    pub(crate) text_index_lag: i64,
    pub(crate) database_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) embedding_model: Option<String>,
    pub(crate) vectors: i64,
    pub(crate) vector_index_lag: i64,
}

pub(super) fn remember_items(p: RememberParams) -> Result<Vec<RememberItem>> {
    p.memories
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            Ok(RememberItem {
                content: m.content,
                kind: m.kind,
                name: m.name,
                tags: m.tags.unwrap_or_default(),
                importance: m.importance,
                namespace: m.namespace,
                metadata: m.metadata,
                valid_from: time(
                    &format!("memories[{i}].valid_from"),
                    m.valid_from.as_deref(),
                )?,
                valid_until: time(
                    &format!("memories[{i}].valid_until"),
                    m.valid_until.as_deref(),
                )?,
                links: m
                    .links
                    .unwrap_or_default()
                    .into_iter()
                    .map(|l| Link {
                        to: l.to,
                        kind: l.kind,
                        weight: l.weight,
                    })
                    .collect(),
            })
        })
        .collect()
}

pub(super) fn relate_items(p: RelateParams) -> Vec<RelateItem> {
    p.relations
        .into_iter()
        .map(|r| RelateItem {
            from: r.from,
            to: r.to,
            kind: r.kind,
            weight: r.weight,
            metadata: r.metadata,
            namespace: r.namespace,
        })
        .collect()
}

pub(super) fn get_refs(p: GetParams) -> (Vec<MemoryRef>, bool) {
    let history = p.history.unwrap_or(false);
    (refs(p.ids, p.names, p.namespace.as_deref()), history)
}

pub(super) fn forget_refs(p: ForgetParams) -> Result<(Vec<MemoryRef>, Vec<RelationRef>)> {
    let ns = p.namespace.clone();
    let mems = refs(p.ids, p.names, p.namespace.as_deref());
    let rels = p
        .relations
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, r)| match (r.id, r.from, r.to, r.kind) {
            (Some(id), None, None, None) => Ok(RelationRef::Id(id)),
            (None, Some(from), Some(to), Some(kind)) => Ok(RelationRef::Ends {
                from,
                to,
                kind,
                namespace: ns.clone(),
            }),
            _ => Err(Error::invalid(
                format!("relations[{i}]"),
                "names no single relation",
                "give either `id`, or all of `from`, `to` and `kind`",
            )),
        })
        .collect::<Result<_>>()?;
    Ok((mems, rels))
}

pub(super) fn update_target(p: &UpdateParams) -> Result<(MemoryRef, MemoryPatch)> {
    let target = match (&p.id, &p.name) {
        (Some(id), _) => MemoryRef::Id(id.clone()),
        (None, Some(name)) => MemoryRef::Name {
            namespace: p
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
            name: name.clone(),
        },
        (None, None) => {
            return Err(Error::invalid(
                "id",
                "is missing",
                "give the memory's `id`, or its `name` (and `namespace`)",
            ));
        }
    };
    let patch = MemoryPatch {
        content: p.content.clone(),
        kind: p.kind.clone(),
        tags: p.tags.clone(),
        importance: p.importance,
        metadata: p.metadata.clone(),
        valid_from: time("valid_from", p.valid_from.as_deref())?.map(Some),
        valid_until: time("valid_until", p.valid_until.as_deref())?.map(Some),
        if_version: p.if_version,
    };
    Ok((target, patch))
}

pub(super) fn memory_out(m: Memory) -> MemoryOut {
    MemoryOut {
        id: m.id,
        namespace: m.namespace,
        kind: m.kind,
        name: m.name,
        content: m.content,
        tags: m.tags,
        importance: m.importance,
        metadata: m.metadata,
        created_at: format_time(m.created_at),
        updated_at: format_time(m.updated_at),
        valid_from: m.valid_from.map(format_time),
        valid_until: m.valid_until.map(format_time),
        superseded_by: m.superseded_by,
        version: m.version,
        access_count: m.access_count,
        forgotten_at: m.deleted_at.map(format_time),
        archived_at: m.archived_at.map(format_time),
    }
}

/// A derived figure to three decimals: enough to read, no float noise on the wire.
fn thousandths(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

pub(super) fn relation_out(r: Relation) -> RelationOut {
    RelationOut {
        strength: thousandths(crate::engine::relation_strength(&r)),
        id: r.id,
        from: r.from,
        to: r.to,
        kind: r.kind,
        weight: r.weight,
        metadata: r.metadata,
        created_at: format_time(r.created_at),
        valid_from: r.valid_from.map(format_time),
        valid_until: r.valid_until.map(format_time),
        forgotten_at: r.deleted_at.map(format_time),
    }
}

/// A kept version in the same public shape as a live memory (no internal keys, RFC 3339 times).
fn history_out(h: HistoryEntry) -> HistoryOut {
    let previous = match serde_json::from_value::<Memory>(h.previous.clone()) {
        Ok(m) => serde_json::to_value(memory_out(m)).unwrap_or(serde_json::Value::Null),
        Err(_) => h.previous,
    };
    HistoryOut {
        op: h.op,
        actor: h.actor,
        at: format_time(h.at),
        previous,
    }
}

pub(crate) fn detail_out(d: MemoryDetail) -> DetailOut {
    DetailOut {
        merged: d
            .merged
            .map(|id| format!("{id} was merged into this memory by consolidation")),
        salience: thousandths(crate::engine::curate::salience::of(
            &d.memory,
            crate::model::now_millis(),
        )),
        memory: memory_out(d.memory),
        relations: d.relations.into_iter().map(relation_out).collect(),
        history: d.history.map(|h| h.into_iter().map(history_out).collect()),
    }
}
