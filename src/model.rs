//! Domain types shared by every layer: memories, relations, hits and their ids. No I/O, no MCP.

use serde::{Deserialize, Serialize};

/// Internal row id of a memory (SQLite `rowid`), used by the derived indexes. Never shown to users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemoryKey(pub i64);

/// A map keyed by memory keys, hashed by one multiplication (see [`KeyHashing`]).
pub type KeyMap<V> = std::collections::HashMap<MemoryKey, V, KeyHashing>;
/// A set of memory keys, hashed by one multiplication (see [`KeyHashing`]).
pub type KeySet = std::collections::HashSet<MemoryKey, KeyHashing>;

/// Hashing for memory keys: the 128-bit product of the key and an odd constant, its halves
/// folded together. The keys are row ids the database hands out, never input a caller chooses,
/// so std's SipHash and its defence against chosen collisions are not needed, and its cost was
/// about 3 % of the instructions of a recall, which fills several such maps.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyHashing;

impl std::hash::BuildHasher for KeyHashing {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// The hasher of [`KeyHashing`].
#[derive(Debug, Clone, Copy)]
pub struct KeyHasher(u64);

impl KeyHasher {
    fn mix(&mut self, word: u64) {
        let p = u128::from(self.0 ^ word) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }
    fn write_i64(&mut self, key: i64) {
        self.mix(key as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A position of a database's change log as a derived index records it: the database's id, the
/// entry's `seq` and that entry's random stamp. Two histories that share a `seq` (a restored
/// backup that was written to again) differ in the stamp; another database differs in the id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LogPosition {
    pub database: String,
    pub seq: i64,
    pub stamp: i64,
}

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// Now, in milliseconds since the Unix epoch.
pub fn now_millis() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The namespace used when a call names none.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The kind used when a memory names none.
pub const DEFAULT_KIND: &str = "note";
/// Importance given when a memory names none.
pub const DEFAULT_IMPORTANCE: f64 = 0.5;

/// A stored memory, as the store returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Internal row id.
    pub key: MemoryKey,
    /// Stable external id (`m_…`).
    pub id: String,
    pub namespace: String,
    pub kind: String,
    pub name: Option<String>,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub metadata: serde_json::Value,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub accessed_at: Option<Millis>,
    pub access_count: i64,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
    /// External id of the memory that replaced this one, if any.
    pub superseded_by: Option<String>,
    pub version: i64,
    /// Set when the memory was forgotten (soft delete).
    pub deleted_at: Option<Millis>,
    /// Id of the memory a consolidation run merged this one into (it is then forgotten too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_into: Option<String>,
    /// Set when a consolidation run archived the memory: out of recall and traversal by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<Millis>,
    /// Salience (0–1) as computed at `salience_at`; it decays from there with time unused and is
    /// reinforced by use (`engine::curate::salience`).
    #[serde(default = "default_salience")]
    pub salience: f64,
    #[serde(default)]
    pub salience_at: Millis,
}

fn default_salience() -> f64 {
    DEFAULT_IMPORTANCE
}

/// What a caller supplies to create a memory (already validated).
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub namespace: String,
    pub kind: String,
    pub name: Option<String>,
    pub content: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub metadata: serde_json::Value,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
}

impl NewMemory {
    /// A plain note: `content` in the default namespace, kind `note`, no name, tags, metadata
    /// or validity bounds, importance 0.5.
    pub fn note(content: &str) -> NewMemory {
        NewMemory {
            namespace: "default".into(),
            kind: "note".into(),
            name: None,
            content: content.into(),
            tags: Vec::new(),
            importance: 0.5,
            metadata: serde_json::json!({}),
            valid_from: None,
            valid_until: None,
        }
    }
}

/// Changes to one memory; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryPatch {
    pub content: Option<String>,
    pub kind: Option<String>,
    pub tags: Option<Vec<String>>,
    pub importance: Option<f64>,
    pub metadata: Option<serde_json::Value>,
    /// `Some(None)` clears the bound.
    pub valid_from: Option<Option<Millis>>,
    pub valid_until: Option<Option<Millis>>,
    /// A condition, not a change: the update is refused unless the memory is at this version
    /// (the one its writer read), so two writers never silently overwrite each other.
    pub if_version: Option<i64>,
}

/// A directed, typed, weighted edge between two memories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relation {
    /// Stable external id (`r_…`).
    pub id: String,
    /// External id of the source memory.
    pub from: String,
    /// External id of the target memory.
    pub to: String,
    pub kind: String,
    pub weight: f64,
    pub metadata: serde_json::Value,
    pub created_at: Millis,
    pub reinforced_at: Millis,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
    pub deleted_at: Option<Millis>,
}

/// A live relation as the graph needs it: internal keys of both ends, kind, weight, validity.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeRow {
    /// Internal key of the relation row.
    pub relation: i64,
    pub src: i64,
    pub dst: i64,
    pub kind: String,
    pub weight: f64,
    /// When the relation was made or last reinforced by use (its strength decays from then).
    pub reinforced_at: Millis,
    pub valid_from: Option<Millis>,
    pub valid_until: Option<Millis>,
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Working,
    /// Waiting for the client to answer the row's input requests (`tasks/update`).
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Working => "working",
            TaskState::InputRequired => "input_required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> TaskState {
        match s {
            "input_required" => TaskState::InputRequired,
            "completed" => TaskState::Completed,
            "failed" => TaskState::Failed,
            "cancelled" => TaskState::Cancelled,
            _ => TaskState::Working,
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskState::Working | TaskState::InputRequired)
    }
}

/// A durable task: one long tool call, its progress and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    /// 128-bit random id.
    pub id: String,
    pub owner: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub status: TaskState,
    pub status_message: Option<String>,
    /// Machine-readable counters (visited, frontier, depth, …).
    pub progress: serde_json::Value,
    /// The tool's output when completed.
    pub result: Option<serde_json::Value>,
    /// `{ "user": bool, "message": … }` when the work failed.
    pub error: Option<serde_json::Value>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// Where resumable work goes on from after a restart.
    pub checkpoint: Option<serde_json::Value>,
    /// The process running it.
    pub boot_id: String,
    pub heartbeat_at: Millis,
    pub cancel_requested: bool,
    /// The requests the client has still to answer, by key, while `input_required`.
    pub input_requests: Option<serde_json::Value>,
    /// Every answer the client gave, by key (kept for a re-run after a restart).
    pub input_responses: Option<serde_json::Value>,
    /// The rights of the call that started it (scope and namespaces): only callers with the
    /// same or wider rights see it. `None` in rows written before grants were kept.
    pub grant: Option<serde_json::Value>,
}

/// A job: the logical work behind a client's tasks, keyed by namespace and name, whose memory
/// (checkpoints, memories learned, task results) outlives any one task or server.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub namespace: String,
    pub name: String,
    /// `open` or `closed`.
    pub state: String,
    /// The latest checkpoint's version; 0 before the first.
    pub head: i64,
    pub created_by: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub closed_at: Option<Millis>,
}

/// One checkpoint of a job: a version with its parent (`None` for the first); a revert names
/// the version whose body it restores.
#[derive(Debug, Clone, PartialEq)]
pub struct JobVersion {
    pub version: i64,
    pub parent: Option<i64>,
    pub reverts_to: Option<i64>,
    /// What the client saved: a JSON object (a note, what was learned, open questions, state).
    pub body: serde_json::Value,
    /// Who wrote it (`tool:job by <subject>`, or the task that filed it).
    pub author: String,
    pub task_id: Option<String>,
    pub created_at: Millis,
}

/// The job a call's work is filed under: a job name within a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRef {
    pub namespace: String,
    pub name: String,
}

/// The outcome of a task run under a job, kept with the job after the task's TTL: filed when
/// the task starts (`working`), brought up to date at its checkpoints, and final when it ends.
/// A call answered inline files its outcome at once, under an id of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    pub task_id: String,
    pub tool: String,
    /// `working` while the task runs; then `completed`, `failed` or `cancelled`.
    pub status: String,
    /// Its last status message.
    pub summary: String,
    /// Its whole result (or error), as the task had it.
    pub result: Option<serde_json::Value>,
    /// When the row last changed: the task's end, or its latest checkpoint while it runs.
    pub finished_at: Millis,
    /// The namespaces the task could read (`None`: all), as `Access::to_json` writes them:
    /// a reader of the job whose rights do not cover them sees the result's summary only.
    pub reach: Option<serde_json::Value>,
}

/// One consolidation run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    /// `tool:<owner>`, `cli` or `scheduler`.
    pub started_by: String,
    pub namespaces: Vec<String>,
    pub steps: Vec<String>,
    pub policy: serde_json::Value,
    /// `running`, `completed`, `cancelled`, `failed`, `interrupted` or `undone`.
    pub state: String,
    pub counts: serde_json::Value,
    pub checkpoint: Option<serde_json::Value>,
    pub task_id: Option<String>,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    pub undone_at: Option<Millis>,
    pub undone_by: Option<String>,
}

impl RunRow {
    /// What a listing of runs shows of this one (the `consolidate` tool's `runs: true`).
    pub fn listing(&self) -> serde_json::Value {
        serde_json::json!({
            "run_id": self.id,
            "started_by": self.started_by,
            "state": self.state,
            "namespaces": self.namespaces,
            "steps": self.steps,
            "counts": self.counts,
            "started_at": format_time(self.started_at),
            "ended_at": self.ended_at.map(format_time),
        })
    }
}

/// One previous version of a memory or relation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// What changed it: `update`, `forget`, `restore`, …
    pub op: String,
    /// Who changed it: a tool call (`tool:update`) or the CLI.
    pub actor: String,
    pub at: Millis,
    /// The version before the change.
    pub previous: serde_json::Value,
}

/// Where a memory or relation is reached by a caller: by external id or by name in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemoryRef {
    Id(String),
    Name { namespace: String, name: String },
}

impl std::fmt::Display for MemoryRef {
    /// As messages name it: the id, or the name with its namespace.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryRef::Id(id) => f.write_str(id),
            MemoryRef::Name { namespace, name } => {
                write!(f, "{name:?} in namespace {namespace:?}")
            }
        }
    }
}

/// Which namespaces a read looks in.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum NamespaceScope {
    #[default]
    All,
    Only(Vec<String>),
}

/// Hops of neighbours a recall merges into its ranking unless told otherwise. Measured on two
/// conversation sets (turns linked to the turn before them): R@10 LoCoMo 0.606 → 0.664, RealMem
/// 0.208 → 0.256 against no expansion (see docs/design/recall.md, "Expansion by default").
pub const DEFAULT_EXPAND: u8 = 2;

/// Filters and paging of a recall.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecallQuery {
    pub text: String,
    pub namespaces: NamespaceScope,
    pub kinds: Vec<String>,
    /// A hit must carry every one of these tags.
    pub tags: Vec<String>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    pub min_importance: Option<f64>,
    pub limit: usize,
    /// Ranked hits skipped before the page (cursors of older versions counted positions; the
    /// engine's own tests page by it).
    pub offset: usize,
    /// Marks of the hits earlier pages showed ([`crate::engine::cursor::mark`]), left out of
    /// this page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen: Vec<u64>,
    /// Which signals rank the hits.
    pub mode: RecallMode,
    /// Hops of neighbours merged into the ranking (0–2; default [`DEFAULT_EXPAND`]).
    pub expand: u8,
    /// Report each signal's rank and score on every hit.
    pub explain: bool,
    /// Also rank archived memories (consolidation archives what went unused for long).
    pub include_archived: bool,
    /// Weights of the text and vector signals in the fusion; `None`: the engine's default,
    /// text 1 and vector 0.35 (`engine::recall::DEFAULT_WEIGHTS`).
    pub weights: Option<(f32, f32)>,
}

impl RecallQuery {
    /// How deep in the ranking this page can reach: the hits skipped or shown before it and
    /// its own.
    pub fn depth(&self) -> usize {
        self.offset + self.seen.len() + self.limit
    }
}

impl Default for RecallQuery {
    fn default() -> RecallQuery {
        RecallQuery {
            text: String::new(),
            namespaces: NamespaceScope::All,
            kinds: Vec::new(),
            tags: Vec::new(),
            since: None,
            until: None,
            min_importance: None,
            limit: 0,
            offset: 0,
            seen: Vec::new(),
            mode: RecallMode::default(),
            expand: DEFAULT_EXPAND,
            explain: false,
            include_archived: false,
            weights: None,
        }
    }
}

/// Which signals rank a recall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecallMode {
    /// Text and vector scores fused (each scaled to its best), with boosts. The default.
    #[default]
    Hybrid,
    /// Words only; the score is the BM25 score times the square root of the share of the
    /// query's weight the memory holds.
    Text,
    /// Vector similarity only; the score is the cosine similarity.
    Vector,
}

/// One ranked recall hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub memory: Memory,
    /// Hybrid: the fused ranks (1 when first by words and by meaning) times the boosts; text:
    /// the BM25 score; vector: the cosine similarity.
    pub score: f32,
    pub snippet: String,
    pub n_relations: i64,
    /// Set when the hit was added by graph expansion: the hit it was reached from.
    pub via: Option<Via>,
    /// Ids of near-duplicate memories collapsed into this hit.
    pub duplicates: Vec<String>,
    /// Each signal's part in the score (when asked for).
    pub explain: Option<Explain>,
}

/// How an expanded hit was reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Via {
    /// Id of the memory it was reached from.
    pub from: String,
    /// Kind of the relation followed (from `from` to this hit, or back when `forward` is false).
    pub relation: String,
    pub forward: bool,
    pub hops: u8,
}

/// The signals behind one hit's score.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Explain {
    /// 1-based rank in the text list, and the text score (BM25 times the square root of the
    /// share of the query it covers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_score: Option<f32>,
    /// 1-based rank in the vector list, and the cosine similarity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_similarity: Option<f32>,
    /// The weighted mean of the text score (over the best one) and the vector similarity (between
    /// the last and the best candidate's): 1 when first in both lists.
    pub fused: f32,
    /// Multipliers applied to the fused score.
    pub importance_boost: f32,
    pub recency_boost: f32,
    /// Salience (decayed with time unused, reinforced by use).
    pub salience_boost: f32,
    /// Score inherited through graph expansion (decayed), when that was higher.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expanded: Option<f32>,
    pub score: f32,
}

/// One page of recall hits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecallPage {
    pub hits: Vec<Hit>,
    /// Whether more hits rank below the page.
    pub more: bool,
    /// What degraded this answer (a failing embedder, an index still catching up).
    pub warnings: Vec<String>,
}

/// Counts of memories per namespace and kind.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Stats {
    pub memories: i64,
    pub relations: i64,
    pub forgotten_memories: i64,
    pub by_namespace: Vec<(String, i64)>,
    pub by_kind: Vec<(String, i64)>,
    /// Change-log entries the text index has not applied yet.
    pub text_index_lag: i64,
    pub database_bytes: u64,
    /// Model of the vectors (None: text-only recall).
    pub embedding_model: Option<String>,
    /// Live memories with a vector of that model.
    pub vectors: i64,
    /// Change-log entries the vector index has not applied yet.
    pub vector_index_lag: i64,
}

/// Parses an RFC 3339 time (`2024-05-01T10:00:00Z`, with optional fraction and offset) or a date
/// (`2024-05-01`, midnight UTC) into milliseconds since the epoch.
pub fn parse_time(s: &str) -> Option<Millis> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return None;
    }
    let mut ms = days_from_civil(y, mo, d) * 86_400_000;
    if b.len() == 10 {
        return Some(ms);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    ms += (h * 3600 + mi * 60 + sec) * 1000;
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i.min(start + 3)];
        let scale = 10i64.pow(3 - frac.len() as u32);
        ms += frac.parse::<i64>().ok()? * scale;
    }
    match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => Some(ms),
        Some(sign @ (b'+' | b'-')) if b.len() == i + 6 && b[i + 3] == b':' => {
            let off = (num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?) * 60_000;
            Some(if *sign == b'+' { ms - off } else { ms + off })
        }
        None => Some(ms),
        _ => None,
    }
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with millisecond precision.
pub fn format_time(ms: Millis) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-date algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        for s in [
            "1970-01-01T00:00:00.000Z",
            "2024-02-29T23:59:58.123Z",
            "1969-12-31T23:59:59.999Z",
        ] {
            assert_eq!(format_time(parse_time(s).unwrap()), s);
        }
        assert_eq!(parse_time("2024-05-01"), parse_time("2024-05-01T00:00:00Z"));
        assert_eq!(
            parse_time("2024-05-01T02:00:00+02:00"),
            parse_time("2024-05-01T00:00:00Z")
        );
        assert_eq!(
            parse_time("2024-05-01T00:00:00.5Z"),
            Some(parse_time("2024-05-01").unwrap() + 500)
        );
    }

    #[test]
    fn bad_times_are_refused() {
        for s in [
            "",
            "yesterday",
            "2024-13-01",
            "2023-02-29",
            "2024-05-01T25:00:00Z",
            "2024-05-01Tx",
        ] {
            assert_eq!(parse_time(s), None, "{s}");
        }
    }
}
