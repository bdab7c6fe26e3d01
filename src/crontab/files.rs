//! The crontabs named on the command line, read as cron reads them: a file
//! as it is, `-` as standard input, and a folder (`/etc/cron.d/`) as every
//! regular file in it that cron itself would read, in name order.

use std::path::Path;

use super::{ImportError, Note, Source};

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
            collected.sources.push(source("stdin", bytes)?);
            continue;
        }
        let read = |error| ImportError::Read {
            path: shown.clone(),
            error,
        };
        if !std::fs::metadata(path).map_err(read)?.is_dir() {
            collected
                .sources
                .push(source(&shown, std::fs::read(path).map_err(read)?)?);
            continue;
        }
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(read)?
            .collect::<Result<_, _>>()
            .map_err(read)?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let before = collected.sources.len();
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
            // Following links, as cron does.
            let read = |error| ImportError::Read {
                path: entry_shown.clone(),
                error,
            };
            if !std::fs::metadata(&entry_path).map_err(read)?.is_file() {
                collected.notes.push(skipped("not a regular file"));
                continue;
            }
            let bytes = std::fs::read(&entry_path).map_err(read)?;
            collected.sources.push(source(&entry_shown, bytes)?);
        }
        if collected.sources.len() == before {
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
        return Err(ImportError::Nothing(shown.join(", ")));
    }
    Ok(collected)
}

/// A file's bytes as a crontab's text; cron's files are text, and a file
/// that is not (a binary, another encoding) is named with its first bad line.
fn source(name: &str, bytes: Vec<u8>) -> Result<Source, ImportError> {
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Source {
            name: name.to_string(),
            text,
        }),
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let line = error.as_bytes()[..valid]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1;
            Err(ImportError::NotACrontab {
                file: format!("{name}:{line}"),
                what: "not UTF-8 text, so not a crontab".to_string(),
            })
        }
    }
}
