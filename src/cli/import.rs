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
    print!("{}", import.toml);
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
