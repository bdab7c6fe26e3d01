//! What a replica tells the outside: Prometheus metrics ([`metrics`]), its JSON
//! log lines ([`logs`]) and
//! systemd's readiness and watchdog notifications ([`systemd`]). The
//! scheduler records metrics and beats [`Liveness`]; serving them
//! (`crate::web`) and notifying are the daemon's.

#[cfg(feature = "daemon")]
pub(crate) mod logs;
pub(crate) mod metrics;
pub(crate) mod systemd;
pub(crate) mod trace_config;
#[cfg(feature = "daemon")]
pub(crate) mod traces;
#[cfg(not(feature = "daemon"))]
#[path = "traces_off.rs"]
pub(crate) mod traces;

pub(crate) use self::metrics::*;
pub(crate) use self::systemd::{SystemdState, heartbeat, notify_systemd};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// `/healthz` fails when the tick loop has not beaten for this long.
const TICK_STALE_AFTER: Duration = Duration::from_secs(5);
/// `/healthz` fails when the database has not answered for this long.
const DATABASE_STALE_AFTER: Duration = Duration::from_secs(30);

/// Beats of the daemon's tick loop and answers of the database, for
/// `/healthz` and the systemd watchdog.
pub(crate) struct Liveness {
    started: Instant,
    tick_ms: AtomicU64,
    database_ms: AtomicU64,
    database_down: AtomicBool,
}

impl Liveness {
    /// Both fresh now.
    pub(crate) fn new() -> Self {
        Liveness {
            started: Instant::now(),
            tick_ms: AtomicU64::new(0),
            database_ms: AtomicU64::new(0),
            database_down: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The tick loop is alive.
    pub(crate) fn tick(&self) {
        self.tick_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The database answered.
    pub(crate) fn database_answered(&self) {
        self.database_ms.store(self.now_ms(), Ordering::Relaxed);
        self.database_down.store(false, Ordering::Relaxed);
    }

    /// The database could not be reached.
    pub(crate) fn database_unreachable(&self) {
        self.database_down.store(true, Ordering::Relaxed);
    }

    /// `None` when healthy, else why not.
    pub(crate) fn problem(&self) -> Option<Unhealthy> {
        let now = self.now_ms();
        let age =
            |at: &AtomicU64| Duration::from_millis(now.saturating_sub(at.load(Ordering::Relaxed)));
        if age(&self.tick_ms) > TICK_STALE_AFTER {
            Some(Unhealthy::TickLoopStopped)
        } else if self.database_down.load(Ordering::Relaxed) {
            Some(Unhealthy::DatabaseUnreachable)
        } else if age(&self.database_ms) > DATABASE_STALE_AFTER {
            Some(Unhealthy::DatabaseSilent)
        } else {
            None
        }
    }
}

/// Why a replica is not healthy (`/healthz`'s reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unhealthy {
    /// The tick loop has not beaten for 5 s: the watchdog is not fed.
    TickLoopStopped,
    /// The database's last answer was an error.
    DatabaseUnreachable,
    /// The database has not answered for 30 s.
    DatabaseSilent,
}

impl Unhealthy {
    /// The reason `/healthz` gives.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Unhealthy::TickLoopStopped => "the tick loop is not running",
            Unhealthy::DatabaseUnreachable => "the database is unreachable",
            Unhealthy::DatabaseSilent => "the database has not answered recently",
        }
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::new()
    }
}
