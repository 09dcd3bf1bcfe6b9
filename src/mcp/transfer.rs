//! The `import` and `export` tools: their arguments as the engine's requests (the work runs as
//! [`crate::engine::work::Work`]).

use std::path::PathBuf;

use crate::engine::export::{ExportRequest, ExportTarget, OutFormat};
use crate::engine::import::{ImportRequest, Source};
use crate::engine::traverse::{DEFAULT_MAX_NODES, TraverseRequest};
use crate::error::{Error, Result};
use crate::formats::InFormat;
use crate::mcp::dto;
use crate::mcp::work::{Acting, traverse_request};

/// Largest export answered inline; bigger ones need `path`.
pub const MAX_INLINE_EXPORT: usize = 256 * 1024;
/// Records an inline import (client without tasks) may change before it stops; a repeat goes on.
pub const INLINE_IMPORT_LIMIT: u64 = 10_000;

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
        max_records: None,
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
