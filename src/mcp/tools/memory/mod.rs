//! The memory tools: `remember`, `relate`, `get`, `update`, `forget`, `restore` and `stats`,
//! answered at once (batches report per item).

mod wire;

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject};

use super::{
    Call, Descriptor, Hints, Pending, blocking, input_schema, parse_object, read, structured, write,
};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::mcp::work::Acting;
pub(crate) use wire::detail_out;
use wire::{
    BatchOut, CountOut, ForgetOut, ForgetParams, GetParams, ItemOut, RelateParams, RememberParams,
    StatsOut, StatsParams, UpdateParams,
};

/// `remember`, listed first.
pub(super) fn head() -> Vec<Descriptor> {
    vec![Descriptor {
        name: "remember",
        description: "Store memories (a repeat returns its id, duplicate=true); links relate them to stored ones.",
        schema: input_schema::<RememberParams>,
        hints: Hints(false, false, true),
        scope: write,
        scope_note: "",
        long: None,
        now: Some(|c, args| Box::pin(async move { remember(&c.engine, args, c.who).await })),
    }]
}

/// `relate`, `get`, `update`, `forget` and `restore`, listed after `recall`.
pub(super) fn tail() -> Vec<Descriptor> {
    vec![
        Descriptor {
            name: "relate",
            description: "Create or update relations (unique on from, to, kind); ends by id or name.",
            schema: input_schema::<RelateParams>,
            hints: Hints(false, false, true),
            scope: write,
            scope_note: "",
            long: None,
            now: Some(|c, args| Box::pin(async move { relate(&c.engine, args, c.who).await })),
        },
        Descriptor {
            name: "get",
            description: "Memories by ids or names, with relations; history=true adds past versions.",
            schema: input_schema::<GetParams>,
            hints: Hints(true, false, true),
            scope: read,
            scope_note: "",
            long: None,
            now: Some(|c, args| Box::pin(async move { get(&c.engine, args, c.who).await })),
        },
        Descriptor {
            name: "update",
            description: "Change one memory; the previous version is kept in history.",
            schema: input_schema::<UpdateParams>,
            hints: Hints(false, false, false),
            scope: write,
            scope_note: "",
            long: None,
            now: Some(|c, args| Box::pin(async move { update(&c.engine, args, c.who).await })),
        },
        Descriptor {
            name: "forget",
            description: "Soft-delete memories and relations; `restore` undoes it.",
            schema: input_schema::<ForgetParams>,
            hints: Hints(false, true, true),
            scope: write,
            scope_note: "",
            long: None,
            now: Some(forget),
        },
        Descriptor {
            name: "restore",
            description: "Undo `forget`, or bring archived memories back.",
            schema: input_schema::<ForgetParams>,
            hints: Hints(false, false, true),
            scope: write,
            scope_note: "",
            long: None,
            now: Some(restore),
        },
    ]
}

/// `stats`, listed last.
pub(super) fn stats() -> Descriptor {
    Descriptor {
        name: "stats",
        description: "Counts per namespace and kind, relations, index lag, database size.",
        schema: input_schema::<StatsParams>,
        hints: Hints(true, false, true),
        scope: read,
        scope_note: "",
        long: None,
        now: Some(|c, args| Box::pin(async move { stats_of(&c.engine, args, c.who).await })),
    }
}

fn forget(c: Call, args: JsonObject) -> Pending {
    Box::pin(async move { forget_or_restore(&c.engine, "forget", args, c.who).await })
}

fn restore(c: Call, args: JsonObject) -> Pending {
    Box::pin(async move { forget_or_restore(&c.engine, "restore", args, c.who).await })
}

fn batch_out(results: Vec<ItemOut>) -> Result<CallToolResult> {
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    let out = BatchOut {
        ok: results.len() - failed,
        failed,
        results,
    };
    let mut res = structured(out)?;
    if failed > 0 && failed == res_len(&res) {
        res.is_error = Some(true);
    }
    Ok(res)
}

fn res_len(res: &CallToolResult) -> usize {
    res.structured_content
        .as_ref()
        .and_then(|v| v.get("results"))
        .and_then(|r| r.as_array())
        .map_or(0, Vec::len)
}

/// The error text of one item of a batch; a fault the operator can remedy (a full disk, a damaged
/// database) says what to do.
fn item_error(e: Error) -> Option<String> {
    if e.is_user_error() {
        return Some(e.to_string());
    }
    tracing::error!(error = %e, "item failed");
    Some(e.advice().unwrap_or_else(|| e.to_string()))
}

async fn remember(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let params: wire::RememberParams = parse_object("remember", args)?;
    let job = params.job.clone();
    if let Some(job) = &job {
        crate::engine::validate::label("job", job, crate::engine::job_context::MAX_JOB_NAME)?;
    }
    let items = wire::remember_items(params)?;
    let rs = blocking(engine, move |e| {
        if let Some(job) = &job {
            // A closed job takes nothing more: say so before anything is written.
            let mut namespaces: Vec<Option<&str>> =
                items.iter().map(|i| i.namespace.as_deref()).collect();
            namespaces.sort_unstable();
            namespaces.dedup();
            for ns in namespaces {
                e.job_to_file(ns, job, &who.access)?;
            }
        }
        let rs = e.remember_in(&items, &who.access)?;
        if let Some(job) = &job {
            let ids: Vec<String> = rs.iter().flatten().map(|m| m.id.clone()).collect();
            e.file_in_job(job, &ids, &who.actor("remember"))?;
        }
        Ok(rs)
    })
    .await?;
    batch_out(
        rs.into_iter()
            .enumerate()
            .map(|(index, r)| match r {
                Ok(m) => ItemOut {
                    duplicate: Some(m.duplicate),
                    links: (m.n_links > 0).then_some(m.n_links),
                    ..ItemOut::stored(index, m.id)
                },
                Err(e) => ItemOut::failed(index, item_error(e)),
            })
            .collect(),
    )
}

async fn relate(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let items = wire::relate_items(parse_object("relate", args)?);
    let rs = blocking(engine, move |e| e.relate_in(&items, &who.access)).await?;
    batch_out(
        rs.into_iter()
            .enumerate()
            .map(|(index, r)| match r {
                Ok((rel, created)) => ItemOut {
                    created: Some(created),
                    ..ItemOut::stored(index, rel.id)
                },
                Err(e) => ItemOut::failed(index, item_error(e)),
            })
            .collect(),
    )
}

async fn get(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let (refs, history) = wire::get_refs(parse_object("get", args)?);
    let ds = blocking(engine, move |e| e.get_in(&refs, history, &who.access)).await?;
    structured(serde_json::json!({
        "memories": ds.into_iter().map(wire::detail_out).collect::<Vec<_>>()
    }))
}

async fn update(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let p: UpdateParams = parse_object("update", args)?;
    let (target, patch) = wire::update_target(&p)?;
    let m = blocking(engine, move |e| {
        e.update_in(&target, &patch, &who.actor("update"), &who.access)
    })
    .await?;
    structured(wire::memory_out(m))
}

async fn forget_or_restore(
    engine: &Arc<Engine>,
    name: &str,
    args: JsonObject,
    who: Acting,
) -> Result<CallToolResult> {
    let forget = name == "forget";
    let (mems, rels) = wire::forget_refs(parse_object(name, args)?)?;
    let actor = who.actor(name);
    let r = blocking(engine, move |e| {
        e.forget_or_restore_in(&mems, &rels, &actor, forget, &who.access)
    })
    .await?;
    structured(ForgetOut {
        memories: r.memories,
        relations: r.relations,
    })
}

async fn stats_of(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let _: StatsParams = parse_object("stats", args)?;
    let s = blocking(engine, move |e| e.stats_in(&who.access)).await?;
    let counts = |v: Vec<(String, i64)>| {
        v.into_iter()
            .map(|(name, count)| CountOut { name, count })
            .collect()
    };
    structured(StatsOut {
        memories: s.memories,
        relations: s.relations,
        forgotten_memories: s.forgotten_memories,
        by_namespace: counts(s.by_namespace),
        by_kind: counts(s.by_kind),
        text_index_lag: s.text_index_lag,
        database_bytes: s.database_bytes,
        embedding_model: s.embedding_model,
        vectors: s.vectors,
        vector_index_lag: s.vector_index_lag,
    })
}
