//! The `recall` tool: a search by words and meaning; with `expand` beyond two hops it is long
//! work (a walk from the hits) and may become a task.

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{
    Call, Descriptor, Hints, Long, Pending, blocking, input_schema, parse, read, structured_as,
    time,
};
use crate::engine::Access;
use crate::engine::control::Progressing;
use crate::engine::cursor::{decode_cursor, next_cursor};
use crate::engine::traverse::{DEFAULT_MAX_NODES, MAX_DEPTH};
use crate::engine::work::{INLINE_EXPAND, Work};
use crate::error::{Error, Result};
use crate::mcp::budget;
use crate::mcp::work::Acting;
use crate::model::{NamespaceScope, RecallMode, RecallQuery};

/// Default page size.
const DEFAULT_LIMIT: u32 = 10;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallParams {
    /// Words or a question; no syntax.
    pub(crate) query: String,
    /// Only this namespace.
    pub(crate) namespace: Option<String>,
    /// Default all.
    pub(crate) namespaces: Option<Vec<String>>,
    /// Only these kinds.
    pub(crate) kinds: Option<Vec<String>>,
    /// Hits carry all of these.
    pub(crate) tags: Option<Vec<String>>,
    /// Created at or after (RFC 3339).
    pub(crate) since: Option<String>,
    /// Created at or before (RFC 3339).
    pub(crate) until: Option<String>,
    /// 0–1.
    pub(crate) min_importance: Option<f64>,
    /// 1–100, default 10 (~60 tokens a snippet hit).
    pub(crate) limit: Option<u32>,
    /// From the last page.
    pub(crate) cursor: Option<String>,
    /// Whole contents.
    pub(crate) full: Option<bool>,
    /// Hops of related memories to add, 0–8 (default 2).
    pub(crate) expand: Option<u8>,
    /// hybrid (default), text or vector.
    pub(crate) mode: Option<ModeInput>,
    /// Per-signal ranks and scores (for tuning; not in the schema).
    #[schemars(skip)]
    pub(crate) explain: Option<bool>,
    /// Fusion weights [text, vector], default [1, 0.35] (for tuning; not in the schema).
    #[schemars(skip)]
    pub(crate) weights: Option<Vec<f32>>,
    /// Also archived.
    pub(crate) include_archived: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ModeInput {
    Hybrid,
    Text,
    Vector,
}

pub(super) fn descriptor() -> Descriptor {
    Descriptor {
        name: "recall",
        description: "Search memories by words and meaning; expand adds related ones.",
        schema: input_schema::<RecallParams>,
        hints: Hints(true, false, true),
        scope: read,
        scope_note: "",
        long: Some(Long {
            when: deep,
            work: |args, who, _, _| work(parse("recall", args)?, who),
        }),
        now: Some(now),
    }
}

/// Whether a call expands deeper than recall's own expansion (a walk from the hits).
fn deep(args: &JsonObject) -> bool {
    args.get("expand")
        .and_then(Value::as_u64)
        .is_some_and(|e| e > u64::from(INLINE_EXPAND))
}

fn now(c: Call, args: JsonObject) -> Pending {
    Box::pin(async move {
        let work = work(parse("recall", &Value::Object(args))?, &c.who)?;
        let query = match &work {
            Work::Recall { query, .. } => query.clone(),
            _ => return Err(Error::Internal("recall became other work".into())),
        };
        let ctl = Progressing::default();
        let mut out = blocking(&c.engine, move |e| work.run(e, &ctl)).await?;
        let text = page_within(&mut out, &query, c.budget);
        Ok(structured_as(out, text))
    })
}

/// Shows as many hits as the result budget allows, the best first, and points the cursor at
/// the first one left out, so that the next page starts there (the budget counts the result
/// twice: as structured content and as its text). Returns the page as compact JSON, the text
/// of the result, written once.
fn page_within(out: &mut Value, q: &RecallQuery, tokens: usize) -> String {
    let room = (budget::bytes(tokens) / 2).saturating_sub(PAGE_MARGIN);
    let text = out.to_string();
    let mut total = text.len();
    if total <= room {
        return text;
    }
    let Some(hits) = out.get_mut("hits").and_then(Value::as_array_mut) else {
        return text;
    };
    let listed = hits.len();
    while total > room && hits.len() > 1 {
        let last = hits.pop().map_or(0, |h| budget::size(&h) + 1);
        total = total.saturating_sub(last);
    }
    if hits.len() < listed {
        let shown = hits.iter().filter_map(|h| {
            let duplicates = h["duplicates"].as_array().map_or(&[][..], Vec::as_slice);
            Some((
                h["id"].as_str()?,
                duplicates.iter().filter_map(Value::as_str),
            ))
        });
        let cursor = next_cursor(q, shown);
        out["next_cursor"] = Value::String(cursor);
    }
    out.to_string()
}

/// Bytes left for what a cut may add (its note, links) when recall fits its own page.
const PAGE_MARGIN: usize = 512;

/// A recall as work: its query within the caller's namespaces, and how deep its hits expand.
fn work(p: RecallParams, who: &Acting) -> Result<Work> {
    let expand = p.expand.unwrap_or(crate::model::DEFAULT_EXPAND);
    if expand > MAX_DEPTH {
        return Err(Error::invalid(
            "expand",
            format!("is {expand}"),
            "give 0 to 8 hops",
        ));
    }
    Ok(Work::Recall {
        query: within(&p, &who.access)?,
        expand,
        max_nodes: DEFAULT_MAX_NODES,
        full: p.full.unwrap_or(false),
        access: who.access.clone(),
    })
}

/// The recall a caller asked for, within the namespaces it may use.
fn within(p: &RecallParams, access: &Access) -> Result<RecallQuery> {
    let mut q = query(p)?;
    let field = if p.namespaces.is_some() {
        "namespaces"
    } else {
        "namespace"
    };
    q.namespaces = access.narrow(field, q.namespaces)?;
    Ok(q)
}

fn query(p: &RecallParams) -> Result<RecallQuery> {
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
        seen: Vec::new(),
        mode: match p.mode {
            Some(ModeInput::Text) => RecallMode::Text,
            Some(ModeInput::Vector) => RecallMode::Vector,
            Some(ModeInput::Hybrid) | None => RecallMode::Hybrid,
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
        (q.offset, q.seen) = decode_cursor(&q, c)?;
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str, cursor: Option<String>) -> RecallParams {
        RecallParams {
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
        use crate::engine::cursor::mark;
        let q = query(&params("tea", None)).unwrap();
        let c = next_cursor(&q, [("m_a", []), ("m_b", [])]);
        let next = query(&params("tea", Some(c.clone()))).unwrap();
        assert_eq!(
            (next.offset, &next.seen),
            (0, &vec![mark("m_a"), mark("m_b")])
        );
        // The page after that carries both pages' hits.
        let third = query(&params("tea", Some(next_cursor(&next, [("m_c", [])])))).unwrap();
        assert_eq!(third.seen, vec![mark("m_a"), mark("m_b"), mark("m_c")]);
        // A cursor of an older version counted positions; it still pages.
        let fp = c.split('.').nth(1).unwrap();
        let old = query(&params("tea", Some(format!("c1.10.{fp}")))).unwrap();
        assert_eq!((old.offset, old.seen.len()), (10, 0));
        assert!(query(&params("coffee", Some(c.clone()))).is_err());
        let short = format!("c2.{fp}.0.AAAA");
        let not_base64 = format!("c2.{fp}.0.????????");
        for bad in [
            "",
            "garbage",
            "c1.x.0",
            "c1.10.0000000000000000.extra",
            &short,
            &not_base64,
            &c[..c.len() - 1],
        ] {
            let e = query(&params("tea", Some(bad.into()))).unwrap_err();
            assert!(e.to_string().contains("`cursor`"), "{bad}");
        }
    }

    #[test]
    fn a_page_cut_to_the_budget_points_past_its_hits_and_their_duplicates() {
        use crate::engine::cursor::mark;
        let q = query(&params("tea", None)).unwrap();
        let hit = |i: usize| {
            serde_json::json!({"id": format!("m_{i}"), "snippet": "x".repeat(500),
                               "duplicates": [format!("m_d{i}")]})
        };
        let mut out = serde_json::json!({ "hits": (0..10).map(hit).collect::<Vec<_>>() });
        page_within(&mut out, &q, 2_000);
        let shown = out["hits"].as_array().unwrap().len();
        assert!((2..10).contains(&shown), "{shown} hits shown");
        let (offset, seen) = decode_cursor(&q, out["next_cursor"].as_str().unwrap()).unwrap();
        let want: Vec<u64> = (0..shown)
            .flat_map(|i| [mark(&format!("m_{i}")), mark(&format!("m_d{i}"))])
            .collect();
        assert_eq!((offset, seen), (0, want));
    }

    #[test]
    fn marks_are_48_bits_and_tell_ids_apart() {
        use crate::engine::cursor::mark;
        let marks: std::collections::HashSet<u64> =
            (0..10_000).map(|i| mark(&format!("m_{i:020}"))).collect();
        assert_eq!(marks.len(), 10_000);
        assert!(marks.iter().all(|m| *m < 1 << 48));
    }
}
