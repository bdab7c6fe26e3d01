//! The crontabs named on the command line, read as cron reads them: a file
//! as it is, `-` as standard input, and a folder (`/etc/cron.d/`) as every
//! regular file in it that cron itself would read, in name order, each with
//! the owner and mode cron checks. A folder's file that cannot be read, or
//! is not text, is skipped with a note; a file named so is an error.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::{ImportError, Note, Source, Stat};

/// The files found, and what was passed over on the way.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// The crontabs, in the order they were named (a folder's by name).
    pub sources: Vec<Source>,
    /// Folder entries that were skipped, and why.
    pub notes: Vec<Note>,
}

/// Why cron would not read a file of this name in a folder such as
/// `/etc/cron.d`, if it would not: Debian's cron reads only names made of
/// letters, digits, `_` and `-` (as run-parts does), which leaves out
/// package leftovers (`.dpkg-old`), editor backups (`~`) and anything with
/// a dot; a README is documentation.
pub(crate) fn skipped_by_cron(name: &str) -> Option<&'static str> {
    if name.starts_with('.') {
        Some("a hidden file")
    } else if name.ends_with('~') {
        Some("an editor's backup")
    } else if [".dpkg-", ".ucf-", ".rpmnew", ".rpmsave", ".rpmorig"]
        .iter()
        .any(|s| name.contains(s))
    {
        Some("a package manager's leftover")
    } else if name.eq_ignore_ascii_case("README") {
        Some("documentation")
    } else if name.contains('.') {
        Some("cron reads no file whose name has a dot")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Some("cron reads only names made of letters, digits, _ and -")
    } else {
        None
    }
}

/// Reads every path: `-` is standard input, a folder is the files in it
/// that cron would read.
pub(crate) fn collect(paths: &[impl AsRef<Path>]) -> Result<Collected, ImportError> {
    let mut collected = Collected::default();
    for path in paths {
        let path = path.as_ref();
        let shown = path.display().to_string();
        if path.as_os_str() == "-" {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).map_err(|error| {
                ImportError::Read {
                    path: "stdin".to_string(),
                    error,
                }
            })?;
            let text = text(bytes).map_err(|line| not_text(&format!("stdin:{line}")))?;
            collected.sources.push(Source::new("stdin", &text));
            continue;
        }
        let read = |error| ImportError::Read {
            path: shown.clone(),
            error,
        };
        let metadata = std::fs::metadata(path).map_err(read)?;
        if !metadata.is_dir() {
            let bytes = std::fs::read(path).map_err(read)?;
            let text = text(bytes).map_err(|line| not_text(&format!("{shown}:{line}")))?;
            collected.sources.push(Source {
                name: shown.clone(),
                text,
                stat: Some(stat(path, &metadata)),
                in_folder: false,
            });
            continue;
        }
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(read)?
            .collect::<Result<_, _>>()
            .map_err(read)?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let before = collected.sources.len();
        // Files cron would read that are no crontabs.
        let mut bad = 0;
        for entry in entries {
            let entry_path = entry.path();
            let entry_shown = entry_path.display().to_string();
            let skipped = |why: &str| Note {
                file: Some(entry_shown.clone()),
                line: None,
                message: format!("skipped, as cron skips it: {why}"),
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                collected.notes.push(skipped("its name is not UTF-8"));
                continue;
            };
            if let Some(why) = skipped_by_cron(name) {
                collected.notes.push(skipped(why));
                continue;
            }
            // Following links, as cron does. One file that cannot be read
            // leaves the others to import.
            let unreadable = |error: std::io::Error| Note {
                file: Some(entry_shown.clone()),
                line: None,
                message: format!(
                    "skipped, the folder's other files are imported: cannot read it: {error}"
                ),
            };
            let metadata = match std::fs::metadata(&entry_path) {
                Ok(metadata) => metadata,
                Err(error) => {
                    collected.notes.push(unreadable(error));
                    bad += 1;
                    continue;
                }
            };
            if !metadata.is_file() {
                collected.notes.push(skipped("not a regular file"));
                continue;
            }
            let bytes = match std::fs::read(&entry_path) {
                Ok(bytes) => bytes,
                Err(error) => {
                    collected.notes.push(unreadable(error));
                    bad += 1;
                    continue;
                }
            };
            match text(bytes) {
                Ok(text) => collected.sources.push(Source {
                    name: entry_shown.clone(),
                    text,
                    stat: Some(stat(&entry_path, &metadata)),
                    in_folder: true,
                }),
                Err(line) => {
                    bad += 1;
                    collected.notes.push(Note {
                        file: Some(entry_shown.clone()),
                        line: Some(line),
                        message: "skipped, the folder's other files are imported: not UTF-8 text, so not a crontab"
                            .to_string(),
                    });
                }
            }
        }
        if collected.sources.len() == before && bad == 0 {
            collected.notes.push(Note {
                file: Some(shown.clone()),
                line: None,
                message: "no crontab in this folder".to_string(),
            });
        }
    }
    if collected.sources.is_empty() {
        let shown: Vec<String> = paths
            .iter()
            .map(|p| p.as_ref().display().to_string())
            .collect();
        return Err(ImportError::Nothing {
            named: shown.join(", "),
            notes: collected.notes,
        });
    }
    Ok(collected)
}

/// A file's bytes as a crontab's text; cron's files are text, and a file
/// that is not (a binary, another encoding) is `Err` with its first bad
/// line.
fn text(bytes: Vec<u8>) -> Result<String, usize> {
    String::from_utf8(bytes).map_err(|error| {
        let valid = error.utf8_error().valid_up_to();
        error.as_bytes()[..valid]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    })
}

/// A named file that is not text, at `place` (`file:line`).
fn not_text(place: &str) -> ImportError {
    ImportError::NotACrontab {
        file: place.to_string(),
        what: "not UTF-8 text, so not a crontab".to_string(),
    }
}

/// The owner and mode of the file at `path` (its `metadata`, links
/// followed), and the owner of the link if `path` is one.
fn stat(path: &Path, metadata: &std::fs::Metadata) -> Stat {
    let link_uid = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_symlink())
        .map(|m| m.uid());
    Stat {
        uid: metadata.uid(),
        mode: metadata.mode() & 0o7777,
        link_uid,
    }
}
