//! A precise wake-up for the last stretch before an instant.
//!
//! tokio's timer counts whole milliseconds and rounds a deadline up, and
//! its driver's wait rounds up again: a job loop that sleeps until an
//! instant on it wakes 1 to 2 ms late. A ticker on the real clock sleeps on
//! tokio's timer until shortly before the instant, then waits here: one
//! thread per process, parked on a condition variable until the earliest
//! deadline (to within the kernel's timer slack, some tens of
//! microseconds), wakes every waiter then due. All the job loops of one
//! instant wake together, so their claims go in one batch.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::oneshot;

/// What is waited for: deadlines and who waits for each.
#[derive(Default)]
struct Waiters {
    due: Mutex<Vec<(Instant, oneshot::Sender<()>)>>,
    changed: Condvar,
}

/// The waiters, once the alarm thread runs (`None` if it could not start).
fn waiters() -> Option<&'static Arc<Waiters>> {
    static WAITERS: OnceLock<Option<Arc<Waiters>>> = OnceLock::new();
    WAITERS
        .get_or_init(|| {
            let waiters = Arc::new(Waiters::default());
            let ringer = waiters.clone();
            let started = std::thread::Builder::new()
                .name("replicron-alarm".to_string())
                .stack_size(64 * 1024)
                .spawn(move || ring(&ringer));
            match started {
                Ok(_) => Some(waiters),
                Err(e) => {
                    tracing::warn!(
                        "no precise alarm thread ({e}); instants are waited for on tokio's timer"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Waits until `deadline`, precisely. Cancel-safe: a dropped wait is
/// forgotten at its deadline.
pub(crate) async fn until(deadline: Instant) {
    if deadline <= Instant::now() {
        return;
    }
    let (wake, woken) = oneshot::channel();
    let queued = waiters().is_some_and(|waiters| {
        let queued = waiters.due.lock().map(|mut due| due.push((deadline, wake)));
        waiters.changed.notify_one();
        queued.is_ok()
    });
    if !queued || woken.await.is_err() {
        // No alarm thread: tokio's timer, coarsely.
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// The alarm thread: wakes each waiter at its deadline.
fn ring(waiters: &Waiters) {
    let Ok(mut due) = waiters.due.lock() else {
        return;
    };
    loop {
        let now = Instant::now();
        let mut i = 0;
        while i < due.len() {
            if due[i].0 <= now {
                let (_, wake) = due.swap_remove(i);
                let _ = wake.send(());
            } else {
                i += 1;
            }
        }
        let next = due.iter().map(|(deadline, _)| *deadline).min();
        due = match next {
            None => match waiters.changed.wait(due) {
                Ok(due) => due,
                Err(_) => return,
            },
            Some(next) => match waiters.changed.wait_timeout(due, next - now) {
                Ok((due, _)) => due,
                Err(_) => return,
            },
        };
    }
}
