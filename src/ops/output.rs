//! A run's whole output, kept in files by the jobs with `output_store =
//! "files"` (`runner::kept`): where a run's file is, as the command line
//! and the API look for it, and each replica's sweep of its own files.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tracing::{info, warn};

use crate::config::Config;
use crate::db::Store;
use crate::history::{RunBrief, RunStatus};
use crate::runner::kept;

/// Where a run's whole output is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Whereabouts {
    /// In this file, which this host has.
    Here(PathBuf),
    /// On the run's replica, which must be asked: in `file`, if its row
    /// names one (a running run's is named once it ends).
    There { file: Option<String> },
    /// Not kept: the run's job keeps only the tail in its history row.
    NotKept,
}

/// Where run `run`'s whole output is, as this host can tell: the file its
/// row names, if this host has it under its own `[daemon] output_dir`;
/// for a run whose row names none (still going, or whose replica died
/// before recording its end) of a job that keeps files, the file its job's
/// folder there gives, if this host has it; else its replica's. No other
/// file is read, whatever a row names.
pub(crate) fn whereabouts(run: &RunBrief, config: &Config) -> Whereabouts {
    let ours = kept::path_of(&config.daemon.output_dir, &run.job, run.id);
    if let Some(file) = &run.output_file {
        return if std::path::Path::new(file) == ours && ours.is_file() {
            Whereabouts::Here(ours)
        } else {
            Whereabouts::There {
                file: Some(file.clone()),
            }
        };
    }
    let keeps = config
        .job(&run.job)
        .is_some_and(|job| job.output_files.is_some());
    if !keeps || run.status == RunStatus::Missed {
        Whereabouts::NotKept
    } else if ours.is_file() {
        Whereabouts::Here(ours)
    } else {
        Whereabouts::There { file: None }
    }
}

/// Why a run's whole output cannot be had: it is not kept at all.
pub(crate) fn not_kept(run: &RunBrief) -> String {
    format!(
        "run {} of {} kept no file of its whole output (its job's output_store was \"database\"): its history row holds the last output_limit bytes",
        run.id, run.job
    )
}

/// Why a run's whole output cannot be had from its replica, `why`, with
/// where it was kept.
pub(crate) fn out_of_reach(run: &RunBrief, file: Option<&str>, why: &str) -> String {
    let place = match file {
        Some(file) => format!("in {file} on replica {}", run.instance),
        None => format!(
            "under the output_dir of replica {}, as {}",
            run.instance,
            kept::path_of(std::path::Path::new(""), &run.job, run.id).display()
        ),
    };
    format!(
        "run {}'s whole output is kept {place}, which cannot be read from here: {why}",
        run.id
    )
}

/// How often a replica sweeps its kept files.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Sweeps this replica's kept files now and then, under the job file as
/// last loaded, until the task is aborted.
pub(crate) async fn sweep_forever(store: Store, config: Arc<RwLock<Arc<Config>>>) {
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mut every = tokio::time::interval(SWEEP_EVERY);
    loop {
        every.tick().await;
        let config = config
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        sweep_once(&store, &config).await;
    }
}

/// One sweep of the files under `[daemon] output_dir`: each job's by its
/// `output_retention` and `output_max` (a job the file no longer has, or
/// that keeps no files now, by the defaults'), and every file whose run's
/// row the history retention deleted. Returns how many files it deleted.
pub(crate) async fn sweep_once(store: &Store, config: &Config) -> usize {
    let dir = config.daemon.output_dir.clone();
    let folders = match tokio::task::spawn_blocking(move || kept::list(&dir)).await {
        Ok(Ok(folders)) => folders,
        Ok(Err(e)) => {
            warn!(output_dir = %config.daemon.output_dir.display(), "the kept output files could not be listed: {e}");
            return 0;
        }
        Err(_) => return 0,
    };
    let mut deleted = 0;
    for (job, files) in folders {
        if files.is_empty() {
            continue;
        }
        let bounds = match config.job(&job).and_then(|j| j.output_files.as_ref()) {
            Some(files) => kept::Bounds {
                retention: files.retention,
                max: files.max,
            },
            None => kept::Bounds {
                retention: crate::config::DEFAULT_OUTPUT_RETENTION,
                max: crate::config::DEFAULT_OUTPUT_MAX,
            },
        };
        let ids: Vec<i64> = files.iter().map(|f| f.run_id).collect();
        let rows = match store.runs_left(ids).await {
            Ok(rows) => rows,
            Err(e) => {
                warn!(job, "the kept output files were not swept: {e}");
                return deleted;
            }
        };
        let swept = tokio::task::spawn_blocking(move || {
            kept::sweep(files, bounds, SystemTime::now(), &rows)
        })
        .await
        .unwrap_or_default();
        if swept.total() > 0 {
            info!(
                job,
                gone = swept.gone,
                old = swept.old,
                over = swept.over,
                "deleted kept output files: of runs the history no longer has, older than output_retention, or over output_max"
            );
        }
        deleted += swept.total();
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::NewRun;
    use crate::testing::{TestDb, backend_test};

    fn new_run(job: &str, second: i64) -> NewRun {
        let instant = chrono::DateTime::UNIX_EPOCH + chrono::TimeDelta::seconds(second);
        crate::testing::new_run(job, instant, 1, "r1", 1)
    }

    backend_test! {
        /// A replica's sweep deletes the files of runs whose rows the
        /// history retention deleted, and keeps a job within its
        /// `output_max`, never touching a running run's file; a folder of a
        /// job the file no longer has is swept by the defaults.
        fn the_sweep_follows_the_history_and_the_jobs_bounds(db: &TestDb) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let dir = tempfile::tempdir().expect("dir");
            let text = format!(
                "[database]\nurl = {:?}\n\n[daemon]\noutput_dir = {:?}\n\n\
                 [[job]]\nname = \"kept\"\nschedule = \"@daily\"\ncommand = \"true\"\n\
                 output_store = \"files\"\noutput_max = \"64KiB\"\n",
                db.url,
                dir.path()
            );
            let config = Config::parse(
                std::path::Path::new("jobs.toml"),
                &text,
                &crate::config::Environment::default(),
            )
            .expect("valid");
            let pool = db.pool(1);
            let mut conn = pool.get().expect("conn");
            // Runs 1-3 of `kept` have rows, 3 still running; 99 was deleted
            // by the history retention; `gone-job` is no longer in the file.
            let ids: Vec<i64> = (1..=3)
                .map(|s| crate::history::record_run_started(&mut conn, &new_run("kept", s)).expect("row"))
                .collect();
            let finish = crate::history::RunFinish {
                status: RunStatus::Succeeded,
                exit_code: Some(0),
                output: String::new(),
                duration: Duration::from_secs(1),
                output_file: None,
            };
            for id in &ids[..2] {
                crate::history::record_run_finished(&mut conn, *id, &finish, false).expect("end");
            }
            let other = crate::history::record_run_started(&mut conn, &new_run("gone-job", 9)).expect("row");
            drop(conn);
            let write = |job: &str, id: i64, len: usize, age: u64| {
                let path = kept::path_of(dir.path(), job, id);
                std::fs::create_dir_all(path.parent().expect("folder")).expect("folder");
                std::fs::write(&path, vec![0_u8; len]).expect("write");
                let when = SystemTime::now() - Duration::from_secs(age);
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(when))
                    .expect("age");
                path
            };
            let oldest = write("kept", ids[0], 40_000, 300);
            let newer = write("kept", ids[1], 40_000, 200);
            let running = write("kept", ids[2], 40_000, 100);
            let deleted_row = write("kept", 99_999, 10, 3600);
            let just_begun = write("kept", 99_998, 10, 5);
            let other_file = write("gone-job", other, 10, 50);
            let store = Store::new(pool);
            let deleted = runtime.block_on(sweep_once(&store, &config));
            // 99_999's row is gone; then the oldest of the rest go until the
            // job fits 64 KiB, but not the running run's, which stays.
            assert_eq!(deleted, 3);
            assert!(!deleted_row.exists() && !oldest.exists() && !newer.exists());
            assert!(running.exists());
            assert!(just_begun.exists(), "its row may not be read yet");
            assert!(other_file.exists(), "within the defaults' bounds");
        }
    }
}
