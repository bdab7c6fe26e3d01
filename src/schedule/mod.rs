//! When jobs fire: cron expressions evaluated in a job's time zone
//! ([`Schedule`]), the clocks instants are read on ([`clock`]), and the
//! [`Ticker`] that sleeps until each instant.
//!
//! Expressions are parsed by croner. What crontab(5) means is decided here:
//! 5 fields as crontab, 6 with a leading seconds field, the `@` macros, and
//! Vixie cron's day rule (a day matches when either the day-of-month or the
//! day-of-week matches, unless one of them starts with `*`, in which case
//! both must). Daylight saving follows `docs/design.md#time` through croner's
//! resolution of local times: a fixed time that falls in a spring-forward
//! gap fires once at the first instant after it, a fixed time in a
//! fall-back overlap fires once at its first occurrence, and interval
//! schedules keep firing on the real timeline.

mod alarm;
mod clock;
mod ticker;

#[cfg(test)]
pub(crate) use self::clock::TokioClock;
pub(crate) use self::clock::{Clock, DatabaseClock, Offset, SystemClock};
pub(crate) use self::ticker::{LATE_LIMIT, Ticker};

use std::sync::Arc;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// A parsed cron expression in a time zone, and the job's jitter: how a
/// run's start follows its instant.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    expression: String,
    zone: Tz,
    /// `None` for `@reboot`: no instant but the replica's start. Shared by
    /// the schedule's clones: a parsed expression is some kilobytes.
    cron: Option<Arc<Cron>>,
    jitter: Option<Jitter>,
}

/// A start delay in `[0, span)` derived from a hash of (job, instant), so
/// every replica computes the same start for an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Jitter {
    /// The hash of the job's name.
    job: u64,
    /// The delay's bound, in milliseconds (at least 1).
    span_ms: u64,
}

/// Two schedules are the same when written the same in the same zone, with
/// the same jitter.
impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
            && self.zone == other.zone
            && self.jitter == other.jitter
    }
}

/// FNV-1a, 64 bits: a hash whose value every build and platform agrees on
/// (std's hashers promise no such thing).
fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// A short digest of `text` that every build and platform computes alike
/// (16 hex digits): replicas compare jobs' definitions by it.
pub(crate) fn digest(text: &str) -> String {
    format!("{:016x}", mix(fnv1a(text.as_bytes(), FNV_OFFSET)))
}

/// splitmix64's finaliser: spreads FNV's low bits over the whole word, so
/// that instants a second apart get unrelated delays.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Eq for Schedule {}

impl Schedule {
    /// Parses `expression` (5 fields, 6 fields with leading seconds, or a
    /// macro) to be evaluated in `zone`.
    pub(crate) fn parse(expression: &str, zone: Tz) -> Result<Self, String> {
        if expression.trim().eq_ignore_ascii_case("@reboot") {
            return Ok(Schedule {
                expression: "@reboot".to_string(),
                zone,
                cron: None,
                jitter: None,
            });
        }
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
            cron: Some(Arc::new(cron)),
            jitter: None,
        };
        // A valid pattern that never matches (`0 0 30 2 *`) is a mistake,
        // not a job that silently never runs.
        let probe = DateTime::from_timestamp(0, 0).unwrap_or_default();
        if schedule.next_after(probe).is_none() {
            return Err(format!("schedule {expression:?} never fires"));
        }
        Ok(schedule)
    }

    /// This schedule with `job`'s runs starting up to `jitter` after their
    /// instants (none for a zero jitter). The config checks that `jitter`
    /// is shorter than [`Schedule::shortest_interval`], so starts keep the
    /// instants' order.
    pub(crate) fn with_jitter(mut self, job: &str, jitter: std::time::Duration) -> Self {
        let span_ms = u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX);
        self.jitter = (span_ms > 0).then(|| Jitter {
            job: fnv1a(job.as_bytes(), FNV_OFFSET),
            span_ms,
        });
        self
    }

    /// The jitter's bound (zero without one).
    pub(crate) fn jitter(&self) -> TimeDelta {
        self.jitter.map_or(TimeDelta::zero(), |j| {
            TimeDelta::milliseconds(j.span_ms as i64)
        })
    }

    /// When the run of `instant` starts: the instant plus its job's delay
    /// for it, the same on every replica.
    pub(crate) fn start_of(&self, instant: DateTime<Utc>) -> DateTime<Utc> {
        let Some(jitter) = self.jitter else {
            return instant;
        };
        let hash = mix(fnv1a(&instant.timestamp_millis().to_le_bytes(), jitter.job));
        instant + TimeDelta::milliseconds((hash % jitter.span_ms) as i64)
    }

    /// The shortest time between two instants, over the next `SAMPLE`
    /// instants from `after` (a year of a daily schedule covers its months
    /// and daylight-saving changes; a per-second one's gaps repeat sooner).
    pub(crate) fn shortest_interval(&self, after: DateTime<Utc>) -> Option<std::time::Duration> {
        const SAMPLE: usize = 4000;
        let instants = self.upcoming(after, SAMPLE);
        instants
            .windows(2)
            .filter_map(|pair| (pair[1] - pair[0]).to_std().ok())
            .min()
    }

    /// Whether this is `@reboot`: a run at each start of the replica, and
    /// no instant after.
    pub(crate) fn is_at_start(&self) -> bool {
        self.cron.is_none()
    }

    /// The expression as written in the config.
    pub(crate) fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone the expression is evaluated in.
    pub(crate) fn zone(&self) -> Tz {
        self.zone
    }

    /// The first instant strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // croner works in whole seconds: start from the second `after` is in,
        // which is itself not after `after`, and search exclusively.
        let start = after
            .duration_trunc(TimeDelta::seconds(1))
            .ok()?
            .with_timezone(&self.zone);
        let next = self
            .cron
            .as_ref()?
            .find_next_occurrence(&start, false)
            .ok()?;
        Some(next.with_timezone(&Utc))
    }

    /// The time between the first two instants after `after` (the
    /// schedule's interval, for a regular one).
    pub(crate) fn interval_after(&self, after: DateTime<Utc>) -> Option<std::time::Duration> {
        let first = self.next_after(after)?;
        let second = self.next_after(first)?;
        (second - first).to_std().ok()
    }

    /// The latest instant at or before `at`, if there is one.
    pub(crate) fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = at
            .duration_trunc(TimeDelta::seconds(1))
            .ok()?
            .with_timezone(&self.zone);
        let previous = self
            .cron
            .as_ref()?
            .find_previous_occurrence(&start, true)
            .ok()?;
        Some(previous.with_timezone(&Utc))
    }

    /// The next `count` instants strictly after `after`.
    pub(crate) fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
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

        _ => {
            return Err(format!(
                "unknown macro {trimmed:?}: expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @reboot"
            ));
        }
    };
    Ok(expanded.to_string())
}

/// An instant as replicron writes it: RFC 3339, UTC, milliseconds.
pub(crate) fn fmt_instant(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // @reboot is a schedule with no instant: a run at each start (the
        // config allows it for run_on = "every" jobs only).
        let at_start = Schedule::parse("@REBOOT", Tz::UTC).expect("@reboot");
        assert!(at_start.is_at_start());
        assert_eq!(at_start.next_after(utc("2027-01-01T00:00:00Z")), None);
        assert!(
            !Schedule::parse("@daily", Tz::UTC)
                .expect("valid")
                .is_at_start()
        );
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
    #[test]
    fn a_jittered_start_is_the_same_everywhere_within_the_window_and_spread() {
        let jitter = std::time::Duration::from_secs(300);
        let a = Schedule::parse("0 * * * *", Tz::UTC)
            .expect("valid")
            .with_jitter("report", jitter);
        let b = Schedule::parse("0 * * * *", Tz::UTC)
            .expect("valid")
            .with_jitter("report", jitter);
        let other = Schedule::parse("0 * * * *", Tz::UTC)
            .expect("valid")
            .with_jitter("backup", jitter);
        assert_ne!(a, Schedule::parse("0 * * * *", Tz::UTC).expect("valid"));
        let instants = a.upcoming(utc("2027-01-01T00:00:00Z"), 2000);
        let mut quarters = [0usize; 4];
        let mut differ = 0;
        for t in &instants {
            let start = a.start_of(*t);
            // Every replica (another parse of the same job) agrees.
            assert_eq!(start, b.start_of(*t));
            let delay = start - *t;
            assert!(
                delay >= TimeDelta::zero() && delay < TimeDelta::seconds(300),
                "{t}: {delay}"
            );
            quarters[(delay.num_milliseconds() * 4 / 300_000) as usize] += 1;
            if other.start_of(*t) != start {
                differ += 1;
            }
        }
        // Spread over the window: each quarter holds about a quarter.
        for count in quarters {
            assert!((400..=600).contains(&count), "{quarters:?}");
        }
        // Another job's runs of the same instants start elsewhere.
        assert!(differ > 1990, "{differ}");
        // Without a jitter a run starts at its instant.
        let plain = Schedule::parse("0 * * * *", Tz::UTC).expect("valid");
        assert_eq!(plain.start_of(instants[0]), instants[0]);
        assert_eq!(
            plain
                .with_jitter("report", std::time::Duration::ZERO)
                .jitter(),
            TimeDelta::zero()
        );
    }

    #[test]
    fn the_shortest_interval_is_found_over_irregular_schedules() {
        let shortest = |expression: &str| {
            Schedule::parse(expression, "Europe/Berlin".parse().expect("zone"))
                .expect("valid")
                .shortest_interval(utc("2027-01-01T00:00:00Z"))
        };
        let secs = std::time::Duration::from_secs;
        assert_eq!(shortest("*/15 * * * *"), Some(secs(900)));
        assert_eq!(shortest("0 9,10 * * mon"), Some(secs(3600)));
        // A daily 02:30 falls in the spring-forward gap once a year and
        // fires at 03:00 instead: 23.5 hours after the day before's.
        assert_eq!(shortest("30 2 * * *"), Some(secs(23 * 3600 + 1800)));
        assert_eq!(shortest("* * * * * *"), Some(secs(1)));
    }
}
