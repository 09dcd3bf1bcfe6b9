//! Recall's page cursors: the hits earlier pages showed, and a fingerprint of everything but the
//! page, so a cursor is only accepted for the query it came from.
//!
//! A cursor names what was shown rather than a position. Between two pages the ranking moves:
//! the first page's hits count as used (their salience rises), writes land, the vector index
//! catches up. An offset into the moved ranking would show a hit twice or never show one; the
//! next page is instead the best of what was not shown yet, whatever moved. Each shown hit is
//! carried as a 48-bit mark of its id, eight characters (a 1-in-10^8 chance at the deepest page
//! that a mark also names a hit not shown, which that page would then leave out).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{Error, Result};
use crate::fnv::hash as fnv1a;
use crate::model::RecallQuery;

/// Bytes of one shown hit's mark (eight characters in the cursor).
const MARK_BYTES: usize = 6;

/// A fingerprint of everything but the page, so a cursor is only accepted for the same query:
/// FNV-1a over the query's fields as JSON, the same for every build and every server of a
/// shared store.
fn fingerprint(q: &RecallQuery) -> u64 {
    let fields = serde_json::json!([
        q.text,
        q.namespaces,
        q.kinds,
        q.tags,
        q.since,
        q.until,
        q.min_importance,
        q.limit,
        q.mode,
        q.expand,
        q.weights,
        q.include_archived,
    ]);
    fnv1a(fields.to_string().as_bytes())
}

/// The fingerprint cursors carried before 2026-12-06: std's SipHash, whose output a new
/// toolchain may change. Still accepted, so a cursor a client holds across an upgrade pages on.
fn legacy_fingerprint(q: &RecallQuery) -> u64 {
    use std::hash::{Hash, Hasher};
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

/// The mark a cursor carries for a shown memory: 48 bits of the FNV-1a hash of its id (stable
/// across builds and servers, so any instance sharing the store reads another's cursor).
pub fn mark(id: &str) -> u64 {
    let h = fnv1a(id.as_bytes());
    (h ^ (h >> 48)) & ((1 << 48) - 1)
}

/// The cursor of the page after `q`'s, which showed `hits`: each one's id and the ids listed
/// under its duplicates, which were shown too (a folded duplicate must not come back on a later
/// page when the hit it was folded into is forgotten or falls).
pub fn next_cursor<'a, D>(q: &RecallQuery, hits: impl IntoIterator<Item = (&'a str, D)>) -> String
where
    D: IntoIterator<Item = &'a str>,
{
    let mut bytes = Vec::with_capacity((q.seen.len() + q.limit) * MARK_BYTES);
    let shown = hits
        .into_iter()
        .flat_map(|(id, duplicates)| std::iter::once(id).chain(duplicates));
    for m in q.seen.iter().copied().chain(shown.map(mark)) {
        bytes.extend_from_slice(&m.to_be_bytes()[8 - MARK_BYTES..]);
    }
    format!(
        "c2.{:016x}.{}.{}",
        fingerprint(q),
        q.offset,
        URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// Where `cursor` continues `q`: the offset it skips (only cursors of older versions, which
/// counted positions, have one) and the marks of the hits it showed.
pub fn decode_cursor(q: &RecallQuery, cursor: &str) -> Result<(usize, Vec<u64>)> {
    let bad = || {
        Error::invalid(
            "cursor",
            "is not a cursor of this query",
            "pass next_cursor from the previous page unchanged, with the same query and filters, or leave it out to start over",
        )
    };
    let prints = [fingerprint(q), legacy_fingerprint(q)].map(|p| format!("{p:016x}"));
    let ours = |f: &str| prints.iter().any(|p| p == f);
    let parts: Vec<&str> = cursor.split('.').collect();
    match parts[..] {
        ["c1", offset, f] if ours(f) => Ok((offset.parse().map_err(|_| bad())?, Vec::new())),
        ["c2", f, offset, marks] if ours(f) => {
            let offset = offset.parse().map_err(|_| bad())?;
            let bytes = URL_SAFE_NO_PAD.decode(marks).map_err(|_| bad())?;
            if bytes.len() % MARK_BYTES != 0 {
                return Err(bad());
            }
            let marks = bytes
                .chunks(MARK_BYTES)
                .map(|c| {
                    let mut b = [0; 8];
                    b[8 - MARK_BYTES..].copy_from_slice(c);
                    u64::from_be_bytes(b)
                })
                .collect();
            Ok((offset, marks))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tea() -> RecallQuery {
        RecallQuery {
            text: "tea".into(),
            limit: 10,
            ..RecallQuery::default()
        }
    }

    /// The fingerprint is part of the wire: every build and every server of a shared store must
    /// compute the same one, so its value for a fixed query is pinned here.
    #[test]
    fn the_fingerprint_is_the_same_for_every_build() {
        // FNV-1a of `["tea","All",[],[],null,null,null,10,"hybrid",2,null,false]`, and the
        // mark of `m_a` (checked against an independent FNV-1a).
        let c = next_cursor(&tea(), [("m_a", [])]);
        assert_eq!(c, "c2.c262784a83ad96ca.0.PBkW3Hsp");
    }

    /// A cursor of a query that differs only in showing archived memories is another ranking's.
    #[test]
    fn a_cursor_is_refused_for_another_query_and_kept_across_the_upgrade() {
        let c = next_cursor(&tea(), [("m_a", [])]);
        let mut archived = tea();
        archived.include_archived = true;
        assert!(decode_cursor(&archived, &c).is_err());
        assert_eq!(decode_cursor(&tea(), &c).unwrap(), (0, vec![mark("m_a")]));
        // Cursors made before the fingerprint was FNV-1a still page.
        let marks = c.rsplit('.').next().unwrap();
        let old = format!("c2.{:016x}.0.{marks}", legacy_fingerprint(&tea()));
        assert_eq!(decode_cursor(&tea(), &old).unwrap(), (0, vec![mark("m_a")]));
    }
}
