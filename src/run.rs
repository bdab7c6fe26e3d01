//! What a run is and how it can end: the vocabulary that the history, the
//! notifications, the metrics and the job file share, and nothing more, so
//! that every layer may use it.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use diesel::{AsExpression, FromSqlRow};
use serde::Serialize;

/// `Display`, `FromStr` and diesel's `Text` mapping of an enum stored by
/// name in a column: its `ALL` and `as_str`, and what a name this build does
/// not know (one a newer replica wrote) reads as, rather than failing the
/// whole read.
macro_rules! text_column {
    ($ty:ident, $what:literal, unknown = $unknown:expr) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .into_iter()
                    .find(|value| value.as_str() == s)
                    .ok_or_else(|| format!(concat!("unknown ", $what, " {:?}"), s))
            }
        }

        impl<DB> diesel::deserialize::FromSql<diesel::sql_types::Text, DB> for $ty
        where
            DB: diesel::backend::Backend,
            String: diesel::deserialize::FromSql<diesel::sql_types::Text, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
                let text = String::from_sql(bytes)?;
                Ok(text.parse().unwrap_or($unknown))
            }
        }

        impl<DB> diesel::serialize::ToSql<diesel::sql_types::Text, DB> for $ty
        where
            DB: diesel::backend::Backend,
            str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, DB>,
            ) -> diesel::serialize::Result {
                self.as_str().to_sql(out)
            }
        }
    };
}

/// How a run ended, or that it has not yet: the `status` column, typed
/// from the database to the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, AsExpression, FromSqlRow)]
#[diesel(sql_type = diesel::sql_types::Text)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunStatus {
    /// Still going.
    Running,
    /// Exited 0.
    Succeeded,
    /// Exited non-zero, or was killed by a signal it did not get from us.
    Failed,
    /// Stopped after its `timeout`.
    TimedOut,
    /// Stopped because its lease could not be kept.
    LostLock,
    /// Stopped at shutdown after `shutdown_grace`.
    Killed,
    /// Its holder vanished; another replica has since claimed the job.
    Abandoned,
    /// Could not be started.
    Error,
    /// No replica claimed the instant in time: recorded by the fleet-wide
    /// check, with attempt 0 (a catch-up run of the instant is attempt 1).
    Missed,
    /// Not run: one of the job's shared `locks` stayed held by another run
    /// past the wait an overrun gets, or its claim committed unheard and
    /// could not run in time; the output says which.
    Skipped,
    /// Stopped for a later instant of its job (`overlap = "replace"`).
    Replaced,
}

impl RunStatus {
    /// Every status.
    pub(crate) const ALL: [RunStatus; 11] = [
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::LostLock,
        RunStatus::Killed,
        RunStatus::Abandoned,
        RunStatus::Error,
        RunStatus::Missed,
        RunStatus::Skipped,
        RunStatus::Replaced,
    ];

    /// The name stored in the `status` column.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::LostLock => "lost_lock",
            RunStatus::Killed => "killed",
            RunStatus::Abandoned => "abandoned",
            RunStatus::Error => "error",
            RunStatus::Missed => "missed",
            RunStatus::Skipped => "skipped",
            RunStatus::Replaced => "replaced",
        }
    }
}

text_column!(RunStatus, "run status", unknown = RunStatus::Error);

/// What started a run: the `triggered_by` column, typed from the database
/// to the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, AsExpression, FromSqlRow)]
#[diesel(sql_type = diesel::sql_types::Text)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Trigger {
    /// Its instant came (and the run was on time).
    #[default]
    Schedule,
    /// Its instant was missed, and catch-up ran it at start or when the
    /// database answered again.
    CatchUp,
    /// `trigger`, the API, the dashboard, or `exec`.
    Manual,
    /// `replicron backfill`.
    Backfill,
    /// An attempt after a failed or timed-out one of the same instant, or
    /// the rerun of an abandoned one (`on_abandon = "rerun"`).
    Retry,
    /// The job another one depends on ended.
    Dependency,
}

impl Trigger {
    /// Every trigger.
    pub(crate) const ALL: [Trigger; 6] = [
        Trigger::Schedule,
        Trigger::CatchUp,
        Trigger::Manual,
        Trigger::Backfill,
        Trigger::Retry,
        Trigger::Dependency,
    ];

    /// What started attempt `attempt` of a run this started: attempts
    /// after the first are `retry`.
    pub(crate) fn of_attempt(self, attempt: u32) -> Trigger {
        if attempt > 1 { Trigger::Retry } else { self }
    }

    /// The name stored in the `triggered_by` column.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::CatchUp => "catch_up",
            Trigger::Manual => "manual",
            Trigger::Backfill => "backfill",
            Trigger::Retry => "retry",
            Trigger::Dependency => "dependency",
        }
    }
}

text_column!(Trigger, "trigger", unknown = Trigger::Schedule);

/// A run's parameters: declared names of its job and their values, given
/// to it as environment variables and recorded with it.
pub(crate) type Params = std::collections::BTreeMap<String, String>;

/// What can be notified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Event {
    /// A run ended `failed` (after its retries).
    Failed,
    /// A run ended `timed_out` (after its retries).
    TimedOut,
    /// A run was stopped because its lease could not be kept.
    LostLock,
    /// A run could not be started (`error`: no such program, …).
    Error,
    /// A run's holder vanished; another replica marked it `abandoned`.
    Abandoned,
    /// An instant that no replica claimed, recorded `missed`.
    Missed,
    /// An instant not run because a shared lock of the job stayed held,
    /// recorded `skipped`.
    Skipped,
    /// A run still going `warn_after` after its attempt started (it goes
    /// on); once per run.
    LongRunning,
    /// A run whose action started more than `late_after` after it was due
    /// (its instant plus its jitter delay).
    LateStart,
    /// The first success after a failed, timed-out, lost, abandoned or
    /// missed instant.
    Recovered,
}

impl Event {
    /// Every event, in the order the documentation lists them.
    pub(crate) const ALL: [Event; 10] = [
        Event::Failed,
        Event::TimedOut,
        Event::LostLock,
        Event::Error,
        Event::Abandoned,
        Event::Missed,
        Event::Skipped,
        Event::LongRunning,
        Event::LateStart,
        Event::Recovered,
    ];

    /// Its name in the job file, the payload and the metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Event::Failed => "failed",
            Event::TimedOut => "timed_out",
            Event::LostLock => "lost_lock",
            Event::Error => "error",
            Event::Abandoned => "abandoned",
            Event::Missed => "missed",
            Event::Skipped => "skipped",
            Event::LongRunning => "long_running",
            Event::LateStart => "late_start",
            Event::Recovered => "recovered",
        }
    }

    /// The event a run's final status is, if any.
    pub(crate) fn of_status(status: RunStatus) -> Option<Event> {
        match status {
            RunStatus::Failed => Some(Event::Failed),
            RunStatus::TimedOut => Some(Event::TimedOut),
            RunStatus::LostLock => Some(Event::LostLock),
            RunStatus::Error => Some(Event::Error),
            RunStatus::Abandoned => Some(Event::Abandoned),
            RunStatus::Missed => Some(Event::Missed),
            RunStatus::Skipped => Some(Event::Skipped),
            RunStatus::Running | RunStatus::Succeeded | RunStatus::Killed | RunStatus::Replaced => {
                None
            }
        }
    }

    /// The events sent unless a job says otherwise: all but `recovered`.
    pub(crate) fn defaults() -> BTreeSet<Event> {
        Event::ALL
            .into_iter()
            .filter(|e| *e != Event::Recovered)
            .collect()
    }
}

impl std::str::FromStr for Event {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Event::ALL
            .into_iter()
            .find(|e| e.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Event::ALL.iter().map(|e| e.as_str()).collect();
                format!(
                    "unknown event {text:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}
