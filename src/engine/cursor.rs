//! Recall's page cursors: the hits earlier pages showed, and a fingerprint of everything but the
//! page, so a cursor is only accepted for the query it came from.
//!
//! A cursor names what was shown rather than a position. Between two pages the ranking moves:
//! the first page's hits count as used (their salience rises), writes land, the vector index
//! catches up. An offset into the moved ranking would show a hit twice or never show one; the
//! next page is instead the best of what was not shown yet, whatever moved. Each shown hit is
//! carried as a 48-bit mark of its id, eight characters (a 1-in-10^8 chance at the deepest page
//! that a mark also names a hit not shown, which that page would then leave out).

use std::hash::{Hash, Hasher};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{Error, Result};
use crate::model::RecallQuery;

/// Bytes of one shown hit's mark (eight characters in the cursor).
const MARK_BYTES: usize = 6;

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

/// The mark a cursor carries for a shown memory: 48 bits of the FNV-1a hash of its id (stable
/// across builds and servers, so any instance sharing the store reads another's cursor).
pub fn mark(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 48)) & ((1 << 48) - 1)
}

/// The cursor of the page after `q`'s, which showed the memories `shown` (by id).
pub fn next_cursor<'a>(q: &RecallQuery, shown: impl IntoIterator<Item = &'a str>) -> String {
    let mut bytes = Vec::with_capacity((q.seen.len() + q.limit) * MARK_BYTES);
    let marks = q.seen.iter().copied().chain(shown.into_iter().map(mark));
    for m in marks {
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
    let fp = format!("{:016x}", fingerprint(q));
    let parts: Vec<&str> = cursor.split('.').collect();
    match parts[..] {
        ["c1", offset, f] if f == fp => Ok((offset.parse().map_err(|_| bad())?, Vec::new())),
        ["c2", f, offset, marks] if f == fp => {
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
