//! Where time comes from. Instants are read on a [`Clock`], injected so that
//! tests run through a year's transitions in milliseconds: the system's, a
//! virtual one that follows tokio's paused clock, and the database's as a
//! host reads it ([`DatabaseClock`]: the host's plus its estimated offset).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// Where the current time comes from.
pub(crate) trait Clock: Send + Sync + 'static {
    /// The current wall-clock time.
    fn now(&self) -> DateTime<Utc>;

    /// Whether this clock runs in real time (not a test's virtual one), so
    /// that an instant's last stretch may be waited for on the precise
    /// [`super::alarm`] rather than on tokio's timer.
    fn is_real(&self) -> bool {
        false
    }
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn is_real(&self) -> bool {
        true
    }
}

/// A wall clock that starts at a chosen instant and advances with tokio's
/// clock, so that a test with paused time can fast-forward through months.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokioClock {
    start_wall: DateTime<Utc>,
    start: tokio::time::Instant,
}

#[cfg(test)]
impl TokioClock {
    /// A clock that reads `start_wall` now.
    pub(crate) fn starting_at(start_wall: DateTime<Utc>) -> Self {
        TokioClock {
            start_wall,
            start: tokio::time::Instant::now(),
        }
    }
}

#[cfg(test)]
impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = TimeDelta::from_std(self.start.elapsed()).unwrap_or(TimeDelta::MAX);
        self.start_wall + elapsed
    }
}

/// How far a host's clock is from the database's, as last estimated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offset {
    /// Database time minus host time.
    pub(crate) offset: TimeDelta,
    /// How wrong `offset` may be: half the round trip of the sample it came
    /// from, plus the database clock's resolution.
    pub(crate) error: Duration,
}

/// The database's clock, read on this host: the host's clock plus the
/// [`Offset`] last estimated by sampling the database. Replicas sleep until
/// each instant by this clock, so that a host whose clock is fast does not
/// start jobs early; before any estimate it is the host's clock.
pub(crate) struct DatabaseClock {
    host: Arc<dyn Clock>,
    offset_us: AtomicI64,
    /// Microseconds; negative until the first estimate.
    error_us: AtomicI64,
}

impl DatabaseClock {
    /// The database's clock over `host`, not yet estimated.
    pub(crate) fn new(host: Arc<dyn Clock>) -> Self {
        DatabaseClock {
            host,
            offset_us: AtomicI64::new(0),
            error_us: AtomicI64::new(-1),
        }
    }

    /// The host's own clock.
    pub(crate) fn host(&self) -> &Arc<dyn Clock> {
        &self.host
    }

    /// Applies a new estimate.
    pub(crate) fn set(&self, estimate: Offset) {
        let offset = estimate.offset.num_microseconds().unwrap_or(i64::MAX);
        self.offset_us.store(offset, Ordering::Relaxed);
        let error = i64::try_from(estimate.error.as_micros()).unwrap_or(i64::MAX);
        self.error_us.store(error, Ordering::Relaxed);
    }

    /// The last estimate, if there was one.
    pub(crate) fn offset(&self) -> Option<Offset> {
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

    fn is_real(&self) -> bool {
        self.host.is_real()
    }
}
