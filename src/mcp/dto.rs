//! The wire shapes of the tools: parameters and outputs. Every field's doc comment becomes its
//! description in the schema, so keep them short and say units and defaults.

pub use crate::engine::work::output::{
    EdgeOut, ExportOut, HitOut, NodeOut, PathOut, PathsOut, RecallOut, TraverseOut, ViaOut,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A JSON object, as schemas name free-form metadata.
type JsonObject = serde_json::Map<String, serde_json::Value>;

/// A link from a new memory to an existing one.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkInput {
    /// Target id or name.
    pub to: String,
    /// e.g. about, part_of, caused_by.
    pub kind: String,
    /// 0–1, default 1.
    pub weight: Option<f64>,
}

/// One memory to store.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryInput {
    /// Text (≤ 64 KiB).
    pub content: String,
    /// fact, episode, entity, summary, note (default), …
    pub kind: Option<String>,
    /// Unique in the namespace.
    pub name: Option<String>,
    /// Labels.
    pub tags: Option<Vec<String>>,
    /// 0–1, default 0.5.
    pub importance: Option<f64>,
    /// Default "default".
    pub namespace: Option<String>,
    /// Any JSON object.
    #[schemars(with = "Option<JsonObject>")]
    pub metadata: Option<serde_json::Value>,
    /// RFC 3339.
    pub valid_from: Option<String>,
    /// RFC 3339.
    pub valid_until: Option<String>,
    /// Relations to existing memories.
    pub links: Option<Vec<LinkInput>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberParams {
    /// One or many memories.
    pub memories: Vec<MemoryInput>,
}

/// One relation to create or update.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationInput {
    /// Source id or name.
    pub from: String,
    /// Target id or name.
    pub to: String,
    /// e.g. about, part_of.
    pub kind: String,
    /// 0–1, default 1.
    pub weight: Option<f64>,
    /// Any JSON object.
    #[schemars(with = "Option<JsonObject>")]
    pub metadata: Option<serde_json::Value>,
    /// For names; default "default".
    pub namespace: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelateParams {
    /// One or many relations.
    pub relations: Vec<RelationInput>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallParams {
    /// Words or a question; no syntax.
    pub query: String,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Several namespaces; default all.
    pub namespaces: Option<Vec<String>>,
    /// Only these kinds.
    pub kinds: Option<Vec<String>>,
    /// Hits carry all of these.
    pub tags: Option<Vec<String>>,
    /// Created at or after (RFC 3339).
    pub since: Option<String>,
    /// Created at or before (RFC 3339).
    pub until: Option<String>,
    /// 0–1.
    pub min_importance: Option<f64>,
    /// 1–100, default 10 (~60 tokens a snippet hit).
    pub limit: Option<u32>,
    /// next_cursor of the previous page.
    pub cursor: Option<String>,
    /// Full content instead of snippets.
    pub full: Option<bool>,
    /// Hops of related memories to add, 0–8 (default 2).
    pub expand: Option<u8>,
    /// hybrid (default), text or vector.
    pub mode: Option<ModeInput>,
    /// Per-signal ranks and scores (for tuning; not in the schema).
    #[schemars(skip)]
    pub explain: Option<bool>,
    /// Fusion weights [text, vector], default [1, 0.25] (for tuning; not in the schema).
    #[schemars(skip)]
    pub weights: Option<Vec<f32>>,
    /// Also archived memories.
    pub include_archived: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeInput {
    Hybrid,
    Text,
    Vector,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    /// Memory ids.
    pub ids: Option<Vec<String>>,
    /// Memory names.
    pub names: Option<Vec<String>>,
    /// For names; default "default".
    pub namespace: Option<String>,
    /// Include previous versions.
    pub history: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateParams {
    /// The memory: id, or name (in `namespace`).
    pub id: Option<String>,
    /// A name instead of `id` (accepted; the schema names one identifier).
    #[schemars(skip)]
    pub name: Option<String>,
    /// Where a name resolves.
    pub namespace: Option<String>,
    /// New text.
    pub content: Option<String>,
    /// New kind.
    pub kind: Option<String>,
    /// Replaces the tags.
    pub tags: Option<Vec<String>>,
    /// 0–1.
    pub importance: Option<f64>,
    /// Replaces the metadata.
    #[schemars(with = "Option<JsonObject>")]
    pub metadata: Option<serde_json::Value>,
    /// RFC 3339.
    pub valid_from: Option<String>,
    /// RFC 3339.
    pub valid_until: Option<String>,
    /// Refuse unless at this version (as read); else a conflict.
    pub if_version: Option<i64>,
}

/// A relation by id, or by from, to and kind.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationRefInput {
    /// Relation id.
    pub id: Option<String>,
    /// Id or name.
    pub from: Option<String>,
    /// Id or name.
    pub to: Option<String>,
    /// With from and to.
    pub kind: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetParams {
    /// Memory ids.
    pub ids: Option<Vec<String>>,
    /// Memory names.
    pub names: Option<Vec<String>>,
    /// For names; default "default".
    pub namespace: Option<String>,
    /// Relations: by id, or by from, to and kind.
    pub relations: Option<Vec<RelationRefInput>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsParams {}

/// A memory as tools return it.
#[derive(Debug, Serialize)]
pub struct MemoryOut {
    pub id: String,
    pub namespace: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub importance: f64,
    #[serde(skip_serializing_if = "is_empty_object")]
    pub metadata: serde_json::Value,
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    pub version: i64,
    pub access_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgotten_at: Option<String>,
    /// Set when consolidation archived it (out of recall until asked for or restored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<String>,
}

fn is_empty_object(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(|o| o.is_empty()) || v.is_null()
}

#[derive(Debug, Serialize)]
pub struct RelationOut {
    pub id: String,
    pub from: String,
    pub to: String,
    pub kind: String,
    pub weight: f64,
    #[serde(skip_serializing_if = "is_empty_object")]
    pub metadata: serde_json::Value,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgotten_at: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ItemOut {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ItemOut {
    /// An item that was stored under `id`.
    pub fn stored(index: usize, id: String) -> ItemOut {
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
    pub fn failed(index: usize, error: Option<String>) -> ItemOut {
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
pub struct BatchOut {
    pub results: Vec<ItemOut>,
    pub ok: usize,
    pub failed: usize,
}

#[derive(Debug, Serialize)]
pub struct HistoryOut {
    pub op: String,
    pub actor: String,
    pub at: String,
    pub previous: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct DetailOut {
    /// The id asked for, when consolidation merged it into this memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<String>,
    #[serde(flatten)]
    pub memory: MemoryOut,
    pub relations: Vec<RelationOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<HistoryOut>>,
}

#[derive(Debug, Serialize)]
pub struct ForgetOut {
    pub memories: Vec<String>,
    pub relations: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct CountOut {
    pub name: String,
    pub count: i64,
}

#[derive(Debug, Serialize)]
pub struct StatsOut {
    pub memories: i64,
    pub relations: i64,
    pub forgotten_memories: i64,
    pub by_namespace: Vec<CountOut>,
    pub by_kind: Vec<CountOut>,
    pub text_index_lag: i64,
    pub database_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_model: Option<String>,
    pub vectors: i64,
    pub vector_index_lag: i64,
}

/// Which way relations are followed.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DirectionInput {
    Out,
    In,
    Both,
}

/// What a traversal returns.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReturnInput {
    Nodes,
    Paths,
    Subgraph,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraverseParams {
    /// Seed ids.
    pub ids: Option<Vec<String>>,
    /// Seed names.
    pub names: Option<Vec<String>>,
    /// Seeds: this query's top hits.
    pub query: Option<String>,
    /// For names and the query.
    pub namespace: Option<String>,
    /// Hops, 1–8 (default 2).
    pub depth: Option<u8>,
    /// Default both.
    pub direction: Option<DirectionInput>,
    /// Relation kinds to follow.
    pub kinds: Option<Vec<String>>,
    /// Skip weaker relations (0–1).
    pub min_weight: Option<f64>,
    /// RFC 3339: relations valid then.
    pub valid_at: Option<String>,
    /// Node budget (default and, without tasks, most 10000).
    pub max_nodes: Option<u64>,
    /// nodes (default), paths or subgraph.
    #[serde(rename = "return")]
    pub return_: Option<ReturnInput>,
    /// Rank nodes by this text.
    pub focus: Option<String>,
    /// Most nodes listed, 1–1000 (default 50; ~70 tokens each).
    pub limit: Option<u32>,
    /// Also archived memories.
    pub include_archived: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindPathsParams {
    /// Start id or name.
    pub from: String,
    /// End id or name.
    pub to: String,
    /// Where names resolve.
    pub namespace: Option<String>,
    /// Other paths, 0–10 (default 3).
    pub k: Option<u32>,
    /// Default both.
    pub direction: Option<DirectionInput>,
    /// Relation kinds to follow.
    pub kinds: Option<Vec<String>>,
    /// Skip weaker relations.
    pub min_weight: Option<f64>,
    /// RFC 3339.
    pub valid_at: Option<String>,
    /// 1–8 (default 6).
    pub max_hops: Option<u8>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TasksParams {
    /// 1–100 (default 20).
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskOut {
    pub task_id: String,
    pub tool: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    pub created_at: String,
    pub last_updated_at: String,
    /// Who runs it, when not the caller (`scheduler`: the server's scheduled consolidation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Where `import` reads: exactly one of the two.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportSourceInput {
    /// File or folder in the server's import roots.
    pub path: Option<String>,
    /// The data itself (≤ 8 MiB).
    pub text: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// Exactly one of path and text.
    pub source: ImportSourceInput,
    /// mnemograph, mcp-memory, memorygraph, locomo, markdown; default detected.
    pub format: Option<String>,
    /// For all records.
    pub namespace: Option<String>,
    /// Only report what would happen.
    pub dry_run: Option<bool>,
}

/// The memories a walk reaches, for `export`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubgraphInput {
    /// Seed ids.
    pub ids: Option<Vec<String>>,
    /// Seed names.
    pub names: Option<Vec<String>>,
    /// Hops, 1–8 (default 2).
    pub depth: Option<u8>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    /// jsonl (lossless, re-importable; default) | graphml | dot.
    pub format: Option<String>,
    /// Default all.
    pub namespaces: Option<Vec<String>>,
    /// Only what this walk reaches.
    pub subgraph: Option<SubgraphInput>,
    /// New file in the import roots (default inline: ≤ 256 KiB, ~64k tokens).
    pub path: Option<String>,
    /// Include vectors (jsonl).
    pub vectors: Option<bool>,
    /// Include previous versions (jsonl).
    pub history: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsolidateParams {
    /// Default all.
    pub namespaces: Option<Vec<String>>,
    /// Subset of merge, summarise, contradictions, decay, archive, hygiene.
    pub steps: Option<Vec<String>>,
    /// Overrides, e.g. {"resolve":"newest"}.
    pub policy: Option<serde_json::Map<String, serde_json::Value>>,
    /// Report, write nothing.
    pub dry_run: Option<bool>,
    /// Undo this run (its id) instead.
    pub undo: Option<String>,
    /// With undo: first undo later runs built on it.
    pub cascade: Option<bool>,
    /// List recent runs instead.
    pub runs: Option<bool>,
}
