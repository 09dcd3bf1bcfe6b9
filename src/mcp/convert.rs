//! Hand-written mapping between the wire shapes of `dto` and the engine's domain types.

use crate::engine::cursor::decode_cursor;
use crate::engine::{Link, MemoryDetail, RelateItem, RelationRef, RememberItem};
use crate::error::{Error, Result};
use crate::mcp::dto;
use crate::model::{
    DEFAULT_NAMESPACE, HistoryEntry, Memory, MemoryPatch, MemoryRef, Millis, NamespaceScope,
    RecallMode, RecallQuery, Relation, format_time, parse_time,
};

/// Default recall page size.
const DEFAULT_LIMIT: u32 = 10;

fn time(field: &str, s: Option<&str>) -> Result<Option<Millis>> {
    s.map(|s| {
        parse_time(s).ok_or_else(|| {
            Error::invalid(
                field,
                format!("{s:?} is not a time"),
                "use RFC 3339 like 2024-05-01T10:00:00Z, or a date like 2024-05-01",
            )
        })
    })
    .transpose()
}

pub(super) fn remember_items(p: dto::RememberParams) -> Result<Vec<RememberItem>> {
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

pub(super) fn relate_items(p: dto::RelateParams) -> Vec<RelateItem> {
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

pub(super) fn recall_query(p: &dto::RecallParams) -> Result<RecallQuery> {
    let namespaces = match (&p.namespace, &p.namespaces) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "namespaces",
                "is given together with namespace",
                "give one of namespace or namespaces",
            ));
        }
        (Some(ns), None) => NamespaceScope::Only(vec![ns.clone()]),
        (None, Some(list)) if !list.is_empty() => NamespaceScope::Only(list.clone()),
        _ => NamespaceScope::All,
    };
    let mut q = RecallQuery {
        text: p.query.clone(),
        namespaces,
        kinds: p.kinds.clone().unwrap_or_default(),
        tags: p.tags.clone().unwrap_or_default(),
        since: time("since", p.since.as_deref())?,
        until: time("until", p.until.as_deref())?,
        min_importance: p.min_importance,
        limit: p.limit.unwrap_or(DEFAULT_LIMIT) as usize,
        offset: 0,
        mode: match p.mode {
            Some(dto::ModeInput::Text) => RecallMode::Text,
            Some(dto::ModeInput::Vector) => RecallMode::Vector,
            Some(dto::ModeInput::Hybrid) | None => RecallMode::Hybrid,
        },
        expand: p.expand.unwrap_or(crate::model::DEFAULT_EXPAND).min(2),
        explain: p.explain.unwrap_or(false),
        include_archived: p.include_archived.unwrap_or(false),
        weights: match p.weights.as_deref() {
            None => None,
            Some(&[t, v]) => Some((t, v)),
            Some(other) => {
                return Err(Error::invalid(
                    "weights",
                    format!("has {} numbers", other.len()),
                    "give two: [text, vector]",
                ));
            }
        },
    };
    if let Some(c) = &p.cursor {
        q.offset = decode_cursor(&q, c)?;
    }
    Ok(q)
}

fn refs(ids: Option<Vec<String>>, names: Option<Vec<String>>, ns: Option<&str>) -> Vec<MemoryRef> {
    let ns = ns.unwrap_or(DEFAULT_NAMESPACE);
    let mut out: Vec<MemoryRef> = ids
        .unwrap_or_default()
        .into_iter()
        .map(MemoryRef::Id)
        .collect();
    out.extend(
        names
            .unwrap_or_default()
            .into_iter()
            .map(|name| MemoryRef::Name {
                namespace: ns.to_owned(),
                name,
            }),
    );
    out
}

pub(super) fn get_refs(p: dto::GetParams) -> (Vec<MemoryRef>, bool) {
    let history = p.history.unwrap_or(false);
    (refs(p.ids, p.names, p.namespace.as_deref()), history)
}

pub(super) fn forget_refs(p: dto::ForgetParams) -> Result<(Vec<MemoryRef>, Vec<RelationRef>)> {
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

pub(super) fn update_target(p: &dto::UpdateParams) -> Result<(MemoryRef, MemoryPatch)> {
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

pub(super) fn memory_out(m: Memory) -> dto::MemoryOut {
    dto::MemoryOut {
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

pub(super) fn relation_out(r: Relation) -> dto::RelationOut {
    dto::RelationOut {
        id: r.id,
        from: r.from,
        to: r.to,
        kind: r.kind,
        weight: r.weight,
        metadata: r.metadata,
        created_at: format_time(r.created_at),
        forgotten_at: r.deleted_at.map(format_time),
    }
}

/// A kept version in the same public shape as a live memory (no internal keys, RFC 3339 times).
fn history_out(h: HistoryEntry) -> dto::HistoryOut {
    let previous = match serde_json::from_value::<Memory>(h.previous.clone()) {
        Ok(m) => serde_json::to_value(memory_out(m)).unwrap_or(serde_json::Value::Null),
        Err(_) => h.previous,
    };
    dto::HistoryOut {
        op: h.op,
        actor: h.actor,
        at: format_time(h.at),
        previous,
    }
}

pub(super) fn detail_out(d: MemoryDetail) -> dto::DetailOut {
    dto::DetailOut {
        merged: d
            .merged
            .map(|id| format!("{id} was merged into this memory by consolidation")),
        memory: memory_out(d.memory),
        relations: d.relations.into_iter().map(relation_out).collect(),
        history: d.history.map(|h| h.into_iter().map(history_out).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str, cursor: Option<String>) -> dto::RecallParams {
        dto::RecallParams {
            query: query.into(),
            namespace: None,
            namespaces: None,
            kinds: None,
            tags: None,
            since: None,
            until: None,
            min_importance: None,
            limit: None,
            cursor,
            full: None,
            expand: None,
            mode: None,
            explain: None,
            weights: None,
            include_archived: None,
        }
    }

    #[test]
    fn cursors_round_trip_and_reject_tampering() {
        let q = recall_query(&params("tea", None)).unwrap();
        let c = crate::engine::cursor::encode_cursor(&q, 10);
        assert_eq!(
            recall_query(&params("tea", Some(c.clone())))
                .unwrap()
                .offset,
            10
        );
        assert!(recall_query(&params("coffee", Some(c))).is_err());
        for bad in ["", "garbage", "c1.x.0", "c1.10.0000000000000000.extra"] {
            let e = recall_query(&params("tea", Some(bad.into()))).unwrap_err();
            assert!(e.to_string().contains("`cursor`"));
        }
    }
}
