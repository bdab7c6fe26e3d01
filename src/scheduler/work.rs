//! What a run is made of before anything holds it: what runs (`Work`), how
//! it is recorded when that differs from what it holds (`Recording`), and
//! how its last attempt ended (`Outcome`). The run's two owners and its
//! executor all speak of these.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::job::{Job, JobSettings};
use crate::history::{Params, RunStatus, Trigger};
use crate::runner::Action;

/// How the last attempt of an instant ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Its status.
    pub(crate) status: RunStatus,
    /// Its exit code, if a process exited.
    pub(crate) exit_code: Option<i32>,
    /// The tail of its output, as recorded (for a run that could not start:
    /// why).
    pub(crate) output: String,
}

/// How a run is recorded beyond what it holds: what started it and its
/// parameters; and where that differs from its lease: an `exec --once` run
/// holds the lease of its KEY, whose instant only names the key, and is
/// recorded at the time it started, with the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recording {
    /// Recorded (and given as `REPLICRON_SCHEDULED_AT`) instead of the
    /// lease's instant.
    pub(crate) instant: Option<DateTime<Utc>>,
    /// The `exec --once` KEY.
    pub(crate) once_key: Option<String>,
    /// When the run was due, if not at the lease's instant (a job's
    /// jitter): its start's lateness is measured from here.
    pub(crate) due: Option<DateTime<Utc>>,
    /// What started it (attempts after the first are `retry`).
    pub(crate) trigger: Trigger,
    /// Its parameters, given to it as environment variables.
    pub(crate) params: Arc<Params>,
    /// Whether `params` are those its schedule's entry gives its instant
    /// (recorded with its first attempt; a job's plain defaults are not).
    pub(crate) params_from_schedule: bool,
    /// Why an operator started it (a trigger's or a backfill's
    /// `--reason`): recorded in its rows, given as `REPLICRON_REASON`.
    pub(crate) reason: Option<Arc<str>>,
    /// Attempts its instant had already (a backfill of an instant that ran
    /// before, a rerun of an abandoned one): its rows number on from there,
    /// and so do the attempts its runs see.
    pub(crate) attempts_before: i32,
    /// How the instant's attempt before its first ended, told to that
    /// attempt (`REPLICRON_PREVIOUS_STATUS`): `abandoned` for a rerun.
    pub(crate) previous_status: Option<RunStatus>,
    /// The parents' runs whose ends started it (a dependent job's run).
    pub(crate) parent_runs: Vec<i64>,
    /// Why its claimed instant is not to run: it is recorded `skipped`
    /// with this reason, and not notified (a dependent job's instant
    /// whose parent ended otherwise than it asks, or that came while its
    /// run was going).
    pub(crate) not_run: Option<String>,
    /// Its priority among the waiters for a shared lock or a limit, if not
    /// the job's (a backfill's `--priority`; a backfill given none waits
    /// behind the other runs).
    pub(crate) priority: Option<i32>,
}

/// What runs: a name (its history rows carry it: a job's, or `exec`'s
/// NAME), the settings that bound each run, and the action.
#[derive(Clone)]
pub(crate) struct Work {
    pub(crate) name: String,
    pub(crate) settings: JobSettings,
    pub(crate) action: Arc<dyn Action>,
}

impl Work {
    /// What `job` runs; `None` for a job with nothing to run (never built).
    pub(crate) fn of(job: &Job) -> Option<Work> {
        Some(Work {
            name: job.name.to_string(),
            settings: job.settings.clone(),
            action: job.action.clone()?,
        })
    }
}
