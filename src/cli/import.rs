//! `replicron import-crontab`: prints crontabs as one replicron TOML (the
//! conversion is [`crate::crontab`]'s).

use std::path::PathBuf;

use super::{ExitCode, UsageError};

/// Arguments of `import-crontab`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// Crontab files (`-` for stdin) and folders such as /etc/cron.d/ (every
    /// file in it that cron reads; one that is no crontab is skipped with a
    /// note), merged into one config. `MAILTO` mails through this host's
    /// sendmail or mail, where it has one.
    #[arg(required = true, value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
    /// Lines name a user after the schedule (`/etc/crontab`, `/etc/cron.d`);
    /// by default each file's own lines tell, and guesses are reported.
    #[arg(long, value_name = "BOOL")]
    pub(crate) user_column: Option<bool>,
    /// Where system crontabs' jobs (`/etc/crontab`, `/etc/cron.d`: files with
    /// a user column) run: `one` replica per instant, or `every` replica
    /// (each host's own work, `@reboot` lines included). User crontabs'
    /// jobs always run on one.
    #[arg(long, value_enum, default_value_t = RunOnArg::One)]
    pub(crate) run_on: RunOnArg,
    /// Writes each crontab's jobs to a file of their own in DIR
    /// (`NAME.toml`, created; an existing file is not overwritten), and
    /// prints the job file that includes them (`include = ["DIR/*.toml"]`)
    /// with the settings they share.
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: Option<PathBuf>,
}

/// `--run-on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RunOnArg {
    /// Once across the fleet.
    One,
    /// On every replica.
    Every,
}

pub(super) fn import_crontab(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    use crate::crontab::{self, ImportError};
    let refused = |error: ImportError| -> anyhow::Error {
        match error {
            ImportError::Read { .. } => error.into(),
            ImportError::Nothing { ref notes, .. } => {
                // What each file was instead, before the verdict.
                for note in notes {
                    eprintln!("{note}");
                }
                UsageError(error.to_string()).into()
            }
            ImportError::NotACrontab { .. } => UsageError(error.to_string()).into(),
        }
    };
    let collected = crontab::files::collect(&args.files).map_err(refused)?;
    let host = crontab::Host::from_system();
    let import = crontab::import(
        &collected.sources,
        args.user_column,
        args.run_on == RunOnArg::Every,
        &host,
    )
    .map_err(refused)?;
    match &args.out_dir {
        None => print!("{}", import.toml),
        Some(dir) => {
            write_files(dir, &import.files)?;
            let pattern = dir.join("*.toml");
            print!(
                "{}include = [{}]\n\n{}",
                import.head,
                toml::Value::String(pattern.display().to_string()),
                import.defaults
            );
        }
    }
    let notes: Vec<&crontab::Note> = collected.notes.iter().chain(&import.notes).collect();
    for note in &notes {
        eprintln!("{note}");
    }
    let what = match collected.sources.as_slice() {
        [one] => one.name.clone(),
        all => format!("{} files", all.len()),
    };
    eprintln!(
        "{what}: {} job(s) imported, {} line(s) to look at",
        import.jobs,
        notes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The file name each crontab's jobs are written to: its own file name,
/// made plain, with `.toml`; a name taken by an earlier one gets `-2`, `-3`….
fn file_names(names: &[&str]) -> Vec<String> {
    let mut taken: Vec<String> = Vec::new();
    for name in names {
        let base = std::path::Path::new(name)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("crontab");
        let plain: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let plain = plain.trim_start_matches('.');
        let plain = if plain.is_empty() { "crontab" } else { plain };
        let mut candidate = format!("{plain}.toml");
        let mut n = 1;
        while taken.contains(&candidate) {
            n += 1;
            candidate = format!("{plain}-{n}.toml");
        }
        taken.push(candidate);
    }
    taken
}

/// Writes each crontab's jobs to a file of its own in `dir`, which is
/// created if need be; refuses before writing anything if one exists.
fn write_files(dir: &std::path::Path, files: &[(String, String)]) -> anyhow::Result<()> {
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    let paths: Vec<PathBuf> = file_names(&names)
        .into_iter()
        .map(|name| dir.join(name))
        .collect();
    if let Some(existing) = paths.iter().find(|p| p.exists()) {
        return Err(UsageError(format!(
            "{} exists: nothing is written over; remove it or choose another --out-dir",
            existing.display()
        ))
        .into());
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    for ((name, jobs), path) in files.iter().zip(&paths) {
        let name: String = name
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let text =
            format!("# The jobs of {name}, imported by `replicron import-crontab`.\n\n{jobs}");
        std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_names() {
        assert_eq!(
            super::file_names(&[
                "/etc/crontab",
                "/etc/cron.d/php",
                "stdin",
                "/x/php",
                "/var/.hidden"
            ]),
            [
                "crontab.toml",
                "php.toml",
                "stdin.toml",
                "php-2.toml",
                "hidden.toml"
            ]
        );
    }
}
