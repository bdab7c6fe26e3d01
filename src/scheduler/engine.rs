//! What every task of a scheduler shares: the store, the claim batcher, the
//! writer of runs' ends and releases, the database's health, the history
//! journal, the replica's identity and clock, the shutdown phase, and (for
//! child processes) the guard. The one-off commands (`trigger`, `exec`)
//! start one too.

use std::sync::Arc;

use tokio::sync::watch;

use super::Phase;
use super::claimer::Claimer;
use super::finisher::Finisher;
use crate::db::Store;
use crate::db::health::Health;
use crate::history::OnAbandoned;
use crate::history::journal::Journal;
use crate::notify::{Notifier, SentLog};
use crate::runner::Guard;
use crate::schedule::Clock;
use crate::telemetry::Liveness;

/// The shared parts of a running scheduler.
pub(crate) struct Engine {
    pub(crate) store: Store,
    /// Kills the runs' process groups if this process dies; `None` where no
    /// job is a child process.
    pub(crate) guard: Option<Arc<Guard>>,
    pub(crate) claimer: Claimer,
    /// Writes the runs' ends and their leases' releases, batched.
    pub(crate) finisher: Finisher,
    pub(crate) health: Arc<Health>,
    pub(crate) journal: Journal,
    /// Sends the events this replica records, and the pings of its runs.
    pub(crate) notifier: Arc<Notifier>,
    /// This replica's id in leases and history.
    pub(crate) instance: String,
    /// The database's clock, as this replica reads it.
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) phase: watch::Receiver<Phase>,
    /// The jobs whose definitions differ between live replicas.
    pub(crate) drift: super::drift::DriftState,
    /// Tells about the runs this replica marks `abandoned`, or has them
    /// rerun (`on_abandon = "rerun"`), through [`Engine::abandoned`].
    pub(crate) on_abandoned: OnAbandoned,
    /// Where the runs this replica marks `abandoned` go.
    pub(crate) abandoned: Arc<super::abandoned::Abandoned>,
    /// Paces the catch-up, backfill and retry runs it starts.
    pub(crate) throttle: super::throttle::Throttle,
}

impl Engine {
    /// Starts the shared tasks (claim batcher, journal, notifier) for
    /// `instance`; what it tells is beaten into `liveness`, and the
    /// notifications it sends are kept in `sent`.
    pub(crate) fn start(
        store: Store,
        instance: String,
        clock: Arc<dyn Clock>,
        phase: watch::Receiver<Phase>,
        (liveness, sent): (Arc<Liveness>, SentLog),
        guard: Option<Arc<Guard>>,
    ) -> Arc<Engine> {
        let health = Arc::new(Health::new(liveness));
        let store = store.reporting_to(health.clone());
        let notifier = Notifier::start(sent);
        let abandoned = super::abandoned::Abandoned::new(notifier.clone());
        let on_abandoned = abandoned.callback();
        let journal = Journal::start(store.clone(), health.clone(), on_abandoned.clone());
        Arc::new(Engine {
            claimer: Claimer::start(
                store.clone(),
                instance.clone(),
                clock.clone(),
                on_abandoned.clone(),
            ),
            finisher: Finisher::start(store.clone()),
            notifier,
            store,
            guard,
            health,
            journal,
            instance,
            clock,
            phase,
            drift: super::drift::DriftState::default(),
            on_abandoned,
            abandoned,
            throttle: super::throttle::Throttle::default(),
        })
    }
}
