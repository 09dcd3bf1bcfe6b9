//! Where an import reads from and an export writes to: inline data, or paths confined to the
//! configured roots (no `..`, no symlink leaving a root, regular files and folders only, never a
//! pseudo-filesystem such as `/proc`).

use std::path::{Component, Path, PathBuf};

use crate::config::{PSEUDO_FILESYSTEMS, TransferRoots};
use crate::error::{Error, Result};

/// Largest inline payload an import accepts; bigger data goes through a file.
pub const MAX_INLINE_BYTES: usize = 8 * 1024 * 1024;
/// Most files one folder import reads.
pub const MAX_FILES: usize = 100_000;
/// How deep a folder import descends.
const MAX_DEPTH: usize = 32;

/// What an import reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// How to open more folders, for the hints of refusals.
const ADD_ROOTS: &str = "operators add folders with --import-root DIR or MNEMOGRAPH_IMPORT_ROOTS=DIR,… (never the filesystem root, the home folder itself or a system folder)";

fn listed(paths: &[PathBuf]) -> String {
    let list: Vec<String> = paths.iter().map(|r| r.display().to_string()).collect();
    list.join(" or ")
}

fn refused_note(roots: &TransferRoots) -> String {
    let list: Vec<String> = roots
        .refused
        .iter()
        .map(|r| format!("{} ({})", r.path.display(), r.reason))
        .collect();
    list.join("; ")
}

fn outside(field: &str, path: &Path, roots: &TransferRoots) -> Error {
    if roots.allowed.is_empty() {
        return Error::invalid(
            field,
            format!(
                "{} is outside the allowed folders: none is open to imports and exports here (refused as roots: {})",
                path.display(),
                refused_note(roots)
            ),
            format!(
                "ask the operator to start mnemograph with --import-root DIR (or MNEMOGRAPH_IMPORT_ROOTS=DIR) naming the folder to read from and write to; {ADD_ROOTS}"
            ),
        );
    }
    let mut hint = format!(
        "use a path inside {} (the server's import roots); {ADD_ROOTS}",
        listed(&roots.allowed)
    );
    if !roots.refused.is_empty() {
        hint.push_str(&format!(". Refused as roots: {}", refused_note(roots)));
    }
    Error::invalid(
        field,
        format!("{} is outside the allowed folders", path.display()),
        hint,
    )
}

/// The pseudo-filesystem `real` (canonical) lies on, if any: by its path, and on Unix also by
/// its device, so a bind mount of `/proc` elsewhere is recognised too.
pub fn pseudo_filesystem(real: &Path) -> Option<&'static str> {
    if let Some(p) = PSEUDO_FILESYSTEMS.iter().find(|p| real.starts_with(p)) {
        return Some(p);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(real).ok()?.dev();
        let root = std::fs::metadata("/").ok()?.dev();
        for p in PSEUDO_FILESYSTEMS {
            if let Ok(m) = std::fs::metadata(p)
                && m.dev() != root
                && m.dev() == dev
            {
                return Some(p);
            }
        }
    }
    None
}

fn pseudo(field: &str, path: &Path, fs: &str, roots: &TransferRoots) -> Error {
    Error::invalid(
        field,
        format!(
            "{} is on a pseudo-filesystem ({fs}), which is never read or written",
            path.display()
        ),
        format!(
            "import and export regular files inside {}; {ADD_ROOTS}",
            if roots.allowed.is_empty() {
                "the allowed folders (none is open here)".to_owned()
            } else {
                listed(&roots.allowed)
            }
        ),
    )
}

fn within(real: &Path, roots: &TransferRoots) -> bool {
    roots.allowed.iter().any(|r| real.starts_with(r))
}

/// Refuses `..` components, then resolves `path` (relative to the first root) with symlinks
/// followed; refuses pseudo-filesystems. Does not check the roots.
fn resolve(field: &str, path: &Path, roots: &TransferRoots) -> Result<PathBuf> {
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
    let joined = match (path.is_absolute(), roots.allowed.first()) {
        (true, _) => path.to_path_buf(),
        (false, Some(base)) => base.join(path),
        (false, None) => return Err(outside(field, path, roots)),
    };
    let real = match joined.canonicalize() {
        Ok(real) => real,
        // Whether something outside the roots exists is not told.
        Err(_) if !within(&joined, roots) => return Err(outside(field, path, roots)),
        Err(e) => {
            return Err(Error::invalid(
                field,
                format!("{} cannot be opened ({e})", path.display()),
                "check that the file or folder exists and is readable",
            ));
        }
    };
    if let Some(fs) = pseudo_filesystem(&real) {
        return Err(pseudo(field, path, fs, roots));
    }
    Ok(real)
}

/// Refuses `..` components, then resolves `path` (relative to the first root) with symlinks
/// followed and checks that it lies within a root and not on a pseudo-filesystem.
pub fn confine(field: &str, path: &Path, roots: &TransferRoots) -> Result<PathBuf> {
    let real = resolve(field, path, roots)?;
    if !within(&real, roots) {
        return Err(outside(field, path, roots));
    }
    Ok(real)
}

/// Confines an export's target: the new file must lie within a root (a folder root holding its
/// folder, or a root naming that very file), its folder not on a pseudo-filesystem, and it must
/// not exist yet.
pub fn confine_new_file(field: &str, path: &Path, roots: &TransferRoots) -> Result<PathBuf> {
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
    let dir = resolve(field, &parent, roots)?;
    let target = dir.join(name);
    if !within(&target, roots) {
        return Err(outside(field, path, roots));
    }
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
pub fn files(field: &str, source: &Source, roots: &TransferRoots) -> Result<Vec<SourceFile>> {
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
    let mut out = Vec::new();
    walk(&real, &real, 0, roots, &mut out)?;
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
    roots: &TransferRoots,
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
        if !within(&real, roots) || pseudo_filesystem(&real).is_some() {
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

    fn allowing(paths: &[&Path]) -> TransferRoots {
        TransferRoots {
            allowed: paths.iter().map(|p| p.canonicalize().unwrap()).collect(),
            refused: Vec::new(),
        }
    }

    #[test]
    fn pseudo_filesystems_are_never_read_or_written_whatever_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let roots = allowing(&[Path::new("/proc"), Path::new("/dev"), dir.path()]);
        for path in ["/proc/self/environ", "/proc/self/cmdline", "/dev/null"] {
            let err = confine("source", Path::new(path), &roots).unwrap_err();
            assert!(err.to_string().contains("pseudo-filesystem"), "{err}");
            assert!(err.to_string().contains("--import-root"), "{err}");
            let err = files("source", &Source::Path(path.into()), &roots).unwrap_err();
            assert!(err.to_string().contains("pseudo-filesystem"), "{err}");
        }
        let err = confine_new_file("path", Path::new("/dev/shm/out.jsonl"), &roots).unwrap_err();
        assert!(err.to_string().contains("pseudo-filesystem"), "{err}");
        #[cfg(unix)]
        {
            // Through a link inside a root, and into a folder listing: refused or skipped.
            std::os::unix::fs::symlink("/proc/self/environ", dir.path().join("env")).unwrap();
            std::fs::write(dir.path().join("a.md"), "a").unwrap();
            let err = confine("source", &dir.path().join("env"), &roots).unwrap_err();
            assert!(err.to_string().contains("pseudo-filesystem"), "{err}");
            let listed = files("source", &Source::Path(dir.path().into()), &roots).unwrap();
            let names: Vec<&str> = listed.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names, vec!["a.md"]);
        }
        // With no root at all, every path is refused with what to do.
        let none = TransferRoots {
            allowed: Vec::new(),
            refused: vec![crate::config::RefusedRoot {
                path: dir.path().into(),
                reason: "it is the home folder".into(),
            }],
        };
        let err = confine("source", &dir.path().join("a.md"), &none).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("none is open") && msg.contains("home folder"),
            "{msg}"
        );
        assert!(msg.contains("--import-root"), "{msg}");
        assert!(confine("source", Path::new("a.md"), &none).is_err());
    }

    #[test]
    fn a_root_may_name_a_single_file_or_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("one.md"), "one").unwrap();
        std::fs::write(dir.path().join("two.md"), "two").unwrap();
        let real = dir.path().canonicalize().unwrap();
        let roots = TransferRoots {
            allowed: vec![real.join("one.md"), real.join("new.jsonl")],
            refused: Vec::new(),
        };
        assert!(confine("source", &dir.path().join("one.md"), &roots).is_ok());
        assert!(confine("source", &dir.path().join("two.md"), &roots).is_err());
        let ok = confine_new_file("path", &dir.path().join("new.jsonl"), &roots).unwrap();
        assert_eq!(ok, real.join("new.jsonl"));
        assert!(confine_new_file("path", &dir.path().join("other.jsonl"), &roots).is_err());
    }

    #[test]
    fn paths_stay_inside_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("notes/deep")).unwrap();
        std::fs::write(root.join("notes/a.md"), "# A\n\ntext").unwrap();
        std::fs::write(root.join("notes/deep/b.md"), "b").unwrap();
        std::fs::write(root.join("notes/.hidden.md"), "h").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        let roots = allowing(&[&root]);

        let err = confine("source", Path::new("notes/../../secret.txt"), &roots).unwrap_err();
        assert!(err.to_string().contains("`..`"), "{err}");
        let err = confine("source", &dir.path().join("secret.txt"), &roots).unwrap_err();
        assert!(
            err.to_string().contains("outside the allowed folders"),
            "{err}"
        );
        let err = confine("source", Path::new("missing.md"), &roots).unwrap_err();
        assert!(err.to_string().contains("cannot be opened"), "{err}");
        // Whether a file outside the roots exists is not told.
        let err = confine("source", &dir.path().join("missing.md"), &roots).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");

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
