//! The tool surface: names, descriptions, compact input schemas, annotations, and the dispatch of
//! `tools/call` to the engine (on the blocking pool, never on a runtime worker).

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::mcp::errors::{bad_arguments, tool_answer};
use crate::mcp::work::Acting;
use crate::mcp::{convert, dto};

/// The scope a token needs to call `tool`: writes need `write`, consolidation `admin`, the rest
/// (recall, get, walks, export, tasks, stats) `read`. An import or export that names a `path`
/// reads or writes a file on the server's machine: that needs `admin` too.
pub fn scope(tool: &str, args: &JsonObject) -> crate::mcp::auth::Scope {
    use crate::mcp::auth::Scope;
    let names_path = |v: Option<&serde_json::Value>| v.is_some_and(|p| !p.is_null());
    match tool {
        "import" if names_path(args.get("source").and_then(|s| s.get("path"))) => Scope::Admin,
        "export" if names_path(args.get("path")) => Scope::Admin,
        "remember" | "relate" | "update" | "forget" | "restore" | "import" => Scope::Write,
        "consolidate" => Scope::Admin,
        _ => Scope::Read,
    }
}

/// Hints of one tool: (read-only, destructive, idempotent).
struct Hints(bool, bool, bool);

fn tool<T: JsonSchema>(name: &'static str, description: &'static str, h: Hints) -> Tool {
    let mut t = Tool::new(name, description, Arc::new(input_schema::<T>()));
    // Hints at their spec defaults are left out (readOnly false; destructive and idempotent
    // mean nothing for a read-only tool); openWorld defaults to true, so it is always given.
    let (read_only, destructive, idempotent) = (h.0, h.1, h.2);
    t.annotations = Some(ToolAnnotations::from_raw(
        None,
        read_only.then_some(true),
        (!read_only && !destructive).then_some(false),
        (!read_only && idempotent).then_some(true),
        Some(false),
    ));
    t
}

/// The input schema of `T`, stripped of what only bloats a client's context (titles, formats,
/// `null` alternatives of optional fields).
pub fn input_schema<T: JsonSchema>() -> JsonObject {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Some(serde_json::Value::Object(defs)) = v.as_object_mut().and_then(|o| o.remove("$defs"))
    {
        inline_refs(&mut v, &defs, 0);
    }
    compact(&mut v);
    match v {
        serde_json::Value::Object(mut o) => {
            o.remove("$schema");
            o.remove("description");
            o
        }
        _ => JsonObject::new(),
    }
}

/// Replaces each `$ref` to a definition by the definition itself (the schemas here are small
/// and not recursive; inlined they read more easily and cost fewer tokens).
fn inline_refs(v: &mut serde_json::Value, defs: &JsonObject, depth: usize) {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            let target = o
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .and_then(|name| defs.get(name))
                .cloned();
            if let (Some(Value::Object(def)), true) = (target, depth < 8) {
                o.remove("$ref");
                for (k, val) in def {
                    if k != "description" || !o.contains_key("description") {
                        o.entry(k).or_insert(val);
                    }
                }
            }
            for (_, child) in o.iter_mut() {
                inline_refs(child, defs, depth + 1);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| inline_refs(c, defs, depth + 1)),
        _ => {}
    }
}

fn compact(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            // Schema keywords only: a property that happens to be called `format` is an object.
            for key in [
                "title",
                "format",
                "minimum",
                "maximum",
                "additionalProperties",
            ] {
                if o.get(key).is_some_and(|v| !v.is_object()) {
                    o.remove(key);
                }
            }
            if let Some(Value::Object(defs)) = o.get_mut("$defs") {
                // The property that refers to a definition documents it already.
                for def in defs.values_mut() {
                    if let Value::Object(d) = def {
                        d.remove("description");
                    }
                }
            }
            if let Some(Value::Array(types)) = o.get("type") {
                let non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                if non_null.len() == 1 {
                    o.insert("type".into(), non_null[0].clone());
                }
            }
            if let Some(Value::Array(any)) = o.get("anyOf") {
                let non_null: Vec<Value> = any
                    .iter()
                    .filter(|s| s.get("type").is_none_or(|t| t != "null"))
                    .cloned()
                    .collect();
                if non_null.len() == 1 {
                    o.remove("anyOf");
                    if let Value::Object(inner) = &non_null[0] {
                        for (k, val) in inner {
                            o.entry(k.clone()).or_insert(val.clone());
                        }
                    }
                }
            }
            // An array's property says what it holds; its items need not say it again.
            if o.contains_key("description")
                && let Some(Value::Object(items)) = o.get_mut("items")
            {
                items.remove("description");
            }
            if o.get("type").is_some_and(|t| t == "object")
                && o.get("properties")
                    .is_some_and(|p| p.as_object().is_some_and(|p| p.is_empty()))
            {
                o.remove("properties");
            }
            for (_, child) in o.iter_mut() {
                compact(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(compact),
        _ => {}
    }
}

/// Every tool, in the order `tools/list` shows them.
pub fn all() -> Vec<Tool> {
    vec![
        tool::<dto::RememberParams>(
            "remember",
            "Store memories (a repeat returns the stored id, duplicate=true); links relate them to stored ones.",
            Hints(false, false, true),
        ),
        tool::<dto::RecallParams>(
            "recall",
            "Search memories by words and meaning. Snippets unless full=true; expand adds related memories.",
            Hints(true, false, true),
        ),
        tool::<dto::RelateParams>(
            "relate",
            "Create or update relations (unique on from, to, kind); ends by id or name.",
            Hints(false, false, true),
        ),
        tool::<dto::GetParams>(
            "get",
            "Memories by ids or names, with relations; history=true adds past versions.",
            Hints(true, false, true),
        ),
        tool::<dto::UpdateParams>(
            "update",
            "Change one memory; the previous version is kept in history.",
            Hints(false, false, false),
        ),
        tool::<dto::ForgetParams>(
            "forget",
            "Soft-delete memories and relations; `restore` undoes it.",
            Hints(false, true, true),
        ),
        tool::<dto::ForgetParams>(
            "restore",
            "Undo `forget`, or bring archived memories back.",
            Hints(false, false, true),
        ),
        tool::<dto::TraverseParams>(
            "traverse",
            "Walk relations from seeds to ranked nodes, paths or a subgraph; may become a task.",
            Hints(true, false, true),
        ),
        tool::<dto::FindPathsParams>(
            "find_paths",
            "Strongest path between two memories plus up to k alternatives.",
            Hints(true, false, true),
        ),
        tool::<dto::ImportParams>(
            "import",
            "Bulk-load memories and relations from a file, folder or text; idempotent; may become a task.",
            Hints(false, false, true),
        ),
        tool::<dto::ExportParams>(
            "export",
            "Write memories and relations (all, some namespaces or a subgraph) to a file or inline.",
            Hints(true, false, true),
        ),
        tool::<dto::ConsolidateParams>(
            "consolidate",
            "Merge near-duplicates, summarise old episodes, flag contradictions, archive the unused. Nothing is deleted: undo a run by id.",
            Hints(false, false, false),
        ),
        tool::<dto::TasksParams>(
            "tasks",
            "Your recent tasks with status and progress; a result comes from tasks/get with its taskId.",
            Hints(true, false, true),
        ),
        tool::<dto::StatsParams>(
            "stats",
            "Counts per namespace and kind, relations, index lag, database size.",
            Hints(true, false, true),
        ),
    ]
}

fn parse<T: DeserializeOwned>(tool: &str, args: JsonObject) -> Result<T> {
    let value = serde_json::Value::Object(args);
    serde_path_to_error::deserialize(value).map_err(|e| bad_arguments(tool, e))
}

async fn blocking<T: Send + 'static>(
    engine: &Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<T> + Send + 'static,
) -> Result<T> {
    let engine = Arc::clone(engine);
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| Error::Internal(format!("tool worker panicked: {e}")))?
}

fn structured(value: impl serde::Serialize) -> Result<CallToolResult> {
    Ok(CallToolResult::structured(serde_json::to_value(value)?))
}

fn batch_out(results: Vec<dto::ItemOut>) -> Result<CallToolResult> {
    let failed = results.iter().filter(|r| r.error.is_some()).count();
    let out = dto::BatchOut {
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

/// Runs one tool call to its answer: failures the caller can act on are tool results with
/// `isError`; an unknown tool is a JSON-RPC `invalid_params` error.
pub async fn call(
    engine: &Arc<Engine>,
    name: &str,
    args: JsonObject,
    who: Acting,
) -> Result<CallToolResult, McpError> {
    let res = match name {
        "remember" => remember(engine, args, who).await,
        "relate" => relate(engine, args, who).await,
        "recall" => recall(engine, args, who).await,
        "get" => get(engine, args, who).await,
        "update" => update(engine, args, who).await,
        "forget" | "restore" => forget_or_restore(engine, name, args, who).await,
        "stats" => stats(engine, args, who).await,
        other => {
            return Err(McpError::invalid_params(
                format!("unknown tool `{other}`; call tools/list for the available tools"),
                None,
            ));
        }
    };
    res.or_else(tool_answer)
}

async fn remember(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let items = convert::remember_items(parse("remember", args)?)?;
    let rs = blocking(engine, move |e| e.remember_in(&items, &who.access)).await?;
    batch_out(
        rs.into_iter()
            .enumerate()
            .map(|(index, r)| match r {
                Ok(m) => dto::ItemOut {
                    duplicate: Some(m.duplicate),
                    links: (m.n_links > 0).then_some(m.n_links),
                    ..dto::ItemOut::stored(index, m.id)
                },
                Err(e) => dto::ItemOut::failed(index, item_error(e)),
            })
            .collect(),
    )
}

async fn relate(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let items = convert::relate_items(parse("relate", args)?);
    let rs = blocking(engine, move |e| e.relate_in(&items, &who.access)).await?;
    batch_out(
        rs.into_iter()
            .enumerate()
            .map(|(index, r)| match r {
                Ok((rel, created)) => dto::ItemOut {
                    created: Some(created),
                    ..dto::ItemOut::stored(index, rel.id)
                },
                Err(e) => dto::ItemOut::failed(index, item_error(e)),
            })
            .collect(),
    )
}

async fn recall(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let work = crate::mcp::work::recall_work(parse("recall", args)?, &who)?;
    let ctl = crate::engine::control::Progressing::default();
    let out = blocking(engine, move |e| work.run(e, &ctl)).await?;
    structured(out)
}

async fn get(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let (refs, history) = convert::get_refs(parse("get", args)?);
    let ds = blocking(engine, move |e| e.get_in(&refs, history, &who.access)).await?;
    structured(serde_json::json!({
        "memories": ds.into_iter().map(convert::detail_out).collect::<Vec<_>>()
    }))
}

async fn update(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let p: dto::UpdateParams = parse("update", args)?;
    let (target, patch) = convert::update_target(&p)?;
    let m = blocking(engine, move |e| {
        e.update_in(&target, &patch, &who.actor("update"), &who.access)
    })
    .await?;
    structured(convert::memory_out(m))
}

async fn forget_or_restore(
    engine: &Arc<Engine>,
    name: &str,
    args: JsonObject,
    who: Acting,
) -> Result<CallToolResult> {
    let forget = name == "forget";
    let (mems, rels) = convert::forget_refs(parse(name, args)?)?;
    let actor = who.actor(name);
    let r = blocking(engine, move |e| {
        e.forget_or_restore_in(&mems, &rels, &actor, forget, &who.access)
    })
    .await?;
    structured(dto::ForgetOut {
        memories: r.memories,
        relations: r.relations,
    })
}

async fn stats(engine: &Arc<Engine>, args: JsonObject, who: Acting) -> Result<CallToolResult> {
    let _: dto::StatsParams = parse("stats", args)?;
    let s = blocking(engine, move |e| e.stats_in(&who.access)).await?;
    let counts = |v: Vec<(String, i64)>| {
        v.into_iter()
            .map(|(name, count)| dto::CountOut { name, count })
            .collect()
    };
    structured(dto::StatsOut {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_tools_need_the_read_scope_and_the_others_more() {
        use crate::mcp::auth::Scope;
        for t in all() {
            let read_only = t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            assert_eq!(
                scope(&t.name, &JsonObject::new()) == Scope::Read,
                read_only,
                "{}",
                t.name
            );
        }
        let args = |v: serde_json::Value| v.as_object().cloned().unwrap();
        assert_eq!(scope("consolidate", &JsonObject::new()), Scope::Admin);
        let file = args(serde_json::json!({"source": {"path": "notes/"}}));
        assert_eq!(scope("import", &file), Scope::Admin);
        let text = args(serde_json::json!({"source": {"text": "a"}}));
        assert_eq!(scope("import", &text), Scope::Write);
        assert_eq!(
            scope("export", &args(serde_json::json!({"path": "out.jsonl"}))),
            Scope::Admin
        );
        assert_eq!(
            scope("export", &args(serde_json::json!({"path": null}))),
            Scope::Read
        );
    }

    #[test]
    fn tools_list_stays_small() {
        let json = serde_json::to_string(&all()).unwrap();
        let tokens = json.len() / 4;
        assert!(tokens < 3_000, "tools/list is about {tokens} tokens");
    }

    #[test]
    fn schemas_keep_required_fields_and_docs() {
        let s = serde_json::Value::Object(input_schema::<dto::RecallParams>());
        assert_eq!(s["required"], serde_json::json!(["query"]));
        assert!(
            s["properties"]["limit"]["description"]
                .as_str()
                .unwrap()
                .contains("1–100")
        );
        assert_eq!(s["properties"]["limit"]["type"], "integer");
    }
}
