//! Recall's page cursors: an offset and a fingerprint of everything but the page, so a cursor
//! is only accepted for the query it came from.

use std::hash::{Hash, Hasher};

use crate::error::{Error, Result};
use crate::model::RecallQuery;

/// A fingerprint of everything but the page, so a cursor is only accepted for the same query.
fn fingerprint(q: &RecallQuery) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    q.text.hash(&mut h);
    format!("{:?}", q.namespaces).hash(&mut h);
    q.kinds.hash(&mut h);
    q.tags.hash(&mut h);
    q.since.hash(&mut h);
    q.until.hash(&mut h);
    q.min_importance.map(f64::to_bits).hash(&mut h);
    q.limit.hash(&mut h);
    q.mode.hash(&mut h);
    q.expand.hash(&mut h);
    q.weights
        .map(|(t, v)| (t.to_bits(), v.to_bits()))
        .hash(&mut h);
    h.finish()
}

pub fn encode_cursor(q: &RecallQuery, offset: usize) -> String {
    format!("c1.{offset}.{:016x}", fingerprint(q))
}

pub fn decode_cursor(q: &RecallQuery, cursor: &str) -> Result<usize> {
    let bad = || {
        Error::invalid(
            "cursor",
            "is not a cursor of this query",
            "pass next_cursor from the previous page unchanged, with the same query and filters, or leave it out to start over",
        )
    };
    let mut parts = cursor.split('.');
    let (Some("c1"), Some(offset), Some(fp), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let offset: usize = offset.parse().map_err(|_| bad())?;
    if fp != format!("{:016x}", fingerprint(q)) {
        return Err(bad());
    }
    Ok(offset)
}
