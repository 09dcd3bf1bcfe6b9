//! Where an import reads from and an export writes to: inline data, or paths confined to the
//! configured roots (no `..`, no symlink leaving a root, regular files and folders only).

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Largest inline payload an import accepts; bigger data goes through a file.
pub const MAX_INLINE_BYTES: usize = 8 * 1024 * 1024;
/// Most files one folder import reads.
pub const MAX_FILES: usize = 100_000;
/// How deep a folder import descends.
const MAX_DEPTH: usize = 32;

/// What an import reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The data itself.
    Inline(String),
    /// A file or a folder (read recursively) on the server.
    Path(PathBuf),
}

/// One file of a source, in reading order.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFile {
    /// Where to open it (canonical), `None` for inline data.
    pub path: Option<PathBuf>,
    /// How reports and documents name it: relative to the folder imported, or the file name.
    pub name: String,
    pub size: u64,
}

fn outside(field: &str, path: &Path, roots: &[PathBuf]) -> Error {
    let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    Error::invalid(
        field,
        format!("{} is outside the allowed folders", path.display()),
        format!(
            "use a path inside {} (the server's import roots; operators add more with --import-root)",
            list.join(" or ")
        ),
    )
}

/// Refuses `..` components, then resolves `path` (relative to the first root) with symlinks
/// followed and checks that it lies within a root.
pub fn confine(field: &str, path: &Path, roots: &[PathBuf]) -> Result<PathBuf> {
    if path.as_os_str().is_empty() {
        return Err(Error::invalid(
            field,
            "is empty",
            "give a file or folder path",
        ));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(Error::invalid(
            field,
            format!("{} contains `..`", path.display()),
            "give a path without `..` inside the import roots",
        ));
    }
    let joined = match (path.is_absolute(), roots.first()) {
        (false, Some(base)) => base.join(path),
        _ => path.to_path_buf(),
    };
    let real = joined.canonicalize().map_err(|e| {
        Error::invalid(
            field,
            format!("{} cannot be opened ({e})", path.display()),
            "check that the file or folder exists and is readable",
        )
    })?;
    let inside = roots
        .iter()
        .filter_map(|r| r.canonicalize().ok())
        .any(|r| real.starts_with(&r));
    if !inside {
        return Err(outside(field, path, roots));
    }
    Ok(real)
}

/// Confines an export's target: its folder must be within a root, the file must not exist yet.
pub fn confine_new_file(field: &str, path: &Path, roots: &[PathBuf]) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        Error::invalid(
            field,
            format!("{} names no file", path.display()),
            "give a file path",
        )
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = confine(field, &parent, roots)?;
    let target = dir.join(name);
    if target.symlink_metadata().is_ok() {
        return Err(Error::invalid(
            field,
            format!("{} exists", path.display()),
            "choose a new file name (exports never overwrite)",
        ));
    }
    Ok(target)
}

/// Lists the files of a source in a stable order: one for a file or inline data; for a folder,
/// every regular file below it (hidden ones and symlinks leaving the roots skipped), sorted by
/// path. Special files are refused.
pub fn files(field: &str, source: &Source, roots: &[PathBuf]) -> Result<Vec<SourceFile>> {
    let path = match source {
        Source::Inline(text) => {
            if text.len() > MAX_INLINE_BYTES {
                return Err(Error::invalid(
                    field,
                    format!("inline data is {} bytes", text.len()),
                    format!(
                        "send at most {MAX_INLINE_BYTES} bytes inline; write bigger data to a file and import its path"
                    ),
                ));
            }
            return Ok(vec![SourceFile {
                path: None,
                name: "inline".into(),
                size: text.len() as u64,
            }]);
        }
        Source::Path(p) => p,
    };
    let real = confine(field, path, roots)?;
    let meta = std::fs::metadata(&real)?;
    if meta.is_file() {
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        return Ok(vec![SourceFile {
            path: Some(real),
            name,
            size: meta.len(),
        }]);
    }
    if !meta.is_dir() {
        return Err(Error::invalid(
            field,
            format!("{} is not a regular file or folder", path.display()),
            "import regular files or folders of them (not devices, pipes or sockets)",
        ));
    }
    let canon_roots: Vec<PathBuf> = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    let mut out = Vec::new();
    walk(&real, &real, 0, &canon_roots, &mut out)?;
    if out.is_empty() {
        return Err(Error::invalid(
            field,
            format!("{} holds no files to import", path.display()),
            "point at a file, or a folder with Markdown, text or JSON files",
        ));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn walk(
    base: &Path,
    dir: &Path,
    depth: usize,
    roots: &[PathBuf],
    out: &mut Vec<SourceFile>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(real) = entry.path().canonicalize() else {
            continue; // a dangling link
        };
        if !roots.iter().any(|r| real.starts_with(r)) {
            tracing::warn!(path = %entry.path().display(), "skipping a link that leaves the import roots");
            continue;
        }
        let Ok(meta) = std::fs::metadata(&real) else {
            continue;
        };
        if meta.is_dir() {
            // A link back up the tree would loop: only descend into what lies below `base`.
            if real.starts_with(base) && real != dir {
                walk(base, &real, depth + 1, roots, out)?;
            }
        } else if meta.is_file() {
            if out.len() >= MAX_FILES {
                return Err(Error::invalid(
                    "source",
                    format!("the folder holds more than {MAX_FILES} files"),
                    "import its subfolders one at a time",
                ));
            }
            let rel = entry
                .path()
                .strip_prefix(base)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| name.to_string_lossy().into_owned());
            out.push(SourceFile {
                path: Some(real),
                name: rel,
                size: meta.len(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("notes/deep")).unwrap();
        std::fs::write(root.join("notes/a.md"), "# A\n\ntext").unwrap();
        std::fs::write(root.join("notes/deep/b.md"), "b").unwrap();
        std::fs::write(root.join("notes/.hidden.md"), "h").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        let roots = vec![root.clone()];

        let err = confine("source", Path::new("notes/../../secret.txt"), &roots).unwrap_err();
        assert!(err.to_string().contains("`..`"), "{err}");
        let err = confine("source", &dir.path().join("secret.txt"), &roots).unwrap_err();
        assert!(
            err.to_string().contains("outside the allowed folders"),
            "{err}"
        );
        let err = confine("source", Path::new("missing.md"), &roots).unwrap_err();
        assert!(err.to_string().contains("cannot be opened"), "{err}");

        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("notes/link.txt"))
                .unwrap();
            let err = confine("source", Path::new("notes/link.txt"), &roots).unwrap_err();
            assert!(err.to_string().contains("outside"), "{err}");
            // A folder import skips the link instead of failing.
            let listed = files("source", &Source::Path("notes".into()), &roots).unwrap();
            let names: Vec<&str> = listed.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names, vec!["a.md", "deep/b.md"]);
            let fifo = root.join("pipe");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status();
            if made.is_ok_and(|s| s.success()) {
                let err = files("source", &Source::Path("pipe".into()), &roots).unwrap_err();
                assert!(err.to_string().contains("not a regular file"), "{err}");
            }
        }

        let err = confine_new_file("path", Path::new("notes/a.md"), &roots).unwrap_err();
        assert!(err.to_string().contains("exists"), "{err}");
        let ok = confine_new_file("path", Path::new("notes/out.jsonl"), &roots).unwrap();
        assert!(ok.ends_with("notes/out.jsonl"));
        let err = files(
            "source",
            &Source::Inline("x".repeat(MAX_INLINE_BYTES + 1)),
            &roots,
        )
        .unwrap_err();
        assert!(err.to_string().contains("inline data"), "{err}");
    }
}
