//! `include`: the files whose `[[job]]`, `[[limit]]` and `[[calendar]]`
//! tables join the job file's, found by patterns relative to the job
//! file's folder (`include = ["jobs.d/*.toml"]`).

use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// One file an `include` pattern matched, read.
pub(super) struct Included {
    /// Where it is, as the pattern names it (the job file's folder joined).
    pub(super) path: PathBuf,
    /// What it holds.
    pub(super) text: String,
}

/// What the job file's `include` reads: the matching files, in the
/// patterns' order and each pattern's matches sorted by name, and every
/// problem, with where its pattern is in the job file.
#[derive(Default)]
pub(super) struct Includes {
    pub(super) files: Vec<Included>,
    pub(super) problems: Vec<(Range<usize>, String)>,
    /// What is odd but no error: a pattern's folder that does not exist.
    pub(super) warnings: Vec<(Range<usize>, String)>,
}

/// The job file's `include`, where it is a list of strings; any other form
/// is told by the checker.
#[derive(Deserialize)]
struct Top {
    include: Option<Vec<Spanned<String>>>,
}

/// The characters a pattern matches names with.
const WILDCARDS: [char; 2] = ['*', '?'];

/// Reads the files the `include` of the job file at `path` (holding
/// `text`) names. The job file itself, and a file two patterns match, is
/// read once.
pub(super) fn read(path: &Path, text: &str) -> Includes {
    let mut includes = Includes::default();
    let Some(patterns) = toml::from_str::<Top>(text).ok().and_then(|top| top.include) else {
        return includes;
    };
    let folder = path.parent().unwrap_or(Path::new(""));
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut seen: HashSet<PathBuf> = HashSet::from([canonical(path)]);
    for pattern in patterns {
        let span = pattern.span();
        match expand(folder, pattern.get_ref()) {
            Err(Expanded::Wrong(why)) => includes.problems.push((span, why)),
            Err(Expanded::NoFolder(why)) => includes.warnings.push((span, why)),
            Ok(paths) => {
                for path in paths {
                    if !seen.insert(canonical(&path)) {
                        continue;
                    }
                    match std::fs::read_to_string(&path) {
                        Ok(text) => includes.files.push(Included { path, text }),
                        Err(e) => includes
                            .problems
                            .push((span.clone(), format!("cannot read {}: {e}", path.display()))),
                    }
                }
            }
        }
    }
    includes
}

/// Why a pattern names no file.
enum Expanded {
    /// It is wrong, or what it names cannot be read: an error.
    Wrong(String),
    /// Its folder does not exist (yet): it matches nothing.
    NoFolder(String),
}

/// The files `pattern` names, relative to `folder`, sorted. Wildcards
/// (`*`, `?`) match in the file name only; names starting with a dot match
/// only a pattern that does (as in a shell, and so that the `..data`
/// entries of a mounted Kubernetes ConfigMap are not read). A pattern
/// without wildcards names one file, which must exist; one with wildcards
/// in a folder that does not exist matches nothing.
fn expand(folder: &Path, pattern: &str) -> Result<Vec<PathBuf>, Expanded> {
    let full = folder.join(pattern.trim());
    let Some(name) = full.file_name().and_then(|n| n.to_str()) else {
        return Err(Expanded::Wrong(format!(
            "include {pattern:?} names no file"
        )));
    };
    let dir = match full.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if dir.to_string_lossy().contains(WILDCARDS) {
        return Err(Expanded::Wrong(format!(
            "include {pattern:?}: wildcards match file names, not folders (write \"jobs.d/*.toml\")"
        )));
    }
    if !name.contains(WILDCARDS) {
        return if full.is_file() {
            Ok(vec![full])
        } else {
            Err(Expanded::Wrong(format!(
                "include {pattern:?}: {} is no file",
                full.display()
            )))
        };
    }
    let entries = std::fs::read_dir(dir).map_err(|e| {
        let why = format!(
            "include {pattern:?}: cannot read the folder {}: {e}",
            dir.display()
        );
        if e.kind() == std::io::ErrorKind::NotFound {
            Expanded::NoFolder(format!("{why}: no file is included from it"))
        } else {
            Expanded::Wrong(why)
        }
    })?;
    let wanted: Vec<char> = name.chars().collect();
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                return false;
            };
            (!file_name.starts_with('.') || name.starts_with('.'))
                && matches(&wanted, &file_name.chars().collect::<Vec<_>>())
        })
        .map(|entry| dir.join(entry.file_name()))
        .filter(|path| path.is_file())
        .collect();
    found.sort();
    Ok(found)
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters and `?` for one.
fn matches(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    // The last `*` seen, and where in `name` its run ends for now.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(&'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((at, end)) => {
                    star = Some((at, end + 1));
                    p = at + 1;
                    n = end + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, name: &str) -> bool {
        matches(
            &pattern.chars().collect::<Vec<_>>(),
            &name.chars().collect::<Vec<_>>(),
        )
    }

    #[test]
    fn wildcards() {
        assert!(m("*.toml", "a.toml"));
        assert!(m("*.toml", ".toml"));
        assert!(!m("*.toml", "a.toml.bak"));
        assert!(m("*", "anything"));
        assert!(m("a?c.toml", "abc.toml"));
        assert!(!m("a?c.toml", "ac.toml"));
        assert!(m("*-*.toml", "x-y-z.toml"));
        assert!(!m("*-*.toml", "xyz.toml"));
        assert!(m("jobs", "jobs"));
        assert!(!m("jobs", "jobs2"));
    }
}
