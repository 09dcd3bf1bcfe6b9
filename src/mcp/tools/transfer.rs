//! `import` and `export`: bulk loading from a file, folder or text, and writing memories and
//! relations out (all, some namespaces or a subgraph). Both are long work; naming a `path`
//! (a file on the server's machine) needs the admin scope.

use std::path::PathBuf;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::walks::{TraverseParams, traverse_request};
use super::{Descriptor, Hints, Long, always, input_schema, parse};
use crate::engine::export::{ExportRequest, ExportTarget, OutFormat};
use crate::engine::import::{ImportRequest, Source};
use crate::engine::traverse::{DEFAULT_MAX_NODES, TraverseRequest};
use crate::engine::work::Work;
use crate::error::{Error, Result};
use crate::formats::InFormat;
use crate::mcp::auth::Scope;
use crate::mcp::work::Acting;

/// What a scope error adds for these tools.
const PATH_NOTE: &str = " (a `path` is a file on the server's machine; leave it out to send or receive the data inline)";

/// Where `import` reads: exactly one of the two.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportSourceInput {
    /// In the server's import roots.
    pub(crate) path: Option<String>,
    /// The data itself (≤ 8 MiB).
    pub(crate) text: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportParams {
    /// Exactly one of path and text.
    pub(crate) source: ImportSourceInput,
    /// mnemograph, mcp-memory, memorygraph, locomo, markdown; default detected.
    pub(crate) format: Option<String>,
    /// For all records.
    pub(crate) namespace: Option<String>,
    /// Report only.
    pub(crate) dry_run: Option<bool>,
}

/// The memories a walk reaches, for `export`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubgraphInput {
    /// Seed ids.
    pub(crate) ids: Option<Vec<String>>,
    /// Seed names.
    pub(crate) names: Option<Vec<String>>,
    /// Hops, 1–8 (default 2).
    pub(crate) depth: Option<u8>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExportParams {
    /// jsonl (default, lossless) | graphml | dot | html.
    pub(crate) format: Option<String>,
    /// Default all.
    pub(crate) namespaces: Option<Vec<String>>,
    /// Only what this walk reaches.
    pub(crate) subgraph: Option<SubgraphInput>,
    /// New file in the import roots; default inline.
    pub(crate) path: Option<String>,
    /// Include vectors (jsonl).
    pub(crate) vectors: Option<bool>,
    /// Include previous versions (jsonl).
    pub(crate) history: Option<bool>,
}

pub(super) fn descriptors() -> Vec<Descriptor> {
    vec![
        Descriptor {
            name: "import",
            description: "Bulk-load memories and relations from a file, folder or text; idempotent; may become a task.",
            schema: input_schema::<ImportParams>,
            hints: Hints(false, false, true),
            scope: import_scope,
            scope_note: PATH_NOTE,
            long: Some(Long {
                when: always,
                work: import,
            }),
            now: None,
        },
        Descriptor {
            name: "export",
            description: "Write memories and relations (all, namespaces or a subgraph) to a file or inline.",
            schema: input_schema::<ExportParams>,
            hints: Hints(true, false, true),
            scope: export_scope,
            scope_note: PATH_NOTE,
            long: Some(Long {
                when: always,
                work: export,
            }),
            now: None,
        },
    ]
}

fn names_path(v: Option<&Value>) -> bool {
    v.is_some_and(|p| !p.is_null())
}

/// Writing needs `write`; reading a file on the server's machine, `admin`.
fn import_scope(args: &JsonObject) -> Scope {
    if names_path(args.get("source").and_then(|s| s.get("path"))) {
        Scope::Admin
    } else {
        Scope::Write
    }
}

/// Reading needs `read`; writing a file on the server's machine, `admin`.
fn export_scope(args: &JsonObject) -> Scope {
    if names_path(args.get("path")) {
        Scope::Admin
    } else {
        Scope::Read
    }
}

/// An import as work; a client that cannot poll gets a bounded one (repeating the call goes
/// on).
fn import(args: &Value, who: &Acting, _owner: &str, tasks: bool) -> Result<Work> {
    let mut request = import_request(parse("import", args)?, who)?;
    if !tasks {
        request.max_records = Some(INLINE_IMPORT_LIMIT);
    }
    Ok(Work::Import { request })
}

fn export(args: &Value, who: &Acting, _owner: &str, _tasks: bool) -> Result<Work> {
    let (request, target) = export_call(parse("export", args)?, who)?;
    Ok(Work::Export { request, target })
}

/// Largest export to the client (its window sees the result budget; the rest is kept with the
/// call's result and read by links); bigger ones need `path`.
pub(crate) const MAX_INLINE_EXPORT: usize = 8 * 1024 * 1024;
/// Records an inline import (client without tasks) may change before it stops; a repeat goes on.
pub(crate) const INLINE_IMPORT_LIMIT: u64 = 10_000;

fn import_request(p: ImportParams, who: &Acting) -> Result<ImportRequest> {
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
        job: None,
    })
}

fn export_call(p: ExportParams, who: &Acting) -> Result<(ExportRequest, ExportTarget)> {
    let format = match p.format.as_deref() {
        None => OutFormat::Jsonl,
        Some(f) => OutFormat::parse(f).ok_or_else(|| {
            Error::invalid(
                "format",
                format!("{f:?} is not an export format"),
                "use jsonl, graphml, dot or html",
            )
        })?,
    };
    let subgraph: Option<TraverseRequest> = match p.subgraph {
        None => None,
        Some(s) => {
            let walk = traverse_request(
                TraverseParams {
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
