//! Where the runs this replica marks `abandoned` go, from the statements
//! that mark them (on a database connection's thread) to the rerun
//! service of `on_abandon = "rerun"` (`super::rerun`), or else to the
//! notifications. It knows nothing of the engine, which holds it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::history::{OnAbandoned, RunRow, RunStatus};
use crate::notify::{Event, Notice, Notifier, Told};

/// Where the runs this replica marks `abandoned` go: to its scheduler's
/// rerun service (`rerun::serve`), which reruns those whose job asks for it, once one is
/// serving; else straight to the notifications.
pub(crate) struct Abandoned {
    sender: mpsc::UnboundedSender<RunRow>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<RunRow>>>,
    /// Whether the rerun service has taken the receiver.
    served: AtomicBool,
    notifier: Arc<Notifier>,
}

impl Abandoned {
    /// Nobody serves it yet: every run marked is notified.
    pub(crate) fn new(notifier: Arc<Notifier>) -> Arc<Abandoned> {
        let (sender, receiver) = mpsc::unbounded_channel();
        Arc::new(Abandoned {
            sender,
            receiver: Mutex::new(Some(receiver)),
            served: AtomicBool::new(false),
            notifier,
        })
    }

    /// What the statements that mark runs `abandoned` call with the rows
    /// they marked. It never blocks: it is called on a database
    /// connection's thread.
    pub(crate) fn callback(self: &Arc<Self>) -> OnAbandoned {
        let me = self.clone();
        Arc::new(move |rows: &[RunRow]| {
            for row in rows {
                // A receiver closed by a stopping rerun service gives the row
                // back: told at once.
                if !(me.served.load(Ordering::SeqCst) && me.sender.send(row.clone()).is_ok()) {
                    tell(&me.notifier, row);
                }
            }
        })
    }

    /// The rows from now on, for the rerun service (once).
    pub(super) fn take(&self) -> Option<mpsc::UnboundedReceiver<RunRow>> {
        let receiver = self
            .receiver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if receiver.is_some() {
            self.served.store(true, Ordering::SeqCst);
        }
        receiver
    }
}

/// Notifies `row`, a run marked `abandoned` that stays so.
pub(crate) fn tell(notifier: &Notifier, row: &RunRow) {
    notifier.event(Notice::new(
        Event::Abandoned,
        Told {
            job: &row.job,
            instant: row.scheduled_at.and_utc(),
            status: RunStatus::Abandoned,
            exit_code: None,
            attempt: row.attempt,
            instance: &row.instance,
            duration: None,
            output: &row.output,
            history_id: Some(row.id),
        },
    ));
}
