//! Derived indexes beside the database. Each follows the change log and can be rebuilt from SQLite.

pub mod graph_file;
pub mod text;
pub mod tokenize;
pub mod vector;

/// Writes `parts` one after the other to `dir/name` atomically: a temporary file of this process,
/// synced, then renamed over the old one (removed again when anything fails).
pub(crate) fn write_atomically(
    dir: &std::path::Path,
    name: &str,
    parts: &[&[u8]],
) -> std::io::Result<()> {
    use std::io::Write;
    let temp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&temp)?;
        for part in parts {
            f.write_all(part)?;
        }
        f.sync_all()?;
        std::fs::rename(&temp, dir.join(name))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}
