//! The `import` and `export` tools: argument conversion, cost estimates for the inline-or-task
//! decision, and their runs against the engine (inline or inside a task).

use std::path::PathBuf;

use serde_json::Value;

use crate::engine::Engine;
use crate::engine::control::Control;
use crate::engine::export::{ExportRequest, ExportTarget, OutFormat};
use crate::engine::import::{ImportRequest, Source};
use crate::engine::traverse::{DEFAULT_MAX_NODES, TraverseRequest};
use crate::error::{Error, Result};
use crate::formats::InFormat;
use crate::mcp::dto;
use crate::mcp::work::{Acting, parse, traverse_request};

/// Largest export answered inline; bigger ones need `path`.
pub const MAX_INLINE_EXPORT: usize = 256 * 1024;
/// Records an inline import (client without tasks) may change before it stops; a repeat goes on.
pub const INLINE_IMPORT_LIMIT: u64 = 10_000;
/// Memories written per millisecond by an export (for the estimate).
const EXPORT_PER_MS: f64 = 50.0;

pub(crate) fn import_request(p: dto::ImportParams, who: &Acting) -> Result<ImportRequest> {
    let source = match (p.source.path, p.source.text) {
        (Some(path), None) => Source::Path(PathBuf::from(path)),
        (None, Some(text)) => Source::Inline(text),
        _ => {
            return Err(Error::invalid(
                "source",
                "needs exactly one of `path` and `text`",
                "give {\"path\": \"notes/\"} for a file or folder on the server, or {\"text\": \"…\"} with the data",
            ));
        }
    };
    let format = match p.format.as_deref() {
        None => None,
        Some(f) => Some(InFormat::parse(f).ok_or_else(|| {
            Error::invalid(
                "format",
                format!("{f:?} is not a format import reads"),
                format!(
                    "use one of {} (or leave it out to detect)",
                    InFormat::ALL.map(|f| f.name()).join(", ")
                ),
            )
        })?),
    };
    Ok(ImportRequest {
        source,
        format,
        namespace: p.namespace,
        dry_run: p.dry_run.unwrap_or(false),
        actor: who.actor("import"),
        max_records: p.max_records,
        access: who.access.clone(),
    })
}

pub(crate) fn export_call(
    p: dto::ExportParams,
    who: &Acting,
) -> Result<(ExportRequest, ExportTarget)> {
    let format = match p.format.as_deref() {
        None => OutFormat::Jsonl,
        Some(f) => OutFormat::parse(f).ok_or_else(|| {
            Error::invalid(
                "format",
                format!("{f:?} is not an export format"),
                "use jsonl, graphml or dot",
            )
        })?,
    };
    let subgraph: Option<TraverseRequest> = match p.subgraph {
        None => None,
        Some(s) => {
            let walk = traverse_request(
                dto::TraverseParams {
                    ids: s.ids,
                    names: s.names,
                    query: None,
                    namespace: p
                        .namespaces
                        .as_ref()
                        .and_then(|n| (n.len() == 1).then(|| n[0].clone())),
                    depth: s.depth,
                    direction: None,
                    kinds: None,
                    min_weight: None,
                    valid_at: None,
                    max_nodes: Some(DEFAULT_MAX_NODES as u64 * 10),
                    return_: None,
                    focus: None,
                    limit: None,
                    // An export keeps what consolidation archived.
                    include_archived: Some(true),
                    inline_limit: None,
                },
                &who.access,
            )?;
            if walk.seeds.is_empty() {
                return Err(Error::invalid(
                    "subgraph",
                    "names no seeds",
                    "give subgraph.ids or subgraph.names",
                ));
            }
            Some(walk)
        }
    };
    let target = match p.path {
        Some(path) => ExportTarget::Path(PathBuf::from(path)),
        None => ExportTarget::Inline(MAX_INLINE_EXPORT),
    };
    Ok((
        ExportRequest {
            namespaces: who.access.narrow_list("namespaces", p.namespaces)?,
            format,
            subgraph,
            vectors: p.vectors.unwrap_or(false),
            history: p.history.unwrap_or(false),
        },
        target,
    ))
}

/// Cheap checks and the cost of an import or export, in milliseconds.
pub fn estimate(engine: &Engine, tool: &str, args: &Value, who: &Acting) -> Result<f64> {
    match tool {
        "import" => engine.estimate_import(&import_request(parse(tool, args)?, who)?),
        _ => {
            let (req, target) = export_call(parse(tool, args)?, who)?;
            engine.check_export_target(&target)?;
            let n = engine.count_live(req.namespaces.as_deref())?;
            Ok(n as f64 / EXPORT_PER_MS)
        }
    }
}

pub fn run_import(engine: &Engine, args: &Value, ctl: &dyn Control, who: &Acting) -> Result<Value> {
    let req = import_request(parse("import", args)?, who)?;
    let report = engine.import(&req, ctl)?;
    let mut v = serde_json::to_value(&report)?;
    if report.truncated
        && let Value::Object(o) = &mut v
    {
        o.insert(
            "hint".into(),
            Value::from("stopped at the inline work limit (this client cannot receive tasks): call import again with the same arguments to go on; stored records are skipped"),
        );
    }
    Ok(v)
}

pub fn run_export(engine: &Engine, args: &Value, ctl: &dyn Control, who: &Acting) -> Result<Value> {
    let (req, target) = export_call(parse("export", args)?, who)?;
    let out = engine.export_to(&req, &target, ctl)?;
    Ok(serde_json::to_value(dto::ExportOut {
        format: req.format.name().to_owned(),
        memories: out.counts.memories,
        relations: out.counts.relations,
        bytes: out.bytes,
        path: out.path.map(|p| p.display().to_string()),
        data: out.text,
    })?)
}
