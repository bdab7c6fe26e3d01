//! What a run is and how it can end: the vocabulary that the history, the
//! notifications, the metrics and the job file share, and nothing more, so
//! that every layer may use it.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use diesel::{AsExpression, FromSqlRow};
use serde::Serialize;

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
}

impl RunStatus {
    /// Every status.
    pub(crate) const ALL: [RunStatus; 10] = [
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
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<DB> diesel::deserialize::FromSql<diesel::sql_types::Text, DB> for RunStatus
where
    DB: diesel::backend::Backend,
    String: diesel::deserialize::FromSql<diesel::sql_types::Text, DB>,
{
    fn from_sql(bytes: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
        let text = String::from_sql(bytes)?;
        // A status this build does not know (one a newer replica wrote)
        // reads as `error` rather than failing the whole read.
        Ok(text.parse().unwrap_or(RunStatus::Error))
    }
}

impl<DB> diesel::serialize::ToSql<diesel::sql_types::Text, DB> for RunStatus
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

impl FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| format!("unknown run status {s:?}"))
    }
}

/// What can be notified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// The first success after a failed, timed-out, lost, abandoned or
    /// missed instant.
    Recovered,
}

impl Event {
    /// Every event, in the order the documentation lists them.
    pub(crate) const ALL: [Event; 8] = [
        Event::Failed,
        Event::TimedOut,
        Event::LostLock,
        Event::Error,
        Event::Abandoned,
        Event::Missed,
        Event::Skipped,
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
            RunStatus::Running | RunStatus::Succeeded | RunStatus::Killed => None,
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
