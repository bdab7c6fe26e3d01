//! What an operator does to a job's lease row, for `pause`, `resume` and
//! `unlock` on the command line and the same actions of the dashboard and
//! API: each checks what it is given, acts, and says what happened as a
//! value that the caller renders (text, JSON, HTML, an exit status). Each
//! writes its row of the audit log, done or refused, for its [`Actor`].

use chrono::{DateTime, Utc};

use crate::config::RESERVED_PREFIX;
use crate::db::audit::{Action, Actor, Entry, Outcome, REDACTED};
use crate::db::{DbError, Store};
use crate::history::{RunRow, rfc3339};

/// The longest reason taken, in characters.
pub(crate) const MAX_REASON: usize = 500;

/// The reason an operator gave an action (`--reason`, the API's and the
/// dashboard's `reason`), checked: at most [`MAX_REASON`] characters, on
/// one line, without control characters, bidirectional ones included (it
/// is printed in tables and pages and given to a run as
/// `REPLICRON_REASON`). A blank one is none.
pub(crate) fn check_reason(given: Option<&str>) -> Result<Option<String>, Refused> {
    let Some(reason) = given.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let length = reason.chars().count();
    if length > MAX_REASON {
        return Err(Refused::Invalid(format!(
            "the reason is {length} characters long: at most {MAX_REASON}"
        )));
    }
    if let Some(control) = reason
        .chars()
        .find(|&c| c.is_control() || crate::text::is_bidi_control(c))
    {
        return Err(Refused::Invalid(format!(
            "the reason holds a control character (U+{:04X}): write it on one line, without tabs or escapes",
            u32::from(control)
        )));
    }
    Ok(Some(reason.to_string()))
}

/// Records that `entry`'s action was refused before it was carried out,
/// and returns the refusal.
async fn refused_at_once(store: &Store, actor: &Actor, entry: Entry, refused: Refused) -> Refused {
    store
        .audit(actor, entry, Outcome::Refused(refused.to_string()))
        .await;
    refused
}

/// Why an action was not carried out.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// What the operator gave is wrong; the text says how.
    #[error("{0}")]
    Invalid(String),
    /// The job has no lease row (it never ran, nor was paused).
    #[error("{0} has no lease row")]
    NoRow(String),
    /// One of replicron's own rows, which no operator ends.
    #[error(
        "{0} is one of replicron's own lease rows, not a job's: it is not unlocked (it ends by itself)"
    )]
    Reserved(String),
    /// The lease's run is recorded running and `force` was not given.
    #[error("{job} is held by {} whose run {} (started {}) is still recorded running", run.instance, run.id, rfc3339(run.started_at))]
    Running {
        /// The job.
        job: String,
        /// Its run under the lease.
        run: Box<RunRow>,
    },
    /// The database did not answer.
    #[error(transparent)]
    Db(#[from] DbError),
    /// Its row of the audit log could not be written: it was not carried
    /// out.
    #[error(
        "not done: it could not be recorded in the audit log ({0}), and an action is carried out only once recorded"
    )]
    Unaudited(DbError),
}

/// What the audit log says a trigger of `job` was given: `force`, and its
/// parameters. A value is written only where it was accepted as one of the
/// job's declared parameters that is not in `secret_params`; any other
/// (a secret's, a name the job does not declare, which may be a secret's
/// misspelt, a value too long or holding a NUL) is written as
/// [`REDACTED`]. The command line and the web record the same.
pub(crate) fn trigger_entry<'p>(
    job: &crate::config::Job,
    force: bool,
    params: impl IntoIterator<Item = (&'p String, &'p String)>,
) -> Entry {
    let params: serde_json::Map<String, serde_json::Value> = params
        .into_iter()
        .map(|(name, value)| {
            let shown = job.params.iter().any(|p| &p.name == name)
                && !job.secret_params.contains(name)
                && crate::config::params::is_storable(value);
            let shown = if shown { value.as_str() } else { REDACTED };
            (name.clone(), serde_json::Value::String(shown.to_string()))
        })
        .collect();
    let entry = Entry::new(Action::Trigger, &job.name).arg("force", force);
    if params.is_empty() {
        entry
    } else {
        entry.arg("params", serde_json::Value::Object(params))
    }
}

/// Plans a one-time run of `job` at `at` with `params` (checked against
/// its declaration by the caller), for `actor`: a row that any replica
/// running then sees and claims at its instant, as a scheduled one, so it
/// runs once across the fleet. Recorded in the audit log as a trigger with
/// `at`. Refused for a time not after the database's now, a job run on
/// every replica, a secret parameter given a value (it would be stored in
/// the database), and an instant already planned for the job. Returns the
/// row's id.
pub(crate) async fn trigger_at(
    store: &Store,
    actor: &Actor,
    job: &crate::config::Job,
    at: DateTime<Utc>,
    params: &crate::history::Params,
) -> Result<i64, Refused> {
    let entry = trigger_entry(job, false, params).arg("at", crate::schedule::fmt_instant(at));
    let planned = trigger_at_unaudited(store, actor, job, at, params);
    audited(store, actor, entry, planned, |id| {
        format!(
            "planned once at {} (one-time run {id})",
            crate::schedule::fmt_instant(at)
        )
    })
    .await
}

pub(crate) async fn trigger_at_unaudited(
    store: &Store,
    actor: &Actor,
    job: &crate::config::Job,
    at: DateTime<Utc>,
    params: &crate::history::Params,
) -> Result<i64, Refused> {
    let name = &*job.name;
    if job.run_on == crate::config::RunOn::Every {
        return Err(Refused::Invalid(format!(
            "{name} runs on every replica (run_on = \"every\"): a one-time run is for a job run once across the fleet"
        )));
    }
    if !job.enabled {
        return Err(Refused::Invalid(format!(
            "{name} is disabled (enabled = false): no replica runs it, so a one-time run of it would never start"
        )));
    }
    crate::db::clock::storable(at).map_err(Refused::Invalid)?;
    if at.timestamp_subsec_nanos() != 0 {
        return Err(Refused::Invalid(format!(
            "--at {}: instants are whole seconds",
            crate::schedule::fmt_instant(at)
        )));
    }
    // A secret's value would be stored in the database until its run: only
    // its declared default (which the replica that runs it has) may stand.
    let given_secret = job.params.iter().find(|param| {
        job.secret_params.contains(&param.name)
            && params
                .get(&param.name)
                .is_some_and(|value| param.default.as_ref() != Some(value))
    });
    if let Some(param) = given_secret {
        return Err(Refused::Invalid(format!(
            "{} is a secret parameter: its value is not stored in the database for a later run; trigger {name} now, without --at, to give it one",
            param.name
        )));
    }
    let now = store.database_now().await?;
    if at <= now {
        return Err(Refused::Invalid(format!(
            "{} is not after the database's now ({}): a one-time run is for a time to come; trigger {name} without --at to run it now",
            crate::schedule::fmt_instant(at),
            crate::schedule::fmt_instant(now)
        )));
    }
    let stored: crate::history::Params = params
        .iter()
        .filter(|(param, _)| !job.secret_params.contains(param))
        .map(|(param, value)| (param.clone(), value.clone()))
        .collect();
    match crate::scheduler::planned::plan(store, name, at, &stored, &actor.label()).await? {
        Some(id) => Ok(id),
        None => Err(Refused::Invalid(format!(
            "a one-time run of {name} at {} is planned already",
            crate::schedule::fmt_instant(at)
        ))),
    }
}

/// Carries out `act` once `entry`'s row for `actor` is in the audit log,
/// then records its result there, the text of a success made by `done`;
/// returns its result. An action whose row cannot be written is not
/// carried out ([`Refused::Unaudited`]).
async fn audited<T>(
    store: &Store,
    actor: &Actor,
    entry: Entry,
    act: impl Future<Output = Result<T, Refused>>,
    done: impl FnOnce(&T) -> String,
) -> Result<T, Refused> {
    let row = store
        .audit_ahead(actor, &entry)
        .await
        .map_err(Refused::Unaudited)?;
    let result = act.await;
    let outcome = match &result {
        Ok(value) => Outcome::Done(done(value)),
        Err(refused) => Outcome::Refused(refused.to_string()),
    };
    store.audit_settle(row, outcome).await;
    result
}

/// Pauses `job` on every replica until `until` (an RFC 3339 time or a
/// duration from the database's now; `None` until resumed), for `actor`
/// and `reason`. Returns the end of the pause.
pub(crate) async fn pause(
    store: &Store,
    actor: &Actor,
    job: &str,
    until: Option<&str>,
    reason: Option<String>,
) -> Result<Option<DateTime<Utc>>, Refused> {
    let entry = Entry::new(Action::Pause, job).arg("until", until);
    // A reason refused is not written: it may hold what a terminal would
    // act on.
    let reason = match check_reason(reason.as_deref()) {
        Ok(reason) => reason,
        Err(refused) => return Err(refused_at_once(store, actor, entry, refused).await),
    };
    let entry = entry.arg("reason", reason.clone());
    let paused = pause_unaudited(store, actor, job, until, reason);
    audited(store, actor, entry, paused, |until| match until {
        Some(until) => format!("paused until {}", rfc3339(until.naive_utc())),
        None => "paused until resumed".to_string(),
    })
    .await
}

async fn pause_unaudited(
    store: &Store,
    actor: &Actor,
    job: &str,
    until: Option<&str>,
    reason: Option<String>,
) -> Result<Option<DateTime<Utc>>, Refused> {
    let until = match until {
        Some(text) => {
            let now = store.database_now().await?;
            Some(parse_future_until(text, now).map_err(Refused::Invalid)?)
        }
        None => None,
    };
    store.pause(job, until, actor.label(), reason).await?;
    Ok(until)
}

/// Resumes `job` for `actor`, who says why in `reason` (recorded in the
/// audit log); `false` if it was not paused.
pub(crate) async fn resume(
    store: &Store,
    actor: &Actor,
    job: &str,
    reason: Option<String>,
) -> Result<bool, Refused> {
    let entry = Entry::new(Action::Resume, job);
    let reason = match check_reason(reason.as_deref()) {
        Ok(reason) => reason,
        Err(refused) => return Err(refused_at_once(store, actor, entry, refused).await),
    };
    let resumed = async { store.resume(job).await.map_err(Refused::from) };
    audited(
        store,
        actor,
        entry.arg("reason", reason),
        resumed,
        |resumed| if *resumed { "resumed" } else { "not paused" }.to_string(),
    )
    .await
}

/// What `unlock` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unlocked {
    /// The lease was not held: nothing to end.
    NotHeld,
    /// The lease of `holder` under `fence` ended.
    Ended {
        /// Who held it.
        holder: Option<String>,
        /// Its fence.
        fence: i64,
    },
}

/// Ends the lease of `job` (a job's, or an `exec` lock's) for `actor`, who
/// says why in `reason` (recorded in the audit log). A lease whose run is
/// recorded running is ended only with `force` (its holder then stops
/// that run).
pub(crate) async fn unlock(
    store: &Store,
    actor: &Actor,
    job: &str,
    force: bool,
    reason: Option<String>,
) -> Result<Unlocked, Refused> {
    let entry = Entry::new(Action::Unlock, job).arg("force", force);
    let reason = match check_reason(reason.as_deref()) {
        Ok(reason) => reason,
        Err(refused) => return Err(refused_at_once(store, actor, entry, refused).await),
    };
    let unlocked = unlock_unaudited(store, job, force);
    let entry = entry.arg("reason", reason);
    audited(store, actor, entry, unlocked, |unlocked| match unlocked {
        Unlocked::NotHeld => "not held".to_string(),
        Unlocked::Ended { holder, fence } => format!(
            "lease of {} (fence {fence}) ended",
            holder.as_deref().unwrap_or("?")
        ),
    })
    .await
}

async fn unlock_unaudited(store: &Store, job: &str, force: bool) -> Result<Unlocked, Refused> {
    if job.starts_with(RESERVED_PREFIX) {
        return Err(Refused::Reserved(job.to_string()));
    }
    let Some(lock) = store.find_lock(job).await? else {
        return Err(Refused::NoRow(job.to_string()));
    };
    if !store.is_held(job).await? {
        return Ok(Unlocked::NotHeld);
    }
    if let Some(run) = store.running_under(job, lock.fence).await?
        && !force
    {
        return Err(Refused::Running {
            job: job.to_string(),
            run: Box::new(run),
        });
    }
    store.force_unlock(job).await?;
    Ok(Unlocked::Ended {
        holder: lock.locked_by,
        fence: lock.fence,
    })
}

/// A pause's end, which must be after `now` (the database's): an RFC 3339
/// time, or a duration after `now`.
fn parse_future_until(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let until = parse_until(text, now)?;
    crate::db::clock::storable(until)
        .map_err(|e| format!("--until {text:?}: {e}; leave it out to pause until resumed"))?;
    if until <= now {
        return Err(format!(
            "--until {text:?} is not in the future (the database's clock says {})",
            rfc3339(now.naive_utc())
        ));
    }
    Ok(until)
}

/// `--until`'s time: an RFC 3339 time, or a duration after `now`.
fn parse_until(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    match humantime::parse_duration(text) {
        Ok(after) => chrono::TimeDelta::from_std(after)
            .ok()
            .and_then(|after| now.checked_add_signed(after))
            .ok_or_else(|| format!("--until {text:?} is too far away")),
        Err(_) => Err(format!(
            "--until {text:?} is neither an RFC 3339 time (2026-12-01T06:00:00Z) nor a duration (2h, 30m)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_REASON, check_reason, parse_future_until, parse_until};
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_reason_is_one_bounded_line() {
        assert_eq!(check_reason(None).unwrap(), None);
        assert_eq!(check_reason(Some("  ")).unwrap(), None);
        assert_eq!(
            check_reason(Some(" disk swap, ticket 42 "))
                .unwrap()
                .as_deref(),
            Some("disk swap, ticket 42")
        );
        let longest = "é".repeat(MAX_REASON);
        assert_eq!(check_reason(Some(&longest)).unwrap(), Some(longest.clone()));
        let e = check_reason(Some(&format!("{longest}x")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("501 characters long: at most 500"), "{e}");
        for (bad, code) in [
            ("two\nlines", "U+000A"),
            ("a\ttab", "U+0009"),
            ("\u{1b}[2Jcleared", "U+001B"),
            ("nul\0", "U+0000"),
            ("c1\u{9b}", "U+009B"),
            ("evil\u{202e}txt.exe", "U+202E"),
        ] {
            let e = check_reason(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("control character") && e.contains(code), "{e}");
        }
    }

    #[test]
    fn until_is_a_time_or_a_duration_from_now() {
        let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
        assert_eq!(
            parse_until("2026-12-01T06:00:00Z", now),
            Ok(Utc.with_ymd_and_hms(2026, 12, 1, 6, 0, 0).unwrap())
        );
        assert_eq!(
            parse_until("2026-12-01T07:00:00+01:00", now),
            Ok(Utc.with_ymd_and_hms(2026, 12, 1, 6, 0, 0).unwrap())
        );
        assert_eq!(
            parse_until("90m", now),
            Ok(Utc.with_ymd_and_hms(2026, 11, 24, 13, 30, 0).unwrap())
        );
        let past = parse_future_until("2026-11-24T11:00:00Z", now).unwrap_err();
        assert!(past.contains("not in the future"), "{past}");
        let error = parse_until("tomorrow", now).unwrap_err();
        assert!(
            error.contains("\"tomorrow\"") && error.contains("RFC 3339"),
            "{error}"
        );
        // Past what every database stores (a fuzzer's 22,000 years made
        // MariaDB store a date nothing could read back).
        for far in ["193335343h", "9999-12-31T00:00:00Z"] {
            let error = parse_future_until(far, now).unwrap_err();
            assert!(
                error.contains("latest time every database stores"),
                "{error}"
            );
        }
        assert!(parse_future_until("7000y", now).is_ok());
    }
}
