//! When jobs fire: cron expressions evaluated in a job's time zone
//! ([`Schedule`]), the clocks instants are read on ([`clock`]), and the
//! [`Ticker`] that sleeps until each instant.
//!
//! Expressions are parsed by croner. What crontab(5) means is decided here:
//! 5 fields as crontab, 6 with a leading seconds field, the `@` macros, and
//! Vixie cron's day rule (a day matches when either the day-of-month or the
//! day-of-week matches, unless one of them starts with `*`, in which case
//! both must).
//!
//! Daylight saving follows cron(8) (`docs/design.md`, "Schedules and
//! daylight saving"), decided by the minute and hour fields (and the
//! seconds field, when there is one). A schedule with no `*` in them (not
//! even a step over `*`, such as `*/2`; ranges, lists and steps over ranges
//! such as `0-23/2` count as fixed) fires each matching local time once: a
//! time in a spring-forward gap at the gap's end, the first instant after
//! it, and a time that happens twice at its first occurrence; two local
//! times that land on the same instant are one instant. The day fields of a
//! time in a gap are tested against its own date, even when the gap crosses
//! midnight. A schedule with a `*` in one of those fields stays on the real
//! timeline: it fires at every instant whose local time matches, twice
//! through a fall-back overlap and never in a gap.

mod alarm;
pub(crate) mod calendar;
mod clock;
pub(crate) mod rules;
mod ticker;

#[cfg(test)]
pub(crate) use self::clock::TokioClock;
pub(crate) use self::clock::{Clock, DatabaseClock, Offset, SystemClock};
pub(crate) use self::rules::{DstGap, DstRepeat, Excluded, Rules};
pub(crate) use self::ticker::{LATE_LIMIT, Ticker};

use std::sync::Arc;

use chrono::{
    DateTime, DurationRound, LocalResult, NaiveDateTime, Offset as _, TimeDelta, TimeZone, Utc,
};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// The schedule of a run at each start of the replica.
const AT_START: &str = "@reboot";
/// The schedule of a job that runs only when asked.
const MANUAL: &str = "@manual";
/// How the schedule of a job that runs after others starts.
const AFTER: &str = "after ";
/// How the schedule of a job that runs once, at one instant, starts.
const AT: &str = "at ";

/// A parsed cron expression in a time zone, and the job's jitter: how a
/// run's start follows its instant.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    expression: String,
    zone: Tz,
    /// `None` for `@reboot` (no instant but the replica's start),
    /// `@manual` (none at all) and `at` (one instant). Shared by the
    /// schedule's clones: a parsed expression is some kilobytes.
    cron: Option<Arc<Cron>>,
    /// The one instant of a job written `at = "..."` (whole seconds): its
    /// only instant, whatever the zone.
    once: Option<DateTime<Utc>>,
    timeline: Timeline,
    jitter: Option<Jitter>,
    /// A job's other expressions (`schedule = [...]`), each with its own
    /// timeline: its instants are the union, an instant two share once.
    more: Arc<[Schedule]>,
    /// The params this expression's instants run with (`schedule = [{
    /// cron, timezone, params }]`), resolved by the config against the
    /// job's declared ones; `None` where it gives none (the job's defaults).
    params: Option<Arc<EntryParams>>,
    /// Its daylight-saving policy, window and calendars.
    rules: Arc<Rules>,
}

/// The params an expression of a schedule gives its instants.
pub(crate) type EntryParams = std::collections::BTreeMap<String, String>;

/// One expression of a `schedule = [...]`: a plain string, or a table
/// with its own time zone and params.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// The cron expression or macro.
    pub(crate) cron: String,
    /// Its time zone: the job's, unless the table names one.
    pub(crate) zone: Tz,
    /// Whether the table named its zone (shown with the expression).
    pub(crate) own_zone: bool,
    /// The params the table gives its instants, as written.
    pub(crate) params: Option<EntryParams>,
}

impl Entry {
    /// A plain expression in the job's zone.
    pub(crate) fn plain(cron: &str, zone: Tz) -> Entry {
        Entry {
            cron: cron.to_string(),
            zone,
            own_zone: false,
            params: None,
        }
    }

    /// How it is shown: the expression, then its zone (where `zone` says
    /// so) and its params, if any (`0 9 * * 1-5 (America/New_York;
    /// region=us)`).
    fn text(&self, zone: bool) -> String {
        let mut notes: Vec<String> = Vec::new();
        if zone {
            notes.push(self.zone.name().to_string());
        }
        if let Some(params) = &self.params {
            notes.push(
                params
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        let cron = self.cron.trim();
        if notes.is_empty() {
            cron.to_string()
        } else {
            format!("{cron} ({})", notes.join("; "))
        }
    }
}

/// How the local times a schedule matches become instants, as cron(8)
/// decides it: by whether the minute and hour fields (and a seconds field)
/// hold a `*`. Read from the expression, so it needs no part in equality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timeline {
    /// Fixed times (`30 2 * * *`, `0 2,4 * * *`, `0 0-23/2 * * *`): each
    /// matching local time fires once, a time in a gap at the gap's end and
    /// a repeated time at its first occurrence.
    Local,
    /// A `*` in the seconds, minute or hour field (`0 * * * *`, `*/5 * * *
    /// *`): every real instant whose local time matches, so twice through a
    /// fall-back overlap and never in a gap.
    Real,
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
            && self.rules == other.rules
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
        for special in [AT_START, MANUAL] {
            if expression.trim().eq_ignore_ascii_case(special) {
                return Ok(Schedule::without_instants(special.to_string(), zone));
            }
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
        // The seconds (if any), minute and hour fields: a job that runs every
        // so many of them is about elapsed time, and one that names them is
        // about the clock on the wall (cron(8) tests for a leading `*`; a `*`
        // later in a list means every value just the same).
        let time_fields = &fields[..fields.len() - 3];
        let timeline = if time_fields.iter().any(|field| field.contains('*')) {
            Timeline::Real
        } else {
            Timeline::Local
        };
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
            once: None,
            timeline,
            jitter: None,
            more: Arc::default(),
            params: None,
            rules: Arc::default(),
        };
        // A valid pattern that never matches (`0 0 30 2 *`) is a mistake,
        // not a job that silently never runs.
        let probe = DateTime::from_timestamp(0, 0).unwrap_or_default();
        if schedule.next_after(probe).is_none() {
            return Err(format!("schedule {expression:?} never fires"));
        }
        Ok(schedule)
    }

    /// Parses several expressions (`schedule = ["0 9 * * 1-5", "0 12 * * 6"]`,
    /// each perhaps a table with its own zone and params) into one schedule
    /// whose instants are the union of theirs; an instant two of them
    /// share is one instant, with the first one's params. `@reboot` and
    /// `@manual` stand alone.
    pub(crate) fn parse_all(entries: &[Entry]) -> Result<Self, String> {
        let one = |entry: &Entry| -> Result<Schedule, String> {
            let mut schedule = Schedule::parse(&entry.cron, entry.zone)?;
            schedule.params = entry.params.clone().map(Arc::new);
            Ok(schedule)
        };
        let (first, rest) = match entries {
            [] => return Err("schedule = [] holds no expression".to_string()),
            [only] if !only.own_zone && only.params.is_none() => return one(only),
            [first, rest @ ..] => (first, rest),
        };
        let mut base = one(first)?;
        let more = rest.iter().map(one).collect::<Result<Vec<_>, _>>()?;
        if base.cron.is_none() || more.iter().any(|s| s.cron.is_none()) {
            return Err(format!(
                "{AT_START} and {MANUAL} stand alone: they cannot be one of several schedules, \
                 nor given a time zone or params of their own"
            ));
        }
        // Where one entry names its zone, every entry shows its own: the
        // text (which replicas compare, as part of the job's definition)
        // then says when each fires.
        let zones = entries.iter().any(|e| e.own_zone);
        base.expression = entries
            .iter()
            .map(|e| e.text(zones))
            .collect::<Vec<_>>()
            .join(" | ");
        base.more = more.into();
        Ok(base)
    }

    /// Its expressions in the order written: this one, then the others.
    fn entries(&self) -> impl Iterator<Item = &Schedule> {
        std::iter::once(self).chain(self.more.iter())
    }

    /// The params each expression gives, in the order written (`None`
    /// where it gives none).
    pub(crate) fn entry_params(&self) -> Vec<Option<&EntryParams>> {
        self.entries().map(|e| e.params.as_deref()).collect()
    }

    /// This schedule with each expression's params replaced by
    /// `resolved`, in the order written (the config resolves them against
    /// the job's declared params: its defaults filled in).
    pub(crate) fn with_entry_params(mut self, resolved: Vec<Option<EntryParams>>) -> Self {
        let mut resolved = resolved.into_iter();
        self.params = resolved.next().flatten().map(Arc::new);
        self.more = self
            .more
            .iter()
            .map(|other| Schedule {
                params: resolved.next().flatten().map(Arc::new),
                ..other.clone()
            })
            .collect();
        self
    }

    /// Whether some expression gives its instants params of its own.
    pub(crate) fn gives_params(&self) -> bool {
        self.entries().any(|e| e.params.is_some())
    }

    /// The params `instant` runs with: those of the first expression, in
    /// the order written, that has it as an instant; `None` when that one
    /// gives none (the job's defaults apply).
    pub(crate) fn params_at(&self, instant: DateTime<Utc>) -> Option<Arc<EntryParams>> {
        if !self.gives_params() {
            return None;
        }
        self.entries()
            .find(|e| e.is_own_instant(instant))
            .and_then(|e| e.params.clone())
    }

    /// Whether `instant` is one of this expression's own (not the other
    /// expressions').
    fn is_own_instant(&self, instant: DateTime<Utc>) -> bool {
        self.next_after_one(instant - TimeDelta::milliseconds(1)) == Some(instant)
    }

    /// The first instant after `after`, within `horizon` of it, that two
    /// expressions giving different params share, with their positions
    /// in the order written (from 1): the run takes the first one's
    /// params. Each expression's instants are followed at most
    /// `SHARED_STEPS` ahead.
    pub(crate) fn shared_instant(
        &self,
        after: DateTime<Utc>,
        horizon: TimeDelta,
    ) -> Option<(usize, usize, DateTime<Utc>)> {
        const SHARED_STEPS: usize = 5_000;
        let entries: Vec<&Schedule> = self.entries().collect();
        let end = after + horizon;
        let mut found: Option<(usize, usize, DateTime<Utc>)> = None;
        for (i, a) in entries.iter().enumerate() {
            for (j, b) in entries.iter().enumerate().skip(i + 1) {
                if a.params == b.params {
                    continue;
                }
                let (mut x, mut y) = (a.next_after_one(after), b.next_after_one(after));
                for _ in 0..SHARED_STEPS {
                    match (x, y) {
                        (Some(p), Some(q)) if p == q && p <= end && self.excluded(p).is_none() => {
                            if found.is_none_or(|(_, _, t)| p < t) {
                                found = Some((i + 1, j + 1, p));
                            }
                            break;
                        }
                        // An instant an expression shares that is
                        // excluded (a calendar, the window) runs for none.
                        (Some(p), Some(q)) if p == q => {
                            x = a.next_after_one(p);
                            y = b.next_after_one(q);
                        }
                        // The one behind jumps to its first instant at or
                        // after the other's.
                        (Some(p), Some(q)) if p.min(q) <= end => {
                            if p < q {
                                x = a.next_after_one(q - TimeDelta::milliseconds(1));
                            } else {
                                y = b.next_after_one(p - TimeDelta::milliseconds(1));
                            }
                        }
                        _ => break,
                    }
                }
            }
        }
        found
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

    /// This schedule under `rules`: its fixed times' daylight-saving
    /// policy, its window and its calendars.
    pub(crate) fn with_rules(mut self, rules: Rules) -> Self {
        let rules = Arc::new(rules);
        self.more = self
            .more
            .iter()
            .map(|other| Schedule {
                rules: rules.clone(),
                ..other.clone()
            })
            .collect();
        self.rules = rules;
        self
    }

    /// Its daylight-saving policy, window and calendars.
    pub(crate) fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Whether its window has closed by `now`, or its one instant (`at`)
    /// has come: no instant after it.
    pub(crate) fn has_ended(&self, now: DateTime<Utc>) -> bool {
        let closed = self.once.is_some() || self.rules.not_after.is_some_and(|end| end < now);
        closed && self.next_after(now).is_none()
    }

    /// Whether its instants follow the local clock (fixed times), where
    /// the daylight-saving policy applies: for any of its expressions.
    pub(crate) fn has_fixed_times(&self) -> bool {
        std::iter::once(self)
            .chain(self.more.iter())
            .any(|s| s.cron.is_some() && s.timeline == Timeline::Local)
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
        self.expression == AT_START
    }

    /// Whether this is `@manual`: no instant at all; its runs are asked for
    /// (`trigger`, the API, the dashboard).
    pub(crate) fn is_manual(&self) -> bool {
        self.expression == MANUAL
    }

    /// The schedule of a job that runs after `parents` end: no instant of
    /// its own (its instants are its parents'), in `zone` (its calendars'
    /// dates are dates there).
    pub(crate) fn after(parents: &[String], zone: Tz) -> Self {
        Schedule::without_instants(format!("{AFTER}{}", parents.join(", ")), zone)
    }

    /// The schedule of a job that runs once, at `text` (RFC 3339 with an
    /// offset, whole seconds), shown in `zone`. The instant is the same
    /// whatever the zone: the offset says which it is.
    pub(crate) fn once(text: &str, zone: Tz) -> Result<Self, String> {
        let text = text.trim();
        let instant = DateTime::parse_from_rfc3339(text).map_err(|e| {
            let local = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").is_ok()
                || NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").is_ok();
            if local {
                format!(
                    "at {text:?} has no offset: write the instant with its offset to UTC, as \
                     \"2027-01-15T03:00:00+01:00\" or \"2027-01-15T02:00:00Z\" (a local time is \
                     not read in the job's timezone, where it may happen twice or never)"
                )
            } else {
                format!(
                    "at {text:?} is not an RFC 3339 time ({e}): write it as \
                     \"2027-01-15T03:00:00+01:00\" or \"2027-01-15T02:00:00Z\""
                )
            }
        })?;
        if instant.timestamp_subsec_nanos() != 0 {
            return Err(format!(
                "at {text:?} has a fraction of a second: instants are whole seconds"
            ));
        }
        let mut schedule = Schedule::without_instants(format!("{AT}{text}"), zone);
        schedule.once = Some(instant.with_timezone(&Utc));
        Ok(schedule)
    }

    /// The one instant of a job that runs once (`at`).
    pub(crate) fn once_at(&self) -> Option<DateTime<Utc>> {
        self.once
    }

    /// A schedule with no instant of its own, written `expression`.
    fn without_instants(expression: String, zone: Tz) -> Self {
        Schedule {
            expression,
            zone,
            cron: None,
            once: None,
            timeline: Timeline::Real,
            jitter: None,
            more: Arc::default(),
            params: None,
            rules: Arc::default(),
        }
    }

    /// Whether this is a dependent job's: its instants are its parents'.
    pub(crate) fn is_after(&self) -> bool {
        self.cron.is_none() && self.once.is_none() && self.expression.starts_with(AFTER)
    }

    /// The expression as written in the config.
    pub(crate) fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone the expression is evaluated in.
    pub(crate) fn zone(&self) -> Tz {
        self.zone
    }

    /// The instants after `after` for which `within` holds, in order up to
    /// the first for which it does not: the first, the last and how many,
    /// counting at most `limit`; `None` if there is none.
    pub(crate) fn instants_while(
        &self,
        after: DateTime<Utc>,
        limit: usize,
        within: impl Fn(DateTime<Utc>) -> bool,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>, usize)> {
        let (mut first, mut last, mut count) = (None, None, 0);
        let mut cursor = after;
        while count < limit
            && let Some(next) = self.next_after(cursor)
            && within(next)
        {
            first.get_or_insert(next);
            last = Some(next);
            count += 1;
            cursor = next;
        }
        Some((first?, last?, count))
    }

    /// The first instant strictly after `after` (which may hold a fraction
    /// of a second).
    ///
    /// For a fixed-time schedule that is the first instant of the first
    /// matching local time the zone's clock has not yet shown by `after`:
    /// see [`Schedule::first_instant_at`] and [`Schedule::wall_reached`].
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = after;
        for _ in 0..MAX_EXCLUDED_STEPS {
            let next = self.next_of_expressions(cursor)?;
            match self.excluded(next) {
                None => return Some(next),
                Some(Excluded::AfterWindow) => return None,
                Some(Excluded::BeforeWindow) => {
                    let from = self.rules.not_before?;
                    cursor = next.max(from - TimeDelta::milliseconds(1));
                }
                // Every instant of that local date is excluded alike.
                Some(_) => cursor = next.max(self.end_of_local_date(next)?),
            }
        }
        None
    }

    /// Why `instant`, an instant of the expressions, is not the
    /// schedule's, if it is not.
    pub(crate) fn excluded(&self, instant: DateTime<Utc>) -> Option<Excluded> {
        if !self.rules.excludes_any() {
            return None;
        }
        let date = instant.with_timezone(&self.zone).date_naive();
        self.rules.excluded(instant, date)
    }

    /// The last millisecond of `instant`'s local date.
    fn end_of_local_date(&self, instant: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let next = instant.with_timezone(&self.zone).date_naive().succ_opt()?;
        Some(self.start_of_local_date(next)? - TimeDelta::milliseconds(1))
    }

    /// The first instant of the local date `date` (its midnight, or the
    /// end of a gap that swallowed it).
    fn start_of_local_date(&self, date: chrono::NaiveDate) -> Option<DateTime<Utc>> {
        let midnight = date.and_time(chrono::NaiveTime::MIN);
        match self.zone.from_local_datetime(&midnight) {
            LocalResult::Single(instant) | LocalResult::Ambiguous(instant, _) => {
                Some(instant.with_timezone(&Utc))
            }
            LocalResult::None => self.gap_end(midnight),
        }
    }

    /// The first instant strictly after `after` of any expression, before
    /// the window and calendars.
    fn next_of_expressions(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let own = self.next_after_one(after);
        self.more
            .iter()
            .filter_map(|other| other.next_after_one(after))
            .chain(own)
            .min()
    }

    /// [`Schedule::next_after`] of this expression alone.
    fn next_after_one(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Instants are whole seconds: the second `after` is in is itself not
        // after it, and the search from it is exclusive.
        let after = after.duration_trunc(TimeDelta::seconds(1)).ok()?;
        if let Some(once) = self.once {
            return (once > after).then_some(once);
        }
        let cron = self.cron.as_ref()?;
        match self.timeline {
            Timeline::Real => {
                let start = after.with_timezone(&self.zone);
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.with_timezone(&Utc))
            }
            Timeline::Local => match self.rules.dst_repeat {
                DstRepeat::First => self.next_local(cron, after, Pass::First),
                DstRepeat::Last => self.next_local(cron, after, Pass::Last),
                DstRepeat::Both => [Pass::First, Pass::Last]
                    .into_iter()
                    .filter_map(|pass| self.next_local(cron, after, pass))
                    .min(),
            },
        }
    }

    /// The next instant after `after` of a fixed-time expression, each
    /// local time repeated by a fall-back taken at its `pass`.
    fn next_local(&self, cron: &Cron, after: DateTime<Utc>, pass: Pass) -> Option<DateTime<Utc>> {
        // On a clock without daylight saving, croner lists every local
        // time once, those in a gap included, by the date they bear.
        let mut wall = cron
            .find_next_occurrence(&self.wall_reached(after, pass)?, false)
            .ok()?;
        // A time in a gap skipped (`dst_gap = "skip"`): the next one.
        for _ in 0..MAX_EXCLUDED_STEPS {
            if let Some(instant) = self.instant_at(wall, pass) {
                return Some(instant);
            }
            wall = cron.find_next_occurrence(&wall, false).ok()?;
        }
        None
    }

    /// The time between the first two instants after `after` (the
    /// schedule's interval, for a regular one).
    pub(crate) fn interval_after(&self, after: DateTime<Utc>) -> Option<std::time::Duration> {
        let first = self.next_after(after)?;
        let second = self.next_after(first)?;
        (second - first).to_std().ok()
    }

    /// The latest instant at or before `at`, if there is one: the latest
    /// that [`Schedule::next_after`] gives at or before `at`.
    pub(crate) fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut cursor = at;
        for _ in 0..MAX_EXCLUDED_STEPS {
            let latest = self.latest_of_expressions(cursor)?;
            match self.excluded(latest) {
                None => return Some(latest),
                Some(Excluded::BeforeWindow) => return None,
                Some(Excluded::AfterWindow) => {
                    cursor = latest.min(self.rules.not_after?);
                }
                Some(_) => {
                    let date = latest.with_timezone(&self.zone).date_naive();
                    cursor =
                        latest.min(self.start_of_local_date(date)? - TimeDelta::milliseconds(1));
                }
            }
        }
        None
    }

    /// The latest instant at or before `at` of any expression, before the
    /// window and calendars.
    fn latest_of_expressions(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let own = self.latest_one(at);
        self.more
            .iter()
            .filter_map(|other| other.latest_one(at))
            .chain(own)
            .max()
    }

    /// [`Schedule::latest_at_or_before`] of this expression alone.
    fn latest_one(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = at.duration_trunc(TimeDelta::seconds(1)).ok()?;
        if let Some(once) = self.once {
            return (once <= at).then_some(once);
        }
        let cron = self.cron.as_ref()?;
        match self.timeline {
            Timeline::Real => {
                let start = at.with_timezone(&self.zone);
                let previous = cron.find_previous_occurrence(&start, true).ok()?;
                Some(previous.with_timezone(&Utc))
            }
            Timeline::Local => match self.rules.dst_repeat {
                DstRepeat::First => self.latest_local(cron, at, Pass::First),
                DstRepeat::Last => self.latest_local(cron, at, Pass::Last),
                DstRepeat::Both => [Pass::First, Pass::Last]
                    .into_iter()
                    .filter_map(|pass| self.latest_local(cron, at, pass))
                    .max(),
            },
        }
    }

    /// The latest instant at or before `at` of a fixed-time expression,
    /// each repeated local time taken at its `pass`.
    fn latest_local(&self, cron: &Cron, at: DateTime<Utc>, pass: Pass) -> Option<DateTime<Utc>> {
        let mut wall = cron
            .find_previous_occurrence(&self.wall_reached(at, pass)?, true)
            .ok()?;
        for _ in 0..MAX_EXCLUDED_STEPS {
            if let Some(instant) = self.instant_at(wall, pass) {
                return Some(instant);
            }
            wall = cron.find_previous_occurrence(&wall, false).ok()?;
        }
        None
    }

    /// The instant a fixed-time expression fires for the local time
    /// `wall`, under the daylight-saving policy: a repeated time at its
    /// `pass`, a time in a gap at the gap's end (`shift`) or never
    /// (`skip`).
    fn instant_at(&self, wall: NaiveDateTime, pass: Pass) -> Option<DateTime<Utc>> {
        match (self.zone.from_local_datetime(&wall), pass) {
            (LocalResult::Ambiguous(_, later), Pass::Last) => Some(later.with_timezone(&Utc)),
            (LocalResult::None, _) if self.rules.dst_gap == DstGap::Skip => None,
            _ => self.first_instant_at(wall),
        }
    }

    /// The instant a fixed-time schedule fires for the local time `wall`:
    /// the first instant the zone's clock shows `wall` or later. That is
    /// `wall` itself where it happens once, its first occurrence where the
    /// clock goes back over it, and the end of the gap (the first instant
    /// after it) where the clock jumps over it.
    ///
    /// Seen from the instants, this is what makes the rule consistent: local
    /// times in order give instants in order (equal ones being one instant),
    /// so the instants after `t` are those of the local times the clock has
    /// not shown by `t`.
    fn first_instant_at(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.zone.from_local_datetime(&wall) {
            LocalResult::Single(instant) | LocalResult::Ambiguous(instant, _) => {
                Some(instant.with_timezone(&Utc))
            }
            LocalResult::None => self.gap_end(wall),
        }
    }

    /// The first instant after the gap that the local time `wall` is in:
    /// that of the first local time after `wall` that exists.
    fn gap_end(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        let exists = |wall: NaiveDateTime| self.zone.from_local_datetime(&wall).earliest();
        // Gaps are mostly an hour, the longest a day (Samoa's 2011-12-30), and
        // not always whole minutes: widen a bracket until its end exists (two
        // days at most), then halve it to the second.
        let mut missing = wall;
        let mut step = TimeDelta::minutes(1);
        let mut present = loop {
            let probe = missing.checked_add_signed(step)?;
            if exists(probe).is_some() {
                break probe;
            }
            if step > TimeDelta::days(1) {
                return None;
            }
            missing = probe;
            step = step * 2;
        };
        while (present - missing).num_seconds() > 1 {
            let middle = missing + TimeDelta::seconds((present - missing).num_seconds() / 2);
            if exists(middle).is_some() {
                present = middle;
            } else {
                missing = middle;
            }
        }
        exists(present).map(|instant| instant.with_timezone(&Utc))
    }

    /// The latest local time (whole seconds) the zone's clock has shown by
    /// `at` (a whole second): `at`'s own local time, except in the second
    /// pass of a fall-back overlap, when the clock showed later times before
    /// it went back: the last second before the change.
    ///
    /// Taking each repeated time at its second occurrence (`pass` is
    /// [`Pass::Last`]), the clock has "reached" a local time once its last
    /// occurrence has passed: in the first pass of an overlap, the time
    /// just before the overlap's first.
    fn wall_reached(&self, at: DateTime<Utc>, pass: Pass) -> Option<NaiveDateTime> {
        let local = at.with_timezone(&self.zone);
        let wall = local.naive_local();
        let LocalResult::Ambiguous(earlier, later) = self.zone.from_local_datetime(&wall) else {
            return Some(wall);
        };
        if pass == Pass::Last {
            if earlier != local {
                return Some(wall);
            }
            // The change lies in (at, later]: the first second on the later
            // offset shows the overlap's first local time.
            let offset = later.offset().fix();
            let (mut before, mut since) = (at.timestamp(), later.timestamp());
            while since - before > 1 {
                let middle = before + (since - before) / 2;
                let instant = DateTime::from_timestamp(middle, 0)?;
                if self
                    .zone
                    .offset_from_utc_datetime(&instant.naive_utc())
                    .fix()
                    == offset
                {
                    since = middle;
                } else {
                    before = middle;
                }
            }
            let first = DateTime::from_timestamp(since, 0)?
                .with_timezone(&self.zone)
                .naive_local();
            return first.checked_sub_signed(TimeDelta::seconds(1));
        }
        if later != local {
            return Some(wall);
        }
        // The change lies in (earlier, at]: bisect to the last second on the
        // earlier offset.
        let offset = local.offset().fix();
        let offset_at = |second: i64| {
            DateTime::from_timestamp(second, 0).map(|instant| {
                self.zone
                    .offset_from_utc_datetime(&instant.naive_utc())
                    .fix()
            })
        };
        let (mut before, mut since) = (earlier.timestamp(), at.timestamp());
        while since - before > 1 {
            let middle = before + (since - before) / 2;
            if offset_at(middle)? == offset {
                since = middle;
            } else {
                before = middle;
            }
        }
        DateTime::from_timestamp(before, 0)
            .map(|instant| instant.with_timezone(&self.zone).naive_local())
    }

    /// The next change of its zone's offset within a year after `after`,
    /// and what its daylight-saving policy makes of it, in lines for
    /// `check`: `None` for a zone that changes none, or a schedule on the
    /// real timeline (no policy applies).
    pub(crate) fn next_transition(&self, after: DateTime<Utc>) -> Option<Vec<String>> {
        if !self.has_fixed_times() {
            return None;
        }
        let offset_at = |t: DateTime<Utc>| {
            self.zone
                .offset_from_utc_datetime(&t.naive_utc())
                .fix()
                .local_minus_utc()
        };
        let mut hour = after;
        let end = after + TimeDelta::days(366);
        let (old, new) = loop {
            if hour > end {
                return None;
            }
            let next = hour + TimeDelta::hours(1);
            if offset_at(hour) != offset_at(next) {
                break (hour, next);
            }
            hour = next;
        };
        let (before, after_offset) = (offset_at(old), offset_at(new));
        let (mut low, mut high) = (old.timestamp(), new.timestamp());
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if offset_at(DateTime::from_timestamp(middle, 0)?) == before {
                low = middle;
            } else {
                high = middle;
            }
        }
        let at = DateTime::from_timestamp(high, 0)?;
        let shift = TimeDelta::seconds(i64::from((after_offset - before).abs()));
        let wall_before = (at + TimeDelta::seconds(i64::from(before))).naive_utc();
        let wall_after = (at + TimeDelta::seconds(i64::from(after_offset))).naive_utc();
        let fmt_wall = |w: NaiveDateTime| w.format("%Y-%m-%d %H:%M").to_string();
        let span = humantime::format_duration(shift.to_std().ok()?).to_string();
        let mut lines = Vec::new();
        if after_offset > before {
            let last = wall_after - TimeDelta::minutes(1);
            lines.push(format!(
                "next transition {}: clocks go forward {span}, from {} to {}",
                fmt_instant(at),
                fmt_wall(wall_before),
                fmt_wall(wall_after)
            ));
            lines.push(match self.rules.dst_gap {
                DstGap::Shift => format!(
                    "dst_gap = {:?}: a time from {} to {} fires once, at {}",
                    self.rules.dst_gap.word(),
                    wall_before.format("%H:%M"),
                    last.format("%H:%M"),
                    wall_after.format("%H:%M")
                ),
                DstGap::Skip => format!(
                    "dst_gap = {:?}: a time from {} to {} does not fire that day",
                    self.rules.dst_gap.word(),
                    wall_before.format("%H:%M"),
                    last.format("%H:%M")
                ),
            });
        } else {
            let last = wall_before - TimeDelta::minutes(1);
            lines.push(format!(
                "next transition {}: clocks go back {span}, from {} to {}",
                fmt_instant(at),
                fmt_wall(wall_before),
                fmt_wall(wall_after)
            ));
            let times = format!(
                "a time from {} to {}",
                wall_after.format("%H:%M"),
                last.format("%H:%M")
            );
            lines.push(match self.rules.dst_repeat {
                DstRepeat::First => format!(
                    "dst_repeat = {:?}: {times} happens twice and fires at the first (before the clocks go back)",
                    self.rules.dst_repeat.word()
                ),
                DstRepeat::Last => format!(
                    "dst_repeat = {:?}: {times} happens twice and fires at the second (after the clocks go back)",
                    self.rules.dst_repeat.word()
                ),
                DstRepeat::Both => {
                    format!(
                        "dst_repeat = {:?}: {times} happens twice and fires at both",
                        self.rules.dst_repeat.word()
                    )
                }
            });
        }
        let around: Vec<String> = self
            .upcoming(at - TimeDelta::hours(12), 400)
            .into_iter()
            .take_while(|t| *t <= at + TimeDelta::hours(12))
            .map(|t| {
                let local = t.with_timezone(&self.zone);
                format!("{}", local.format("%H:%M%:z"))
            })
            .collect();
        lines.push(match around.len() {
            0 => "its instants within 12 hours of it: none".to_string(),
            n if n > 12 => format!("its instants within 12 hours of it: {n}"),
            _ => format!("its instants within 12 hours of it: {}", around.join(" ")),
        });
        Some(lines)
    }

    /// The next `count` instants strictly after `after`, and before and
    /// among them the first instant of each local date the calendars
    /// exclude (those of its date are excluded alike; at most `count` of
    /// them), the first instant `not_before` excludes, and the first after
    /// `not_after`.
    pub(crate) fn upcoming_marked(
        &self,
        after: DateTime<Utc>,
        count: usize,
    ) -> Vec<(DateTime<Utc>, Option<Excluded>)> {
        let mut listed = Vec::new();
        let (mut runs, mut excluded_dates) = (0, 0);
        let mut cursor = after;
        for _ in 0..MAX_EXCLUDED_STEPS {
            if runs >= count {
                break;
            }
            let Some(next) = self.next_of_expressions(cursor) else {
                break;
            };
            let excluded = self.excluded(next);
            cursor = match &excluded {
                None => {
                    runs += 1;
                    next
                }
                Some(Excluded::AfterWindow) => {
                    listed.push((next, excluded));
                    break;
                }
                Some(Excluded::BeforeWindow) => match self.rules.not_before {
                    Some(from) => next.max(from - TimeDelta::milliseconds(1)),
                    None => break,
                },
                Some(_) => match self.end_of_local_date(next) {
                    Some(end) => {
                        excluded_dates += 1;
                        if excluded_dates > count {
                            cursor = next.max(end);
                            continue;
                        }
                        next.max(end)
                    }
                    None => break,
                },
            };
            listed.push((next, excluded));
        }
        listed
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

/// Which occurrence of a local time a fall-back shows twice a fixed-time
/// expression fires at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    First,
    Last,
}

/// The most instants (or, for calendars, dates) skipped in one search for
/// the next or latest instant: ten years of excluded dates, or of times in
/// gaps.
const MAX_EXCLUDED_STEPS: usize = 4000;

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
                "unknown macro {trimmed:?}: expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @reboot or @manual"
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
    use chrono::{Datelike as _, Timelike as _};

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

    /// Fixed times in lists and ranges: Europe/Berlin 2030 springs forward
    /// on 03-31 (02:00 CET -> 03:00 CEST, at 01:00Z) and falls back on 10-27
    /// (03:00 CEST -> 02:00 CET, at 01:00Z); America/New_York falls back on
    /// 2030-11-03 (02:00 EDT -> 01:00 EST, at 06:00Z).
    #[test]
    fn fixed_times_in_lists_and_ranges_fire_once_through_transitions() {
        // 02:00 happens twice: once, at 02:00 CEST.
        assert_eq!(
            next_n("0 2,4 * * *", "Europe/Berlin", "2030-10-26T12:00:00Z", 4),
            [
                "2030-10-27T00:00:00Z",
                "2030-10-27T03:00:00Z",
                "2030-10-28T01:00:00Z",
                "2030-10-28T03:00:00Z"
            ]
        );
        // 02:00 does not exist: at the gap's end, 03:00 CEST.
        assert_eq!(
            next_n("0 2,4 * * *", "Europe/Berlin", "2030-03-30T12:00:00Z", 4),
            [
                "2030-03-31T01:00:00Z",
                "2030-03-31T02:00:00Z",
                "2030-04-01T00:00:00Z",
                "2030-04-01T02:00:00Z"
            ]
        );
        assert_eq!(
            next_n("15,45 2 * * *", "Europe/Berlin", "2030-10-26T12:00:00Z", 4),
            [
                "2030-10-27T00:15:00Z",
                "2030-10-27T00:45:00Z",
                "2030-10-28T01:15:00Z",
                "2030-10-28T01:45:00Z"
            ]
        );
        assert_eq!(
            next_n("0 1-3 * * *", "Europe/Berlin", "2030-10-26T12:00:00Z", 4),
            [
                "2030-10-26T23:00:00Z",
                "2030-10-27T00:00:00Z",
                "2030-10-27T02:00:00Z",
                "2030-10-28T00:00:00Z"
            ]
        );
        // 02:00 lands on the gap's end, which is 03:00: one instant.
        assert_eq!(
            next_n("0 1-3 * * *", "Europe/Berlin", "2030-03-30T12:00:00Z", 3),
            [
                "2030-03-31T00:00:00Z",
                "2030-03-31T01:00:00Z",
                "2030-03-31T23:00:00Z"
            ]
        );
        assert_eq!(
            next_n(
                "30 1,13 * * *",
                "America/New_York",
                "2030-11-02T12:00:00Z",
                4
            ),
            [
                "2030-11-02T17:30:00Z",
                "2030-11-03T05:30:00Z",
                "2030-11-03T18:30:00Z",
                "2030-11-04T06:30:00Z"
            ]
        );
    }

    /// America/Nuuk springs forward from Saturday 2026-03-28 23:00 (-02) to
    /// Sunday 00:00 (-01), at 01:00Z: Saturday's 23:30 never happens, and
    /// fires at the gap's end although that is Sunday.
    #[test]
    fn a_gap_across_midnight_keeps_the_day_of_the_missing_time() {
        assert_eq!(
            next_n("30 23 * * 6", "America/Nuuk", "2026-03-21T12:00:00Z", 3),
            [
                "2026-03-22T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-04-05T00:30:00Z"
            ]
        );
        assert_eq!(
            next_n("30 23 * * *", "America/Nuuk", "2026-03-27T12:00:00Z", 3),
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z"
            ]
        );
        assert_eq!(
            next_n("30 23 28 3 *", "America/Nuuk", "2026-03-01T00:00:00Z", 2),
            ["2026-03-29T01:00:00Z", "2027-03-29T00:30:00Z"]
        );
        // Sunday's 23:30 is not Saturday's: the gap's end is not its.
        assert_eq!(
            next_n("30 23 * * 0", "America/Nuuk", "2026-03-28T12:00:00Z", 1),
            ["2026-03-30T00:30:00Z"]
        );
        // Pacific/Apia skipped Friday 2011-12-30 whole (-10 -> +14 at
        // 10:00Z): Friday's times fire at the gap's end, Saturday 00:00.
        assert_eq!(
            next_n("0 12 * * 5", "Pacific/Apia", "2011-12-20T00:00:00Z", 2),
            ["2011-12-23T22:00:00Z", "2011-12-30T10:00:00Z"]
        );
        assert_eq!(
            next_n("0 12 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z", 3),
            [
                "2011-12-29T22:00:00Z",
                "2011-12-30T10:00:00Z",
                "2011-12-30T22:00:00Z"
            ]
        );
    }

    /// A `*` in the seconds, minute or hour field puts a schedule on the
    /// real timeline; Europe/Berlin falls back on 2030-10-27 at 01:00Z.
    #[test]
    fn the_time_fields_decide_between_fixed_and_real_timeline() {
        let berlin = "Europe/Berlin";
        let from = "2030-10-26T21:30:00Z";
        // A step over `*`: 02:00 twice, real hours apart.
        assert_eq!(
            next_n("0 */2 * * *", berlin, from, 4),
            [
                "2030-10-26T22:00:00Z",
                "2030-10-27T00:00:00Z",
                "2030-10-27T01:00:00Z",
                "2030-10-27T03:00:00Z"
            ]
        );
        // A step over a range is fixed: 02:00 once.
        assert_eq!(
            next_n("0 0-23/2 * * *", berlin, from, 3),
            [
                "2030-10-26T22:00:00Z",
                "2030-10-27T00:00:00Z",
                "2030-10-27T03:00:00Z"
            ]
        );
        assert_eq!(
            next_n("@hourly", berlin, "2030-10-26T23:30:00Z", 3),
            [
                "2030-10-27T00:00:00Z",
                "2030-10-27T01:00:00Z",
                "2030-10-27T02:00:00Z"
            ]
        );
        // A `*` minute in a fixed hour: every real minute of both 02:xx.
        let both_passes = schedule("* 2 * * *", berlin).upcoming(utc("2030-10-26T12:00:00Z"), 121);
        assert_eq!(both_passes[0], utc("2030-10-27T00:00:00Z"));
        assert_eq!(both_passes[60], utc("2030-10-27T01:00:00Z"));
        assert_eq!(both_passes[119], utc("2030-10-27T01:59:00Z"));
        assert_eq!(both_passes[120], utc("2030-10-28T01:00:00Z"));
        // Six fields: fixed seconds, minute and hour are a fixed time; a
        // seconds field with `*` is the real timeline.
        assert_eq!(
            next_n("0 30 2 * * *", berlin, "2030-10-26T12:00:00Z", 2),
            ["2030-10-27T00:30:00Z", "2030-10-28T01:30:00Z"]
        );
        assert_eq!(
            next_n("*/30 30 2 * * *", berlin, "2030-10-26T12:00:00Z", 4),
            [
                "2030-10-27T00:30:00Z",
                "2030-10-27T00:30:30Z",
                "2030-10-27T01:30:00Z",
                "2030-10-27T01:30:30Z"
            ]
        );
        // @daily is fixed: Asia/Beirut's midnight of 2030-03-31 is in the
        // gap (00:00 +02 -> 01:00 +03, at 2030-03-30T22:00Z).
        assert_eq!(
            next_n("@daily", "Asia/Beirut", "2030-03-29T12:00:00Z", 3),
            [
                "2030-03-29T22:00:00Z",
                "2030-03-30T22:00:00Z",
                "2030-03-31T21:00:00Z"
            ]
        );
        // On the real timeline the missing midnight does not fire.
        assert_eq!(
            next_n("0 0 * * *", "Asia/Beirut", "2030-03-29T12:00:00Z", 2),
            ["2030-03-29T22:00:00Z", "2030-03-30T22:00:00Z"]
        );
        assert_eq!(
            next_n("0 */24 * * *", "Asia/Beirut", "2030-03-29T12:00:00Z", 2),
            ["2030-03-29T22:00:00Z", "2030-03-31T21:00:00Z"]
        );
    }

    /// `next_after` and `latest_at_or_before` agree on fixed times next to
    /// Europe/Berlin's 2030 transitions, for instants with fractions too.
    #[test]
    fn next_and_latest_agree_next_to_transitions() {
        let berlin = schedule("0 2,4 * * *", "Europe/Berlin");
        let next = |at: &str| berlin.next_after(utc(at));
        let latest = |at: &str| berlin.latest_at_or_before(utc(at));
        assert_eq!(
            next("2030-10-26T23:59:59.999Z"),
            Some(utc("2030-10-27T00:00:00Z"))
        );
        assert_eq!(
            next("2030-10-27T00:00:00.5Z"),
            Some(utc("2030-10-27T03:00:00Z"))
        );
        // In the second pass of the overlap, 02:00 has fired already.
        assert_eq!(
            next("2030-10-27T01:00:00Z"),
            Some(utc("2030-10-27T03:00:00Z"))
        );
        assert_eq!(
            latest("2030-10-27T01:30:00Z"),
            Some(utc("2030-10-27T00:00:00Z"))
        );
        assert_eq!(
            latest("2030-10-27T02:59:59.999Z"),
            Some(utc("2030-10-27T00:00:00Z"))
        );
        assert_eq!(
            latest("2030-10-26T23:59:59.999Z"),
            Some(utc("2030-10-26T02:00:00Z"))
        );
        assert_eq!(
            next("2030-03-31T00:59:59.5Z"),
            Some(utc("2030-03-31T01:00:00Z"))
        );
        assert_eq!(
            latest("2030-03-31T00:59:59.5Z"),
            Some(utc("2030-03-30T03:00:00Z"))
        );
        assert_eq!(
            latest("2030-03-31T01:59:59Z"),
            Some(utc("2030-03-31T01:00:00Z"))
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

    /// A change of a zone's offset: when, and the offsets (seconds east of
    /// UTC) before and after.
    #[derive(Clone, Copy, Debug)]
    struct Transition {
        at: DateTime<Utc>,
        before: i32,
        after: i32,
    }

    fn offset_at(zone: Tz, instant: DateTime<Utc>) -> i32 {
        zone.offset_from_utc_datetime(&instant.naive_utc())
            .fix()
            .local_minus_utc()
    }

    /// Every change of `zone`'s offset in `years`, found by an hourly scan
    /// and bisected to the second.
    fn transitions(zone: Tz, years: std::ops::RangeInclusive<i32>) -> Vec<Transition> {
        let start = utc(&format!("{}-01-01T00:00:00Z", years.start())).timestamp();
        let end = utc(&format!("{}-01-01T00:00:00Z", years.end() + 1)).timestamp();
        let at = |second: i64| DateTime::from_timestamp(second, 0).expect("in range");
        let mut found = Vec::new();
        for hour in (start..end).step_by(3600) {
            let (before, after) = (offset_at(zone, at(hour)), offset_at(zone, at(hour + 3600)));
            if before == after {
                continue;
            }
            let (mut old, mut new) = (hour, hour + 3600);
            while new - old > 1 {
                let middle = old + (new - old) / 2;
                if offset_at(zone, at(middle)) == before {
                    old = middle;
                } else {
                    new = middle;
                }
            }
            found.push(Transition {
                at: at(new),
                before,
                after,
            });
        }
        found
    }

    /// The first instant on a whole minute whose local time in `zone` is
    /// `wall` or later, by brute force: what a fixed-time schedule fires for
    /// `wall`.
    fn first_reaching(zone: Tz, wall: NaiveDateTime) -> DateTime<Utc> {
        // No zone is 16 hours ahead of UTC, so every instant before this one
        // shows an earlier local time.
        let mut instant = wall.and_utc() - TimeDelta::hours(16);
        while instant.with_timezone(&zone).naive_local() < wall {
            instant += TimeDelta::minutes(1);
        }
        instant
    }

    /// The instants of `schedule` after `from`, up to and including `to`.
    fn between(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut instants = Vec::new();
        let mut cursor = from;
        while let Some(next) = schedule.next_after(cursor) {
            if next > to {
                break;
            }
            instants.push(next);
            cursor = next;
        }
        instants
    }

    /// Instants strictly increase, and `next_after` and
    /// `latest_at_or_before` agree on them, from whole seconds and
    /// fractions alike.
    fn assert_consistent(schedule: &Schedule, instants: &[DateTime<Utc>], what: &str) {
        let millisecond = TimeDelta::milliseconds(1);
        for pair in instants.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(a < b, "{what}: {a} then {b}");
            assert_eq!(schedule.next_after(a), Some(b), "{what}: after {a}");
            assert_eq!(
                schedule.next_after(a + millisecond * 500),
                Some(b),
                "{what}: after {a} and a half"
            );
            assert_eq!(
                schedule.next_after(b - millisecond),
                Some(b),
                "{what}: just before {b}"
            );
            assert_eq!(schedule.latest_at_or_before(b), Some(b), "{what}: at {b}");
            assert_eq!(
                schedule.latest_at_or_before(b - millisecond),
                Some(a),
                "{what}: just before {b}"
            );
        }
    }

    /// For one transition: a fixed time in the gap or overlap (every day,
    /// and on that day's weekday only), a list of fixed times around it,
    /// and real-timeline schedules, each against a brute-force reference.
    fn check_transition(zone: Tz, transition: Transition) {
        let Transition { at, before, after } = transition;
        let change = at.naive_utc();
        let shift = TimeDelta::seconds(i64::from(after - before));
        let gap = shift > TimeDelta::zero();
        // The local times skipped (a gap) or repeated (an overlap).
        let (first, end) = if gap {
            (
                change + TimeDelta::seconds(i64::from(before)),
                change + TimeDelta::seconds(i64::from(after)),
            )
        } else {
            (
                change + TimeDelta::seconds(i64::from(after)),
                change + TimeDelta::seconds(i64::from(before)),
            )
        };
        let middle = {
            let middle = first + (end - first) / 2;
            middle - TimeDelta::seconds(i64::from(middle.second()))
        };
        // A gap's times fire at its end, which is the change; a repeated
        // time at its first occurrence, on the offset before the change.
        let middle_fires = if gap {
            at
        } else {
            middle.and_utc() - TimeDelta::seconds(i64::from(before))
        };
        let day = first.date();
        let midnight = |days: i64| (day + TimeDelta::days(days)).and_time(chrono::NaiveTime::MIN);
        // The instants of the local dates from the day before the
        // transition's to the day after.
        let from = first_reaching(zone, midnight(-1)) - TimeDelta::seconds(1);
        let to = first_reaching(zone, midnight(2)) - TimeDelta::seconds(1);
        let label = |expression: &str| format!("{zone} {expression} around {at}");
        let fixed_reference = |schedule: &Schedule| {
            let cron = schedule.cron.as_ref().expect("a cron");
            let mut wall = midnight(-1);
            let mut instants = Vec::new();
            while wall < midnight(2) {
                if cron.is_time_matching(&wall).expect("matching") {
                    instants.push(first_reaching(zone, wall));
                }
                wall += TimeDelta::minutes(1);
            }
            instants.sort();
            instants.dedup();
            instants
        };

        // One fixed time a day: once on each of the three dates.
        let expression = format!("{} {} * * *", middle.minute(), middle.hour());
        let daily = Schedule::parse(&expression, zone).expect("valid");
        let instants = between(&daily, from, to);
        assert_eq!(instants.len(), 3, "{}: {instants:?}", label(&expression));
        assert_eq!(instants[1], middle_fires, "{}", label(&expression));
        for (instant, days) in [(instants[0], -1), (instants[2], 1)] {
            assert_eq!(
                instant.with_timezone(&zone).naive_local(),
                middle + TimeDelta::days(days),
                "{}",
                label(&expression)
            );
        }
        assert_eq!(instants, fixed_reference(&daily), "{}", label(&expression));
        assert_consistent(&daily, &instants, &label(&expression));

        // The same time on the weekday of the time that was skipped or
        // repeated only, which a gap across midnight keeps.
        let expression = format!(
            "{} {} * * {}",
            middle.minute(),
            middle.hour(),
            middle.weekday().num_days_from_sunday()
        );
        let weekly = Schedule::parse(&expression, zone).expect("valid");
        assert_eq!(
            between(&weekly, from, to),
            [middle_fires],
            "{}",
            label(&expression)
        );

        // Fixed times in the hours around the change, at the minute it
        // starts and at the middle one: each local time once, one instant
        // where several land on the end of a gap.
        let mut minutes = vec![first.minute(), middle.minute()];
        minutes.dedup();
        let hour = first.hour();
        let expression = format!(
            "{} {},{},{} * * *",
            minutes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            (hour + 23) % 24,
            hour,
            (hour + 1) % 24
        );
        let listed = Schedule::parse(&expression, zone).expect("valid");
        let instants = between(&listed, from, to);
        assert_eq!(instants, fixed_reference(&listed), "{}", label(&expression));
        assert!(instants.contains(&middle_fires), "{}", label(&expression));
        // Per local date, one instant for each matching local time, but on
        // the transition's date where gap times share the gap's end.
        let per_day = minutes.len() * 3;
        for days in [-1, 1] {
            let on_date = instants
                .iter()
                .filter(|instant| {
                    instant.with_timezone(&zone).date_naive() == day + TimeDelta::days(days)
                })
                .count();
            assert_eq!(on_date, per_day, "{} day {days}", label(&expression));
        }
        if !gap {
            // Nothing fires in the overlap's second pass.
            assert!(
                instants
                    .iter()
                    .all(|instant| *instant < at || *instant >= at - shift),
                "{}: {instants:?}",
                label(&expression)
            );
        }
        assert_consistent(&listed, &instants, &label(&expression));

        // The real timeline: every real minute whose local time matches,
        // within four hours of the change.
        for expression in [
            "0 * * * *",
            "30 * * * *",
            "*/15 * * * *",
            "* * * * *",
            "0 */2 * * *",
        ] {
            let real = Schedule::parse(expression, zone).expect("valid");
            assert_eq!(real.timeline, Timeline::Real, "{expression}");
            let cron = real.cron.as_ref().expect("a cron");
            let (from, to) = (at - TimeDelta::hours(4), at + TimeDelta::hours(4));
            let mut reference = Vec::new();
            let mut instant = from + TimeDelta::minutes(1);
            while instant <= to {
                if cron
                    .is_time_matching(&instant.with_timezone(&zone))
                    .expect("matching")
                {
                    reference.push(instant);
                }
                instant += TimeDelta::minutes(1);
            }
            let instants = between(&real, from, to);
            assert_eq!(instants, reference, "{}", label(expression));
            assert_consistent(&real, &instants, &label(expression));
        }
    }

    /// Every transition of 2026–2030 in zones that change by an hour at
    /// different local times (Nuuk's and Beirut's around midnight) or by
    /// half an hour (Lord Howe), and zones that never change.
    #[test]
    fn transitions_of_2026_to_2030_follow_the_rule() {
        for name in [
            "Europe/Berlin",
            "America/New_York",
            "America/Nuuk",
            "Asia/Beirut",
            "Australia/Lord_Howe",
        ] {
            let zone: Tz = name.parse().expect("zone");
            let found = transitions(zone, 2026..=2030);
            assert_eq!(found.len(), 10, "{name}: {found:?}");
            for transition in found {
                check_transition(zone, transition);
            }
        }
        for name in ["Asia/Tokyo", "UTC"] {
            let zone: Tz = name.parse().expect("zone");
            assert!(transitions(zone, 2026..=2030).is_empty(), "{name}");
            let daily = Schedule::parse("30 2 * * *", zone).expect("valid");
            let instants = between(
                &daily,
                utc("2026-01-01T00:00:00Z"),
                utc("2031-01-01T00:00:00Z"),
            );
            assert_eq!(instants.len(), 1826, "{name}");
            for pair in instants.windows(2) {
                assert_eq!(pair[1] - pair[0], TimeDelta::days(1), "{name}");
            }
        }
    }

    /// Several expressions: the instants are the union, in order, and an
    /// instant two of them share comes once; the latest at or before a time
    /// is the latest of any; `@reboot` and `@manual` stand alone.
    #[test]
    fn several_schedules_are_the_union_of_their_instants() {
        let several = |list: &[&str], zone: &str| {
            let zone: Tz = zone.parse().expect("zone");
            let list: Vec<Entry> = list.iter().map(|e| Entry::plain(e, zone)).collect();
            Schedule::parse_all(&list)
        };
        let schedule =
            several(&["0 9 * * 1-5", "0 12 * * 6", "0 9 * * 1"], "Europe/Berlin").expect("valid");
        assert_eq!(
            schedule.expression(),
            "0 9 * * 1-5 | 0 12 * * 6 | 0 9 * * 1"
        );
        // Friday 2027-03-05 to Tuesday 2027-03-09, Berlin (UTC+1).
        let from = utc("2027-03-05T00:00:00Z");
        let got: Vec<String> = schedule
            .upcoming(from, 4)
            .iter()
            .map(|t| fmt_instant(*t))
            .collect();
        assert_eq!(
            got,
            [
                "2027-03-05T08:00:00.000Z",
                "2027-03-06T11:00:00.000Z",
                // Monday's 09:00 is in two expressions: one instant.
                "2027-03-08T08:00:00.000Z",
                "2027-03-09T08:00:00.000Z",
            ]
        );
        assert_eq!(
            schedule.latest_at_or_before(utc("2027-03-08T07:00:00Z")),
            Some(utc("2027-03-06T11:00:00Z"))
        );
        assert_eq!(
            schedule.interval_after(from),
            Some(std::time::Duration::from_secs(27 * 3600))
        );
        // Each keeps its own timeline: a fixed time and an hourly one
        // through the fall-back overlap of 2027-10-31 in Berlin.
        let mixed = several(&["30 2 * * *", "15 * * * *"], "Europe/Berlin").expect("valid");
        let got = mixed.upcoming(utc("2027-10-30T23:50:00Z"), 4);
        assert_eq!(
            got.iter().map(|t| fmt_instant(*t)).collect::<Vec<_>>(),
            [
                "2027-10-31T00:15:00.000Z",
                "2027-10-31T00:30:00.000Z",
                "2027-10-31T01:15:00.000Z",
                "2027-10-31T02:15:00.000Z",
            ]
        );
        assert!(several(&[], "UTC").is_err());
        assert!(several(&["@manual", "0 9 * * *"], "UTC").is_err());
        assert!(several(&["0 9 * * *", "@reboot"], "UTC").is_err());
        assert!(
            several(&["0 9 * * *", "61 * * * *"], "UTC")
                .unwrap_err()
                .contains("61")
        );
        assert_eq!(
            several(&["@daily"], "UTC").expect("one").expression(),
            "@daily"
        );
    }

    /// The instants a daily fixed time `wall_time` fires at in `zone` from
    /// `first` to `last` (local dates), by chrono alone: a time in a gap at
    /// the first minute after it (shift) or never (skip), a repeated time at
    /// its first, second or both occurrences.
    fn daily_reference(
        zone: Tz,
        wall_time: chrono::NaiveTime,
        first: chrono::NaiveDate,
        last: chrono::NaiveDate,
        gap: DstGap,
        repeat: DstRepeat,
    ) -> Vec<DateTime<Utc>> {
        let mut instants = Vec::new();
        let mut date = first;
        while date <= last {
            let wall = date.and_time(wall_time);
            match zone.from_local_datetime(&wall) {
                LocalResult::Single(t) => instants.push(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(a, b) => match repeat {
                    DstRepeat::First => instants.push(a.with_timezone(&Utc)),
                    DstRepeat::Last => instants.push(b.with_timezone(&Utc)),
                    DstRepeat::Both => {
                        instants.push(a.with_timezone(&Utc));
                        instants.push(b.with_timezone(&Utc));
                    }
                },
                LocalResult::None if gap == DstGap::Shift => {
                    instants.push(first_reaching(zone, wall));
                }
                LocalResult::None => {}
            }
            date = date.succ_opt().expect("a next day");
        }
        instants
    }

    #[test]
    fn every_daylight_saving_policy_through_the_transitions_of_2026_and_2027() {
        let policies = [DstGap::Shift, DstGap::Skip]
            .into_iter()
            .flat_map(|gap| {
                [DstRepeat::First, DstRepeat::Last, DstRepeat::Both].map(move |r| (gap, r))
            })
            .collect::<Vec<_>>();
        let mut checked = 0;
        for zone in ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"] {
            let tz: Tz = zone.parse().expect("zone");
            let found = transitions(tz, 2026..=2027);
            assert_eq!(found.len(), 4, "{zone}: two transitions a year");
            for transition in found {
                // The local time in the middle of the gap or overlap.
                let (low, high) = (
                    transition.before.min(transition.after),
                    transition.before.max(transition.after),
                );
                let middle = transition.at.naive_utc()
                    + TimeDelta::seconds(i64::from(low + (high - low) / 2));
                let wall_time = middle.time();
                let day = middle.date();
                let expression = format!("{} {} * * *", wall_time.minute(), wall_time.hour());
                for (gap, repeat) in &policies {
                    let schedule =
                        Schedule::parse(&expression, tz)
                            .expect("valid")
                            .with_rules(Rules {
                                dst_gap: *gap,
                                dst_repeat: *repeat,
                                ..Rules::default()
                            });
                    let (first, last) = (day - TimeDelta::days(2), day + TimeDelta::days(2));
                    let expected = daily_reference(tz, wall_time, first, last, *gap, *repeat);
                    let from = expected[0] - TimeDelta::seconds(1);
                    let to = *expected.last().expect("some") + TimeDelta::seconds(1);
                    let what = format!(
                        "{zone} {expression} at {} ({}/{})",
                        transition.at,
                        gap.word(),
                        repeat.word()
                    );
                    let got = between(&schedule, from, to);
                    assert_eq!(got, expected, "{what}");
                    assert_consistent(&schedule, &got, &what);
                    let spring = transition.after > transition.before;
                    let on_the_day = expected
                        .iter()
                        .filter(|t| (**t - transition.at).num_hours().abs() < 12)
                        .count();
                    let want = match (spring, gap, repeat) {
                        (true, DstGap::Shift, _) => 1,
                        (true, DstGap::Skip, _) => 0,
                        (false, _, DstRepeat::Both) => 2,
                        (false, _, _) => 1,
                    };
                    assert_eq!(on_the_day, want, "{what}: {expected:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 3 * 4 * 6);
        // A zone without daylight saving: every policy, the same instants.
        let tokyo: Tz = "Asia/Tokyo".parse().expect("zone");
        assert!(transitions(tokyo, 2026..=2027).is_empty());
        let plain = between(
            &Schedule::parse("30 2 * * *", tokyo).expect("valid"),
            utc("2026-01-01T00:00:00Z"),
            utc("2028-01-01T00:00:00Z"),
        );
        assert_eq!(plain.len(), 730);
        for (gap, repeat) in policies {
            let schedule = Schedule::parse("30 2 * * *", tokyo)
                .expect("valid")
                .with_rules(Rules {
                    dst_gap: gap,
                    dst_repeat: repeat,
                    ..Rules::default()
                });
            let got = between(
                &schedule,
                utc("2026-01-01T00:00:00Z"),
                utc("2028-01-01T00:00:00Z"),
            );
            assert_eq!(got, plain, "Asia/Tokyo {}/{}", gap.word(), repeat.word());
        }
    }

    #[test]
    fn the_policy_leaves_the_real_timeline_alone() {
        // Hourly in Berlin through 2026's transitions: as without a policy.
        let tz: Tz = "Europe/Berlin".parse().expect("zone");
        let (from, to) = (utc("2026-03-28T00:00:00Z"), utc("2026-11-01T00:00:00Z"));
        let plain = between(&Schedule::parse("15 * * * *", tz).expect("valid"), from, to);
        let skipping = Schedule::parse("15 * * * *", tz)
            .expect("valid")
            .with_rules(Rules {
                dst_gap: DstGap::Skip,
                dst_repeat: DstRepeat::Both,
                ..Rules::default()
            });
        assert_eq!(between(&skipping, from, to), plain);
    }

    #[test]
    fn calendars_exclude_local_dates_in_three_zones() {
        use super::calendar::Calendar;
        let ics = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20201225\n\
RRULE:FREQ=YEARLY\nSUMMARY:Christmas\nEND:VEVENT\nEND:VCALENDAR\n";
        let holidays = Arc::new(Calendar::from_ics("holidays", ics).expect("parses"));
        for (zone, local_midnight_of_25th) in [
            ("Pacific/Auckland", "2026-12-24T11:00:00Z"),
            ("Europe/Berlin", "2026-12-24T23:00:00Z"),
            ("America/Los_Angeles", "2026-12-25T08:00:00Z"),
        ] {
            let tz: Tz = zone.parse().expect("zone");
            let schedule = Schedule::parse("30 */6 * * *", tz)
                .expect("valid")
                .with_rules(Rules {
                    skip_on: vec![holidays.clone()],
                    ..Rules::default()
                });
            let start = utc(local_midnight_of_25th);
            let got = between(
                &schedule,
                start - TimeDelta::days(1),
                start + TimeDelta::days(2),
            );
            // Four a day: the 24th's and the 26th's, none of the 25th's.
            assert_eq!(got.len(), 8, "{zone}: {got:?}");
            assert!(
                got.iter()
                    .all(|t| *t < start || *t >= start + TimeDelta::days(1)),
                "{zone}: {got:?}"
            );
            assert_eq!(
                schedule.next_after(start - TimeDelta::hours(1)),
                Some(start + TimeDelta::days(1) + TimeDelta::minutes(30)),
                "{zone}"
            );
            assert_consistent(&schedule, &got, zone);
            // Ten years on, the rule still holds.
            let later = tz
                .with_ymd_and_hms(2036, 12, 25, 0, 0, 0)
                .earliest()
                .expect("a midnight")
                .with_timezone(&Utc);
            let next = schedule.next_after(later).expect("an instant");
            assert_eq!(next.with_timezone(&tz).day(), 26, "{zone}");
            // What check lists: the excluded date, once, by its calendar.
            let marked = schedule.upcoming_marked(start - TimeDelta::hours(1), 2);
            assert_eq!(marked.len(), 3, "{zone}: {marked:?}");
            assert_eq!(
                marked[0],
                (
                    start + TimeDelta::minutes(30),
                    Some(Excluded::SkipOn("holidays".into()))
                )
            );
            assert_eq!(marked[1].1, None);
        }
        // only_on: the instants of the calendar's dates alone.
        let trading = Arc::new(Calendar::of_dates(
            "trading",
            ["2026-12-23", "2026-12-28"]
                .iter()
                .map(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").expect("date")),
        ));
        let schedule = Schedule::parse("0 17 * * *", "America/New_York".parse().expect("zone"))
            .expect("valid")
            .with_rules(Rules {
                only_on: vec![trading],
                ..Rules::default()
            });
        let got = schedule.upcoming(utc("2026-12-01T00:00:00Z"), 5);
        assert_eq!(
            got,
            [utc("2026-12-23T22:00:00Z"), utc("2026-12-28T22:00:00Z")]
        );
        assert_eq!(
            schedule.latest_at_or_before(utc("2026-12-27T00:00:00Z")),
            Some(utc("2026-12-23T22:00:00Z"))
        );
    }

    #[test]
    fn a_window_bounds_the_instants() {
        let schedule = Schedule::parse("*/10 * * * *", Tz::UTC)
            .expect("valid")
            .with_rules(Rules {
                not_before: Some(utc("2026-06-01T09:05:00Z")),
                not_after: Some(utc("2026-06-01T09:40:00Z")),
                ..Rules::default()
            });
        let got = between(
            &schedule,
            utc("2026-01-01T00:00:00Z"),
            utc("2027-01-01T00:00:00Z"),
        );
        assert_eq!(
            got,
            [
                utc("2026-06-01T09:10:00Z"),
                utc("2026-06-01T09:20:00Z"),
                utc("2026-06-01T09:30:00Z"),
                utc("2026-06-01T09:40:00Z"),
            ]
        );
        assert_consistent(&schedule, &got, "window");
        assert_eq!(
            schedule.latest_at_or_before(utc("2026-06-01T09:09:00Z")),
            None
        );
        assert_eq!(
            schedule.latest_at_or_before(utc("2026-07-01T00:00:00Z")),
            Some(utc("2026-06-01T09:40:00Z"))
        );
        assert!(!schedule.has_ended(utc("2026-06-01T09:35:00Z")));
        assert!(schedule.has_ended(utc("2026-06-01T09:41:00Z")));
        let marked = schedule.upcoming_marked(utc("2026-06-01T08:55:00Z"), 10);
        assert_eq!(
            marked.first().map(|m| m.1.clone()),
            Some(Some(Excluded::BeforeWindow))
        );
        assert_eq!(
            marked.last().map(|m| m.1.clone()),
            Some(Some(Excluded::AfterWindow))
        );
        assert_eq!(marked.len(), 6);
    }

    /// `at`: one instant whatever the zone (its offset says which), the
    /// only one before and after it, and a schedule that has ended once it
    /// has come; a time without an offset, or with a fraction of a second,
    /// is refused.
    #[test]
    fn one_instant_is_its_only_instant() {
        let once = Schedule::once(
            "2027-01-15T03:00:00+01:00",
            "Asia/Tokyo".parse().expect("zone"),
        )
        .expect("valid");
        let instant = utc("2027-01-15T02:00:00Z");
        assert_eq!(once.once_at(), Some(instant));
        assert_eq!(once.next_after(utc("2020-01-01T00:00:00Z")), Some(instant));
        assert_eq!(
            once.next_after(instant - TimeDelta::milliseconds(500)),
            Some(instant)
        );
        assert_eq!(once.next_after(instant), None);
        assert_eq!(
            once.latest_at_or_before(instant - TimeDelta::seconds(1)),
            None
        );
        assert_eq!(
            once.latest_at_or_before(utc("2030-01-01T00:00:00Z")),
            Some(instant)
        );
        assert_eq!(once.interval_after(utc("2020-01-01T00:00:00Z")), None);
        assert!(!once.has_ended(instant - TimeDelta::seconds(1)));
        assert!(once.has_ended(instant));
        assert!(!once.is_manual() && !once.is_at_start() && !once.is_after());
        assert_eq!(once.next_transition(utc("2027-01-01T00:00:00Z")), None);
        for bad in [
            "2027-01-15T03:00:00",
            "2027-01-15 03:00",
            "2027-01-15T03:00:00.250Z",
        ] {
            assert!(
                Schedule::once(bad, Tz::UTC).is_err(),
                "{bad:?} was accepted"
            );
        }
    }
}
