//! When jobs fire: cron expressions evaluated in a job's time zone, and the
//! ticker that sleeps until each instant.
//!
//! Expressions are parsed by croner. What crontab(5) means is decided here:
//! 5 fields as crontab, 6 with a leading seconds field, the `@` macros, and
//! Vixie cron's day rule (a day matches when either the day-of-month or the
//! day-of-week matches, unless one of them starts with `*`, in which case
//! both must). Daylight saving follows SPEC §3 through croner's resolution of
//! local times: a fixed time that falls in a spring-forward gap fires once at
//! the first instant after it, a fixed time in a fall-back overlap fires once
//! at its first occurrence, and interval schedules keep firing on the real
//! timeline.
//!
//! The [`Ticker`] recomputes the next instant from the wall clock every time
//! it sleeps, so it cannot drift; the clock is injected so that tests can run
//! through a year's DST transitions in milliseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// The longest single sleep: a wall-clock step (NTP, suspend) is noticed at
/// least this often even while a daily job waits for its instant.
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// How late the [`Ticker`] still hands out an instant that came while its
/// caller was busy; older instants are skipped (after a clock step forward,
/// say), and are catch-up's business.
pub const LATE_LIMIT: TimeDelta = TimeDelta::seconds(60);

/// A parsed cron expression in a time zone.
#[derive(Clone, Debug)]
pub struct Schedule {
    expression: String,
    zone: Tz,
    cron: Cron,
}

/// Two schedules are the same when written the same in the same zone.
impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression && self.zone == other.zone
    }
}

impl Eq for Schedule {}

impl Schedule {
    /// Parses `expression` (5 fields, 6 fields with leading seconds, or a
    /// macro) to be evaluated in `zone`.
    pub fn parse(expression: &str, zone: Tz) -> Result<Self, String> {
        let expanded = expand_macro(expression)?;
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let seconds = match fields.len() {
            5 => Seconds::Disallowed,
            6 => Seconds::Required,
            n => {
                return Err(format!(
                    "schedule {expression:?} has {n} field{}: expected 5 (minute hour day-of-month month day-of-week), \
                     6 (with a leading seconds field) or a macro such as @daily",
                    if n == 1 { "" } else { "s" }
                ));
            }
        };
        check_ranges(&fields).map_err(|e| format!("invalid schedule {expression:?}: {e}"))?;
        let (dom, dow) = (fields[fields.len() - 3], fields[fields.len() - 1]);
        // Vixie cron: a day field that starts with `*` (including `*/2`)
        // makes the two day fields combine with AND instead of OR; `?` (no
        // specific value, an extension) counts as `*`.
        let unrestricted = |field: &str| field.starts_with('*') || field == "?";
        let vixie_and = unrestricted(dom) || unrestricted(dow);
        let parser = CronParser::builder()
            .seconds(seconds)
            .year(croner::parser::Year::Disallowed)
            .dom_and_dow(vixie_and)
            .build();
        let cron = parser
            .parse(&expanded)
            .map_err(|e| format!("invalid schedule {expression:?}: {e}"))?;
        let schedule = Schedule {
            expression: expression.trim().to_string(),
            zone,
            cron,
        };
        // A valid pattern that never matches (`0 0 30 2 *`) is a mistake,
        // not a job that silently never runs.
        let probe = DateTime::from_timestamp(0, 0).unwrap_or_default();
        if schedule.next_after(probe).is_none() {
            return Err(format!("schedule {expression:?} never fires"));
        }
        Ok(schedule)
    }

    /// The expression as written in the config.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone the expression is evaluated in.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first instant strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // croner works in whole seconds: start from the second `after` is in,
        // which is itself not after `after`, and search exclusively.
        let start = after
            .duration_trunc(TimeDelta::seconds(1))
            .ok()?
            .with_timezone(&self.zone);
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        Some(next.with_timezone(&Utc))
    }

    /// The latest instant at or before `at`, if there is one.
    pub fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = at
            .duration_trunc(TimeDelta::seconds(1))
            .ok()?
            .with_timezone(&self.zone);
        let previous = self.cron.find_previous_occurrence(&start, true).ok()?;
        Some(previous.with_timezone(&Utc))
    }

    /// The next `count` instants strictly after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut instants = Vec::with_capacity(count);
        let mut cursor = after;
        while instants.len() < count {
            match self.next_after(cursor) {
                Some(next) => {
                    instants.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        instants
    }
}

/// The fields of a 6-field expression, with the values each may hold.
const FIELDS: [(&str, u32, u32); 6] = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
];

/// Names each number of an expression's fields (`minute 61 is out of range
/// 0–59`), before croner parses it: croner would only say "Number out of
/// bounds". The extensions croner accepts (`L`, `W`, `#`, `?`) are left to
/// it.
fn check_ranges(fields: &[&str]) -> Result<(), String> {
    let named = &FIELDS[FIELDS.len() - fields.len()..];
    for (field, (name, low, high)) in fields.iter().zip(named) {
        for item in field.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            if step.and_then(|step| step.parse::<u32>().ok()) == Some(0) {
                return Err(format!(
                    "{name} step 0 is not allowed: a step is at least 1"
                ));
            }
            for bound in range.split('-') {
                // Names (jan, mon), `*`, `?` and the L/W/# extensions are
                // croner's to judge; only plain numbers are checked here.
                let Ok(value) = bound.parse::<u32>() else {
                    continue;
                };
                if value < *low || value > *high {
                    return Err(format!("{name} {value} is out of range {low}–{high}"));
                }
            }
        }
    }
    Ok(())
}

fn expand_macro(expression: &str) -> Result<String, String> {
    let trimmed = expression.trim();
    if !trimmed.starts_with('@') {
        return Ok(trimmed.to_string());
    }
    let expanded = match trimmed.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@reboot" => {
            return Err(
                "@reboot is not a schedule replicron can run once across replicas: \
                 run it from the host's own start-up instead"
                    .to_string(),
            );
        }
        _ => {
            return Err(format!(
                "unknown macro {trimmed:?}: expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"
            ));
        }
    };
    Ok(expanded.to_string())
}

impl Ticker {
    /// The instants skipped since the last call, if any.
    pub fn take_skipped(&mut self) -> Option<Skipped> {
        self.skipped.take()
    }

    /// Counts the instants after `after`, up to and including `until`.
    fn note_skipped(&mut self, after: DateTime<Utc>, until: DateTime<Utc>) {
        let mut cursor = after;
        while let Some(next) = self.schedule.next_after(cursor) {
            if next > until {
                break;
            }
            let skipped = self.skipped.get_or_insert(Skipped {
                first: next,
                last: next,
                count: 0,
            });
            skipped.last = next;
            skipped.count += 1;
            if skipped.count >= Skipped::COUNT_LIMIT {
                break;
            }
            cursor = next;
        }
    }
}

/// Where the current time comes from.
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A wall clock that starts at a chosen instant and advances with tokio's
/// clock, so that a test with paused time can fast-forward through months.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    start_wall: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads `start_wall` now.
    pub fn starting_at(start_wall: DateTime<Utc>) -> Self {
        TokioClock {
            start_wall,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = TimeDelta::from_std(self.start.elapsed()).unwrap_or(TimeDelta::MAX);
        self.start_wall + elapsed
    }
}

/// How far a host's clock is from the database's, as last estimated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offset {
    /// Database time minus host time.
    pub offset: TimeDelta,
    /// How wrong `offset` may be: half the round trip of the sample it came
    /// from, plus the database clock's resolution.
    pub error: Duration,
}

/// The database's clock, read on this host: the host's clock plus the
/// [`Offset`] last estimated by sampling the database. Replicas sleep until
/// each instant by this clock, so that a host whose clock is fast does not
/// start jobs early; before any estimate it is the host's clock.
pub struct DatabaseClock {
    host: Arc<dyn Clock>,
    offset_us: AtomicI64,
    /// Microseconds; negative until the first estimate.
    error_us: AtomicI64,
}

impl DatabaseClock {
    /// The database's clock over `host`, not yet estimated.
    pub fn new(host: Arc<dyn Clock>) -> Self {
        DatabaseClock {
            host,
            offset_us: AtomicI64::new(0),
            error_us: AtomicI64::new(-1),
        }
    }

    /// The host's own clock.
    pub fn host(&self) -> &Arc<dyn Clock> {
        &self.host
    }

    /// Applies a new estimate.
    pub fn set(&self, estimate: Offset) {
        let offset = estimate.offset.num_microseconds().unwrap_or(i64::MAX);
        self.offset_us.store(offset, Ordering::Relaxed);
        let error = i64::try_from(estimate.error.as_micros()).unwrap_or(i64::MAX);
        self.error_us.store(error, Ordering::Relaxed);
    }

    /// The last estimate, if there was one.
    pub fn offset(&self) -> Option<Offset> {
        let error = self.error_us.load(Ordering::Relaxed);
        (error >= 0).then(|| Offset {
            offset: TimeDelta::microseconds(self.offset_us.load(Ordering::Relaxed)),
            error: Duration::from_micros(error.unsigned_abs()),
        })
    }
}

impl Clock for DatabaseClock {
    fn now(&self) -> DateTime<Utc> {
        self.host.now() + TimeDelta::microseconds(self.offset_us.load(Ordering::Relaxed))
    }
}

/// Instants a [`Ticker`] skipped because they were more than
/// [`LATE_LIMIT`] late when its caller came back for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The first one.
    pub first: DateTime<Utc>,
    /// The last one.
    pub last: DateTime<Utc>,
    /// How many (counted up to [`Skipped::COUNT_LIMIT`]).
    pub count: usize,
}

impl Skipped {
    /// Skipped instants are counted up to this many.
    pub const COUNT_LIMIT: usize = 10_000;
}

/// Sleeps until each instant of one schedule in turn.
pub struct Ticker {
    schedule: Schedule,
    clock: Arc<dyn Clock>,
    last: Option<DateTime<Utc>>,
    skipped: Option<Skipped>,
}

impl Ticker {
    /// A ticker whose first instant is the first one after the clock's now.
    pub fn new(schedule: Schedule, clock: Arc<dyn Clock>) -> Self {
        Ticker {
            schedule,
            clock,
            last: None,
            skipped: None,
        }
    }

    /// A ticker that continues after `last` (an instant already handled).
    pub fn resuming_after(schedule: Schedule, clock: Arc<dyn Clock>, last: DateTime<Utc>) -> Self {
        Ticker {
            schedule,
            clock,
            last: Some(last),
            skipped: None,
        }
    }

    /// The schedule this ticker follows.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Sleeps until the next instant and returns it. Never returns the same
    /// instant twice, even if the wall clock steps backwards. An instant the
    /// caller was too busy to take when it came is still returned, late,
    /// unless it is older than [`LATE_LIMIT`]: those are skipped, and
    /// [`Ticker::take_skipped`] tells which. Returns `None` only for a
    /// schedule that has no further instant.
    pub async fn tick(&mut self) -> Option<DateTime<Utc>> {
        let now = self.clock.now();
        let from = match self.last {
            Some(last) if last < now - LATE_LIMIT => {
                let from = now - LATE_LIMIT;
                self.note_skipped(last, from);
                from
            }
            Some(last) => last,
            None => now,
        };
        let target = self.schedule.next_after(from)?;
        loop {
            let now = self.clock.now();
            if now >= target {
                self.last = Some(target);
                return Some(target);
            }
            let wait = (target - now).to_std().unwrap_or_default().min(MAX_SLEEP);
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid test time")
            .with_timezone(&Utc)
    }

    fn schedule(expression: &str, zone: &str) -> Schedule {
        Schedule::parse(expression, zone.parse().expect("zone")).expect("valid schedule")
    }

    fn next_n(expression: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        schedule(expression, zone)
            .upcoming(utc(from), n)
            .into_iter()
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .collect()
    }

    #[test]
    fn five_fields_are_crontab() {
        assert_eq!(
            next_n("*/15 9-10 * * 1-5", "UTC", "2027-01-01T09:20:00Z", 4),
            [
                "2027-01-01T09:30:00Z",
                "2027-01-01T09:45:00Z",
                "2027-01-01T10:00:00Z",
                "2027-01-01T10:15:00Z"
            ]
        );
        // Names of months and days, and 7 for Sunday, as crontab(5).
        assert_eq!(
            next_n("0 12 * jan sun", "UTC", "2027-01-01T00:00:00Z", 2),
            ["2027-01-03T12:00:00Z", "2027-01-10T12:00:00Z"]
        );
        assert_eq!(
            next_n("0 12 * * 7", "UTC", "2027-01-01T00:00:00Z", 1),
            ["2027-01-03T12:00:00Z"]
        );
    }

    #[test]
    fn six_fields_lead_with_seconds() {
        assert_eq!(
            next_n("*/20 * * * * *", "UTC", "2027-01-01T00:00:05Z", 3),
            [
                "2027-01-01T00:00:20Z",
                "2027-01-01T00:00:40Z",
                "2027-01-01T00:01:00Z"
            ]
        );
        assert_eq!(
            next_n("30 0 12 * * *", "UTC", "2027-01-01T00:00:00Z", 1),
            ["2027-01-01T12:00:30Z"]
        );
    }

    #[test]
    fn other_field_counts_are_rejected() {
        for bad in ["* * * *", "0 0 0 1 1 * 2027", "", "@sometimes"] {
            assert!(
                Schedule::parse(bad, Tz::UTC).is_err(),
                "{bad:?} was accepted"
            );
        }
        let err = Schedule::parse("@reboot", Tz::UTC).unwrap_err();
        assert!(err.contains("@reboot"), "{err}");
        let err = Schedule::parse("61 * * * *", Tz::UTC).unwrap_err();
        assert!(err.contains("61 * * * *"), "{err}");
        assert!(err.contains("minute 61 is out of range 0–59"), "{err}");
        for (bad, message) in [
            ("0 24 * * *", "hour 24 is out of range 0–23"),
            ("0 0 0 * *", "day-of-month 0 is out of range 1–31"),
            ("0 0 1 13 *", "month 13 is out of range 1–12"),
            ("0 0 * * 8", "day-of-week 8 is out of range 0–7"),
            ("0 0 1-40 * *", "day-of-month 40 is out of range 1–31"),
            ("60 0 0 * * *", "second 60 is out of range 0–59"),
            ("*/0 * * * *", "minute step 0 is not allowed"),
        ] {
            let err = Schedule::parse(bad, Tz::UTC).unwrap_err();
            assert!(err.contains(message), "{bad}: {err}");
        }
        let err = Schedule::parse("0 0 30 2 *", Tz::UTC).unwrap_err();
        assert!(err.contains("never fires"), "{err}");
    }

    #[test]
    fn macros() {
        let from = "2027-05-17T10:20:30Z";
        let cases = [
            ("@yearly", "2028-01-01T00:00:00Z"),
            ("@annually", "2028-01-01T00:00:00Z"),
            ("@monthly", "2027-06-01T00:00:00Z"),
            ("@weekly", "2027-05-23T00:00:00Z"),
            ("@daily", "2027-05-18T00:00:00Z"),
            ("@midnight", "2027-05-18T00:00:00Z"),
            ("@hourly", "2027-05-17T11:00:00Z"),
        ];
        for (expression, expected) in cases {
            assert_eq!(
                next_n(expression, "UTC", from, 1),
                [expected],
                "{expression}"
            );
        }
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        // Vixie: both restricted, so the 13th OR any Friday.
        assert_eq!(
            next_n("0 0 13 * 5", "UTC", "2027-08-01T00:00:00Z", 4),
            [
                "2027-08-06T00:00:00Z",
                "2027-08-13T00:00:00Z",
                "2027-08-20T00:00:00Z",
                "2027-08-27T00:00:00Z"
            ]
        );
        assert_eq!(
            next_n("0 0 1,15 * 1", "UTC", "2027-03-01T00:00:01Z", 3),
            [
                "2027-03-08T00:00:00Z",
                "2027-03-15T00:00:00Z",
                "2027-03-22T00:00:00Z"
            ]
        );
        // A day field starting with `*` is unrestricted: AND, as Vixie cron.
        assert_eq!(
            next_n("0 0 */2 * 1", "UTC", "2027-03-01T00:00:01Z", 2),
            ["2027-03-15T00:00:00Z", "2027-03-29T00:00:00Z"]
        );
    }

    /// Beyond crontab(5), as croner reads them: `L` (last), `W` (nearest
    /// weekday), `#` (nth weekday of the month) and `?` (no specific value).
    #[test]
    fn extensions_beyond_crontab() {
        // The last day of each month.
        assert_eq!(
            next_n("0 0 L * *", "UTC", "2027-01-30T00:00:00Z", 3),
            [
                "2027-01-31T00:00:00Z",
                "2027-02-28T00:00:00Z",
                "2027-03-31T00:00:00Z"
            ]
        );
        // The weekday nearest the 15th: 2027-05-15 is a Saturday, so Friday the 14th.
        assert_eq!(
            next_n("0 0 15W * *", "UTC", "2027-05-01T00:00:00Z", 1),
            ["2027-05-14T00:00:00Z"]
        );
        // The second Friday of the month.
        assert_eq!(
            next_n("0 0 * * 5#2", "UTC", "2027-03-01T00:00:00Z", 2),
            ["2027-03-12T00:00:00Z", "2027-04-09T00:00:00Z"]
        );
        // The last Friday of the month.
        assert_eq!(
            next_n("0 0 * * 5L", "UTC", "2027-03-01T00:00:00Z", 1),
            ["2027-03-26T00:00:00Z"]
        );
        // `?` in a day field is `*`: every Monday, not every day.
        assert_eq!(
            next_n("0 0 ? * 1", "UTC", "2027-03-01T00:00:01Z", 2),
            ["2027-03-08T00:00:00Z", "2027-03-15T00:00:00Z"]
        );
    }

    #[test]
    fn leap_day() {
        assert_eq!(
            next_n("0 6 29 2 *", "UTC", "2027-01-01T00:00:00Z", 2),
            ["2028-02-29T06:00:00Z", "2032-02-29T06:00:00Z"]
        );
    }

    /// Spring forward 2027: Europe/Berlin 2027-03-28 02:00 CET -> 03:00 CEST,
    /// America/New_York 2027-03-14 02:00 EST -> 03:00 EDT.
    #[test]
    fn spring_forward_fixed_time_fires_once_after_the_gap() {
        // 02:30 does not exist that day: it fires once, at 03:00 local.
        assert_eq!(
            next_n("30 2 * * *", "Europe/Berlin", "2027-03-26T12:00:00Z", 3),
            [
                "2027-03-27T01:30:00Z",
                "2027-03-28T01:00:00Z",
                "2027-03-29T00:30:00Z"
            ]
        );
        assert_eq!(
            next_n("30 2 * * *", "America/New_York", "2027-03-12T12:00:00Z", 3),
            [
                "2027-03-13T07:30:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-15T06:30:00Z"
            ]
        );
        // A time just outside the gap is untouched.
        assert_eq!(
            next_n("0 3 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z", 2),
            ["2027-03-28T01:00:00Z", "2027-03-29T01:00:00Z"]
        );
    }

    /// Fall back 2027: Europe/Berlin 2027-10-31 03:00 CEST -> 02:00 CET,
    /// America/New_York 2027-11-07 02:00 EDT -> 01:00 EST.
    #[test]
    fn fall_back_fixed_time_fires_once_at_first_occurrence() {
        assert_eq!(
            next_n("30 2 * * *", "Europe/Berlin", "2027-10-29T12:00:00Z", 3),
            [
                "2027-10-30T00:30:00Z",
                "2027-10-31T00:30:00Z",
                "2027-11-01T01:30:00Z"
            ]
        );
        assert_eq!(
            next_n("30 1 * * *", "America/New_York", "2027-11-05T12:00:00Z", 3),
            [
                "2027-11-06T05:30:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-08T06:30:00Z"
            ]
        );
    }

    #[test]
    fn hourly_keeps_the_real_timeline_through_spring_forward() {
        // Berlin: 00:00Z is 01:00 CET, 01:00Z is 03:00 CEST: one real hour apart.
        assert_eq!(
            next_n("0 * * * *", "Europe/Berlin", "2027-03-27T23:30:00Z", 4),
            [
                "2027-03-28T00:00:00Z",
                "2027-03-28T01:00:00Z",
                "2027-03-28T02:00:00Z",
                "2027-03-28T03:00:00Z"
            ]
        );
        assert_eq!(
            next_n("0 * * * *", "America/New_York", "2027-03-14T05:30:00Z", 4),
            [
                "2027-03-14T06:00:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-14T08:00:00Z",
                "2027-03-14T09:00:00Z"
            ]
        );
    }

    #[test]
    fn hourly_keeps_the_real_timeline_through_fall_back() {
        // Berlin: 02:00 CEST (00:00Z), 02:00 CET (01:00Z), 03:00 CET (02:00Z).
        assert_eq!(
            next_n("0 * * * *", "Europe/Berlin", "2027-10-30T23:30:00Z", 4),
            [
                "2027-10-31T00:00:00Z",
                "2027-10-31T01:00:00Z",
                "2027-10-31T02:00:00Z",
                "2027-10-31T03:00:00Z"
            ]
        );
        assert_eq!(
            next_n("0 * * * *", "America/New_York", "2027-11-07T04:30:00Z", 4),
            [
                "2027-11-07T05:00:00Z",
                "2027-11-07T06:00:00Z",
                "2027-11-07T07:00:00Z",
                "2027-11-07T08:00:00Z"
            ]
        );
    }

    #[test]
    fn every_minute_through_fall_back_is_one_per_real_minute() {
        let berlin = schedule("* * * * *", "Europe/Berlin");
        let instants = berlin.upcoming(utc("2027-10-30T23:59:30Z"), 180);
        for pair in instants.windows(2) {
            assert_eq!(pair[1] - pair[0], TimeDelta::minutes(1));
        }
    }

    #[test]
    fn next_after_is_strict_and_handles_fractions() {
        let every_second = schedule("* * * * * *", "UTC");
        let at = utc("2027-01-01T00:00:00Z");
        assert_eq!(
            every_second.next_after(at),
            Some(at + TimeDelta::seconds(1))
        );
        let fraction = at + TimeDelta::milliseconds(999);
        assert_eq!(
            every_second.next_after(fraction),
            Some(at + TimeDelta::seconds(1))
        );
        assert_eq!(every_second.latest_at_or_before(fraction), Some(at));
    }

    #[test]
    fn latest_at_or_before() {
        let daily = schedule("0 4 * * *", "Europe/Berlin");
        assert_eq!(
            daily.latest_at_or_before(utc("2027-06-02T10:00:00Z")),
            Some(utc("2027-06-02T02:00:00Z"))
        );
        assert_eq!(
            daily.latest_at_or_before(utc("2027-06-02T02:00:00Z")),
            Some(utc("2027-06-02T02:00:00Z"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ticker_runs_through_a_dst_year_in_virtual_time() {
        let zone: Tz = "Europe/Berlin".parse().expect("zone");
        let start = zone
            .from_local_datetime(
                &NaiveDate::from_ymd_opt(2027, 3, 27)
                    .and_then(|d| d.and_hms_opt(12, 0, 0))
                    .expect("date"),
            )
            .single()
            .expect("unambiguous")
            .with_timezone(&Utc);
        let clock = Arc::new(TokioClock::starting_at(start));
        let mut ticker = Ticker::new(schedule("30 2 * * *", "Europe/Berlin"), clock.clone());
        let mut fired = Vec::new();
        for _ in 0..3 {
            let instant = ticker.tick().await.expect("instant");
            // The ticker never returns before its instant, nor late.
            assert!(clock.now() >= instant);
            assert!(clock.now() - instant < TimeDelta::milliseconds(2));
            fired.push(instant);
        }
        assert_eq!(
            fired,
            [
                utc("2027-03-28T01:00:00Z"),
                utc("2027-03-29T00:30:00Z"),
                utc("2027-03-30T00:30:00Z")
            ]
        );
    }

    /// A virtual clock that a test can step.
    struct SteppedClock {
        base: TokioClock,
        offset: std::sync::Mutex<TimeDelta>,
    }

    impl Clock for SteppedClock {
        fn now(&self) -> DateTime<Utc> {
            self.base.now() + *self.offset.lock().expect("clock lock")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ticker_never_repeats_an_instant_when_the_clock_steps_back() {
        let clock = Arc::new(SteppedClock {
            base: TokioClock::starting_at(utc("2027-01-01T00:00:00.5Z")),
            offset: std::sync::Mutex::new(TimeDelta::zero()),
        });
        let mut ticker = Ticker::new(schedule("* * * * * *", "UTC"), clock.clone());
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:01Z")));
        *clock.offset.lock().expect("lock") = TimeDelta::seconds(-5);
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:02Z")));
        assert!(clock.now() >= utc("2027-01-01T00:00:02Z"));
    }

    /// A host whose clock is 3 s fast, or 3 s slow, wakes at the database's
    /// instant once the offset is known: never before it by the database's
    /// clock, and without sleeping 3 s too long.
    #[tokio::test(start_paused = true)]
    async fn the_database_clock_wakes_at_the_database_instant() {
        for skew in [3, -3] {
            let database = TokioClock::starting_at(utc("2027-01-01T00:00:00.250Z"));
            let host = Arc::new(TokioClock::starting_at(
                utc("2027-01-01T00:00:00.250Z") + TimeDelta::seconds(skew),
            ));
            let clock = Arc::new(DatabaseClock::new(host.clone()));
            assert_eq!(clock.offset(), None);
            clock.set(Offset {
                offset: TimeDelta::seconds(-skew),
                error: Duration::from_micros(300),
            });
            let mut ticker = Ticker::new(schedule("* * * * * *", "UTC"), clock.clone());
            for expected in ["2027-01-01T00:00:01Z", "2027-01-01T00:00:02Z"] {
                let instant = ticker.tick().await.expect("instant");
                assert_eq!(instant, utc(expected));
                assert!(
                    database.now() >= instant,
                    "woke before the database's {instant}"
                );
                assert!(database.now() - instant < TimeDelta::milliseconds(2));
                assert_eq!(host.now() - database.now(), TimeDelta::seconds(skew));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_caller_still_gets_the_instants_it_was_late_for() {
        let clock = Arc::new(SteppedClock {
            base: TokioClock::starting_at(utc("2027-01-01T00:00:00.5Z")),
            offset: std::sync::Mutex::new(TimeDelta::zero()),
        });
        let mut ticker = Ticker::new(schedule("* * * * * *", "UTC"), clock.clone());
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:01Z")));
        // Busy for 3.2 s: the instants it missed come out at once, in order.
        tokio::time::sleep(Duration::from_millis(3200)).await;
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:02Z")));
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:03Z")));
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:04Z")));
        assert_eq!(ticker.tick().await, Some(utc("2027-01-01T00:00:05Z")));
        assert_eq!(ticker.take_skipped(), None);
        // A step forward past the late limit skips what is too old, and
        // says which.
        *clock.offset.lock().expect("lock") = TimeDelta::hours(1);
        let next = ticker.tick().await.expect("instant");
        assert!(clock.now() - next <= LATE_LIMIT, "{next}");
        let skipped = ticker.take_skipped().expect("skipped instants");
        assert_eq!(skipped.first, utc("2027-01-01T00:00:06Z"));
        assert_eq!(skipped.last + TimeDelta::seconds(1), next);
        assert_eq!(skipped.count as i64, (next - skipped.first).num_seconds());
        assert_eq!(ticker.take_skipped(), None);
    }
}
