//! What long work answers, in the shape clients receive it (tool results inline, and task
//! results as `tasks/get` returns them): the same shapes whichever process ran the work.

use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct HitOut {
    pub id: String,
    pub namespace: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    pub score: f32,
    pub relations: i64,
    pub created_at: String,
    /// How an expanded hit was reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<crate::model::Via>,
    /// Near-duplicates collapsed into this hit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub duplicates: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<crate::model::Explain>,
}

#[derive(Debug, Serialize)]
pub struct RecallOut {
    pub hits: Vec<HitOut>,
    /// What degraded the answer (embedder down, index catching up).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Memories related to the hits (with `expand`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related: Option<Vec<NodeOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct ViaOut {
    pub from: String,
    pub kind: String,
    pub weight: f64,
    pub forward: bool,
}

#[derive(Debug, Serialize)]
pub struct NodeOut {
    pub id: String,
    pub namespace: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub snippet: String,
    pub depth: u8,
    pub strength: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<ViaOut>,
}

#[derive(Debug, Serialize)]
pub struct PathOut {
    pub ids: Vec<String>,
    pub kinds: Vec<String>,
    pub strength: f64,
}

#[derive(Debug, Serialize)]
pub struct EdgeOut {
    pub from: String,
    pub to: String,
    pub kind: String,
    pub weight: f64,
}

#[derive(Debug, Serialize)]
pub struct TraverseOut {
    pub seeds: Vec<String>,
    pub nodes: Vec<NodeOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<PathOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edges: Option<Vec<EdgeOut>>,
    pub reached: usize,
    pub visited: u64,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PathsOut {
    pub paths: Vec<PathOut>,
    pub visited: u64,
}

#[derive(Debug, Serialize)]
pub struct ExportOut {
    pub format: String,
    pub memories: u64,
    pub relations: u64,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}
