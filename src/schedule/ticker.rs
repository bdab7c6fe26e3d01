//! The ticker: sleeps until each instant of one schedule in turn, on a
//! [`Clock`], recomputing the next instant every time it wakes so that it
//! cannot drift; it never returns an instant twice, even if the clock steps
//! back, and says which instants it skipped for being too late.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{Clock, Schedule, alarm};

/// The longest single sleep: a wall-clock step (NTP, suspend) is noticed at
/// least this often even while a daily job waits for its instant.
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// On the real clock, the last stretch before an instant waited for on the
/// precise [`alarm`]: tokio's timer may wake up to 2 ms past its deadline.
const PRECISE_STRETCH: Duration = Duration::from_millis(4);

/// How late the [`Ticker`] still hands out an instant that came while its
/// caller was busy; older instants are skipped (after a clock step forward,
/// say), and are catch-up's business.
pub(crate) const LATE_LIMIT: TimeDelta = TimeDelta::seconds(60);

/// Instants a [`Ticker`] skipped because they were more than
/// [`LATE_LIMIT`] late when its caller came back for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Skipped {
    /// The first one.
    pub(crate) first: DateTime<Utc>,
    /// The last one.
    pub(crate) last: DateTime<Utc>,
    /// How many (counted up to [`Skipped::COUNT_LIMIT`]).
    pub(crate) count: usize,
}

impl Skipped {
    /// Skipped instants are counted up to this many.
    const COUNT_LIMIT: usize = 10_000;
}

/// Sleeps until each instant of one schedule in turn.
pub(crate) struct Ticker {
    schedule: Schedule,
    clock: Arc<dyn Clock>,
    last: Option<DateTime<Utc>>,
    /// No instant at or before this is handed out.
    floor: Option<DateTime<Utc>>,
    skipped: Option<Skipped>,
}

impl Ticker {
    /// A ticker whose first instant is the first one after the clock's now.
    pub(crate) fn new(schedule: Schedule, clock: Arc<dyn Clock>) -> Self {
        Ticker {
            schedule,
            clock,
            last: None,
            floor: None,
            skipped: None,
        }
    }

    /// A ticker that continues after `last` (an instant already handled).
    pub(crate) fn resuming_after(
        schedule: Schedule,
        clock: Arc<dyn Clock>,
        last: DateTime<Utc>,
    ) -> Self {
        Ticker {
            schedule,
            clock,
            last: Some(last),
            floor: None,
            skipped: None,
        }
    }

    /// Sleeps until the next instant's start (the instant itself, unless
    /// the job has a jitter) and returns the instant. Never returns the same
    /// instant twice, even if the wall clock steps backwards. An instant the
    /// caller was too busy to take when it came is still returned, late,
    /// unless it is older than [`LATE_LIMIT`] (plus the jitter): those are
    /// skipped, and [`Ticker::take_skipped`] tells which. Returns `None`
    /// only for a schedule that has no further instant.
    pub(crate) async fn tick(&mut self) -> Option<DateTime<Utc>> {
        let now = self.clock.now();
        let late_limit = LATE_LIMIT + self.schedule.jitter();
        let target = match self.last {
            Some(last) if last < now - late_limit => {
                let from = now - late_limit;
                self.note_skipped(last, from);
                self.schedule.next_after(from)?
            }
            Some(last) => self.schedule.next_after(last)?,
            // The first instant whose start is still to come: with a
            // jitter, that may be an instant already past.
            None => {
                let mut target = self.schedule.next_after(now - self.schedule.jitter())?;
                while self.schedule.start_of(target) <= now
                    || self.floor.is_some_and(|floor| target <= floor)
                {
                    target = self.schedule.next_after(target)?;
                }
                target
            }
        };
        let start = self.schedule.start_of(target);
        loop {
            let now = self.clock.now();
            if now >= start {
                self.last = Some(target);
                return Some(target);
            }
            let wait = (start - now).to_std().unwrap_or_default();
            if !self.clock.is_real() {
                tokio::time::sleep(wait.min(MAX_SLEEP)).await;
            } else if wait <= PRECISE_STRETCH {
                alarm::until(std::time::Instant::now() + wait).await;
            } else {
                // Woken by tokio's timer up to 2 ms past its deadline: still
                // before the instant, whose last stretch is the alarm's.
                tokio::time::sleep((wait - PRECISE_STRETCH / 2).min(MAX_SLEEP)).await;
            }
        }
    }
}

impl Ticker {
    /// The last instant handed out, if any.
    pub(crate) fn last(&self) -> Option<DateTime<Utc>> {
        self.last
    }

    /// Hands out no instant at or before `floor` (one a ticker this one
    /// replaces has handed out already), whatever the clock says.
    pub(crate) fn not_before(mut self, floor: Option<DateTime<Utc>>) -> Self {
        if let Some(floor) = floor
            && self.last.is_none_or(|last| last < floor)
        {
            self.floor = Some(floor);
        }
        self
    }

    /// The instants skipped since the last call, if any.
    pub(crate) fn take_skipped(&mut self) -> Option<Skipped> {
        self.skipped.take()
    }

    /// Counts the instants after `after`, up to and including `until`.
    fn note_skipped(&mut self, after: DateTime<Utc>, until: DateTime<Utc>) {
        let left = Skipped::COUNT_LIMIT.saturating_sub(self.skipped.map_or(0, |s| s.count));
        let Some((first, last, count)) = self.schedule.instants_while(after, left, |t| t <= until)
        else {
            return;
        };
        let skipped = self.skipped.get_or_insert(Skipped {
            first,
            last,
            count: 0,
        });
        skipped.last = last;
        skipped.count += count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{DatabaseClock, Offset, TokioClock};
    use chrono::{NaiveDate, TimeZone};
    use chrono_tz::Tz;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid test time")
            .with_timezone(&Utc)
    }

    fn schedule(expression: &str, zone: &str) -> Schedule {
        Schedule::parse(expression, zone.parse().expect("zone")).expect("valid schedule")
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
    /// A jittered ticker wakes at each instant's start and returns the
    /// instant; a new one started between an instant and its start still
    /// returns that instant.
    #[tokio::test(start_paused = true)]
    async fn a_jittered_ticker_wakes_at_each_start() {
        let clock = Arc::new(TokioClock::starting_at(utc("2027-01-01T00:00:30Z")));
        let jittered = schedule("* * * * *", "UTC").with_jitter("job", Duration::from_secs(50));
        let mut ticker = Ticker::new(jittered.clone(), clock.clone());
        for _ in 0..5 {
            let instant = ticker.tick().await.expect("an instant");
            let now = clock.now();
            assert!(
                now >= jittered.start_of(instant),
                "woke at {now} for {instant}"
            );
            assert!(now - jittered.start_of(instant) < TimeDelta::milliseconds(5));
        }
        let first = utc("2027-01-01T00:10:00Z");
        let start = jittered.start_of(first);
        assert!(start > first, "the test needs a delay");
        let clock = Arc::new(TokioClock::starting_at(first + (start - first) / 2));
        let mut ticker = Ticker::new(jittered.clone(), clock.clone());
        assert_eq!(ticker.tick().await, Some(first));
        assert!(clock.now() >= start);
    }

    /// The instants a ticker on a virtual clock started at `start` hands
    /// out, `count` of them, each at its instant.
    async fn ticks(schedule: Schedule, start: &str, count: usize) -> Vec<DateTime<Utc>> {
        let clock = Arc::new(TokioClock::starting_at(utc(start)));
        let mut ticker = Ticker::new(schedule, clock.clone());
        let mut fired = Vec::new();
        for _ in 0..count {
            let instant = ticker.tick().await.expect("instant");
            assert!(clock.now() >= instant);
            assert!(clock.now() - instant < TimeDelta::milliseconds(2));
            fired.push(instant);
        }
        fired
    }

    /// Europe/Berlin 2030: 02:00 CET -> 03:00 CEST on 03-31 and 03:00 CEST
    /// -> 02:00 CET on 10-27, both at 01:00Z. Fixed times fire once (a
    /// missing one at the gap's end, a repeated one at its first
    /// occurrence); an hourly schedule keeps the real hours.
    #[tokio::test(start_paused = true)]
    async fn ticker_fires_fixed_times_once_through_both_transitions() {
        let twice_a_day = || schedule("0 2,4 * * *", "Europe/Berlin");
        assert_eq!(
            ticks(twice_a_day(), "2030-03-30T12:00:00Z", 4).await,
            [
                utc("2030-03-31T01:00:00Z"),
                utc("2030-03-31T02:00:00Z"),
                utc("2030-04-01T00:00:00Z"),
                utc("2030-04-01T02:00:00Z")
            ]
        );
        assert_eq!(
            ticks(twice_a_day(), "2030-10-26T12:00:00Z", 4).await,
            [
                utc("2030-10-27T00:00:00Z"),
                utc("2030-10-27T03:00:00Z"),
                utc("2030-10-28T01:00:00Z"),
                utc("2030-10-28T03:00:00Z")
            ]
        );
        assert_eq!(
            ticks(
                schedule("0 * * * *", "Europe/Berlin"),
                "2030-10-26T23:30:00Z",
                3
            )
            .await,
            [
                utc("2030-10-27T00:00:00Z"),
                utc("2030-10-27T01:00:00Z"),
                utc("2030-10-27T02:00:00Z")
            ]
        );
        // Resumed in the overlap's second pass after the first 02:00, the
        // ticker does not hand out 02:00 again.
        let clock = Arc::new(TokioClock::starting_at(utc("2030-10-27T01:10:00Z")));
        let mut ticker =
            Ticker::resuming_after(twice_a_day(), clock.clone(), utc("2030-10-27T00:00:00Z"));
        assert_eq!(ticker.tick().await, Some(utc("2030-10-27T03:00:00Z")));
        assert!(clock.now() >= utc("2030-10-27T03:00:00Z"));
        assert_eq!(ticker.take_skipped(), None);
    }
}
