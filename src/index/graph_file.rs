//! The relation graph in one file, so a fresh process has its graph in a fraction of the time a
//! scan of the relations table takes (500,000 relations: one read of 24 MB instead of half a
//! million rows through SQLite). Derived state like the other indexes: it records the change-log
//! position it holds (database identity, sequence, stamp), the engine uses it only when that
//! position belongs to the open database's history and replays the changes after it, and a
//! missing, damaged or foreign file means a load from the database.
//!
//! Layout (little-endian): magic `MGGRAPH1`; header length (u32) and JSON header (position,
//! relation kinds in id order, record count, checksum of the records); `count` records of
//! `RECORD` bytes: relation key, source and target memory keys (i64), kind id (u32), weight
//! (f32), valid from and until (i64, the open ends as `i64::MIN` / `i64::MAX`), the day it was
//! last reinforced (i32). Strengths are computed from these when the graph is used.

use std::fs::{self, File};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::{EdgeData, MemoryGraph};
use crate::model::LogPosition;

const MAGIC: &[u8; 8] = b"MGGRAPH2";

/// File name inside the index folder.
pub const FILE_NAME: &str = "relations.graph";

/// Bytes per relation.
const RECORD: usize = 52;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    position: LogPosition,
    kinds: Vec<String>,
    count: usize,
    checksum: u64,
}

/// Writes `graph`, which reflects the change log up to `position`, atomically (a temporary file
/// renamed over the old one).
pub fn write(dir: &Path, position: &LogPosition, graph: &MemoryGraph) -> Result<()> {
    fs::create_dir_all(dir)?;
    let mut records = Vec::with_capacity(graph.edge_count() * RECORD);
    graph.for_each_edge(|src, dst, e| {
        records.extend_from_slice(&e.relation.to_le_bytes());
        records.extend_from_slice(&src.to_le_bytes());
        records.extend_from_slice(&dst.to_le_bytes());
        records.extend_from_slice(&e.kind.to_le_bytes());
        records.extend_from_slice(&e.weight.to_le_bytes());
        records.extend_from_slice(&e.valid_from.to_le_bytes());
        records.extend_from_slice(&e.valid_until.to_le_bytes());
        records.extend_from_slice(&e.reinforced_day.to_le_bytes());
    });
    let header = serde_json::to_vec(&Header {
        position: position.clone(),
        kinds: graph.kinds().to_vec(),
        count: records.len() / RECORD,
        checksum: checksum(&records),
    })?;
    let hlen = (header.len() as u32).to_le_bytes();
    Ok(crate::index::write_atomically(
        dir,
        FILE_NAME,
        &[MAGIC, &hlen, &header, &records],
    )?)
}

/// The position recorded in the file, reading only its header: `None` when there is none.
pub fn position(dir: &Path) -> Result<Option<LogPosition>> {
    let mut f = match File::open(dir.join(FILE_NAME)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut f, &mut head).map_err(|_| damaged("short header"))?;
    if &head[..8] != MAGIC {
        return Err(damaged("not a graph file"));
    }
    let hlen = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let mut header = vec![0u8; hlen.min(1 << 20)];
    std::io::Read::read_exact(&mut f, &mut header).map_err(|_| damaged("short header"))?;
    let header: Header =
        serde_json::from_slice(&header).map_err(|e| damaged(&format!("header: {e}")))?;
    Ok(Some(header.position))
}

/// Reads the file from `dir`: the graph and the position it reflects, `None` when there is no
/// file, an error when it is damaged.
pub fn read(dir: &Path) -> Result<Option<(LogPosition, MemoryGraph)>> {
    let bytes = match fs::read(dir.join(FILE_NAME)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(damaged("not a graph file"));
    }
    let hlen = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    let header = bytes
        .get(12..12 + hlen)
        .ok_or_else(|| damaged("short header"))?;
    let header: Header =
        serde_json::from_slice(header).map_err(|e| damaged(&format!("header: {e}")))?;
    let records = &bytes[12 + hlen..];
    if Some(records.len()) != header.count.checked_mul(RECORD) {
        return Err(damaged("length does not match its count"));
    }
    if checksum(records) != header.checksum {
        return Err(damaged("checksum mismatch"));
    }
    let mut graph = MemoryGraph::with_capacity(header.count / 4, header.count);
    for (i, kind) in header.kinds.iter().enumerate() {
        if graph.intern(kind) as usize != i {
            return Err(damaged("a relation kind is listed twice"));
        }
    }
    for r in records.chunks_exact(RECORD) {
        let i64_at = |o: usize| i64::from_le_bytes(r[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(r[o..o + 4].try_into().unwrap_or([0; 4]));
        let (src, dst) = (i64_at(8), i64_at(16));
        let data = EdgeData {
            relation: i64_at(0),
            kind: u32_at(24),
            weight: f32::from_bits(u32_at(28)),
            strength: f32::from_bits(u32_at(28)),
            reinforced_day: u32_at(48) as i32,
            valid_from: i64_at(32),
            valid_until: i64_at(40),
        };
        if src <= 0 || dst <= 0 || data.kind as usize >= header.kinds.len() {
            return Err(damaged("a relation names no memory or no kind"));
        }
        graph.add_edge_data(src, dst, data);
    }
    Ok(Some((header.position, graph)))
}

fn damaged(what: &str) -> Error {
    Error::Internal(format!("{FILE_NAME} is damaged: {what}"))
}

/// A fast 64-bit checksum of the records (multiply-xorshift over 8-byte words): catches a torn
/// or altered file, not an attacker.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0x243f_6a88_85a3_08d3 ^ bytes.len() as u64;
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    for w in words {
        let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        h = (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    for &b in tail {
        h = (h ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Direction;
    use crate::graph::tests::{edge_list as edges, row};

    fn position(seq: i64) -> LogPosition {
        LogPosition {
            database: "db-1".into(),
            seq,
            stamp: 42,
        }
    }

    #[test]
    fn written_and_read_back_it_is_the_same_graph() {
        let dir = tempfile::tempdir().unwrap();
        let mut bounded = row(3, 30, 10, "before", 0.25);
        bounded.valid_from = Some(-5);
        bounded.valid_until = Some(1_700_000_000_000);
        bounded.reinforced_at = 20_000 * 86_400_000;
        let g = MemoryGraph::from_rows(
            [
                row(1, 10, 20, "about", 1.0),
                row(2, 20, 30, "causes", 0.5),
                bounded,
            ],
            3,
        );
        write(dir.path(), &position(7), &g).unwrap();
        assert_eq!(super::position(dir.path()).unwrap(), Some(position(7)));
        let (pos, back) = read(dir.path()).unwrap().unwrap();
        assert_eq!(pos, position(7));
        assert_eq!(edges(&back), edges(&g));
        assert_eq!(back.node_count(), 3);
        let n20 = back.node_of(20).unwrap();
        let mut out = Vec::new();
        back.for_each_adjacent(n20, Direction::Out, |n, _, w, _| {
            out.push((back.key_of(n), w))
        });
        assert_eq!(out, [(30, 0.5)]);
        let days = |g: &MemoryGraph| {
            let mut d = Vec::new();
            g.for_each_edge(|_, _, e| d.push((e.relation, e.reinforced_day)));
            d.sort_unstable();
            d
        };
        assert_eq!(days(&back), [(1, 0), (2, 0), (3, 20_000)]);
        assert_eq!(days(&back), days(&g));
    }

    #[test]
    fn a_missing_or_damaged_file_is_said_so() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        assert!(super::position(dir.path()).unwrap().is_none());
        let g = MemoryGraph::from_rows([row(1, 10, 20, "about", 1.0)], 1);
        write(dir.path(), &position(1), &g).unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let err = read(dir.path()).err().unwrap().to_string();
        assert!(err.contains("checksum"), "{err}");
        fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let err = read(dir.path()).err().unwrap().to_string();
        assert!(err.contains("length"), "{err}");
        fs::write(&path, b"something else entirely").unwrap();
        assert!(read(dir.path()).is_err());
        assert!(super::position(dir.path()).is_err());
    }
}
