//! History writes that must not be lost. A run's end that could not be
//! written at once, its lease confirmations and the marking of abandoned
//! runs are queued here and written in order by one task; a write that
//! fails because the database is away is retried until it lands, so a run
//! that finished during an outage still gets its status, output and
//! `finished_at`. The queue is bounded; at shutdown what cannot be written
//! is reported by name.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::backoff::Backoff;
use tracing::{debug, error, warn};

use super::RunFinish;
use crate::db::health::{DbState, Health};
use crate::db::{DbError, Store};
use crate::history;

/// How many writes wait at most; past that the oldest is dropped (and
/// reported), so an endless outage cannot exhaust memory.
const MAX_PENDING: usize = 10_000;

/// One history write.
#[derive(Clone, Debug)]
pub(crate) enum Write {
    /// Run `id` of `job` ended.
    Finished {
        /// The job, for messages.
        job: String,
        /// The run.
        id: i64,
        /// How it ended.
        finish: RunFinish,
    },
    /// Run `id` of `job` had its lease confirmed.
    Confirmed {
        /// The job, for messages.
        job: String,
        /// The run.
        id: i64,
    },
    /// Runs of `job` still `running` under a fence below `fence` lost their
    /// holder.
    Abandoned {
        /// The job.
        job: String,
        /// The new holder's fence.
        fence: i64,
    },
}

impl Write {
    fn describe(&self) -> String {
        match self {
            Write::Finished { job, id, finish } => {
                format!("the end of run {id} of {job} ({})", finish.status)
            }
            Write::Confirmed { job, id } => {
                format!("the lease confirmation of run {id} of {job}")
            }
            Write::Abandoned { job, fence } => {
                format!("marking runs of {job} before fence {fence} abandoned")
            }
        }
    }

    fn apply(
        &self,
        conn: &mut crate::db::DbConnection,
        on_abandoned: &history::OnAbandoned,
    ) -> Result<(), DbError> {
        match self {
            // The journal's writes are the late ones.
            Write::Finished { id, finish, .. } => {
                history::record_run_finished(conn, *id, finish, true)
                    .map(drop)
                    .map_err(|e| DbError::query("recording a run's end", e))
            }
            Write::Confirmed { id, .. } => history::record_run_confirmed(conn, *id)
                .map(drop)
                .map_err(|e| DbError::query("recording a lease confirmation", e)),
            Write::Abandoned { job, fence } => {
                let marked = history::mark_abandoned(conn, job, *fence)
                    .map_err(|e| DbError::query("marking abandoned runs", e))?;
                if !marked.is_empty() {
                    warn!(job = %job, runs = marked.len(), "marked runs of a vanished holder abandoned");
                    on_abandoned(&marked);
                }
                Ok(())
            }
        }
    }
}

/// How many writes are not in the database yet, mirrored in the
/// `replicron_history_pending_writes` gauge at every change.
#[derive(Default)]
struct Pending(AtomicUsize);

impl Pending {
    fn add(&self) {
        let now = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        crate::telemetry::pending_history_writes(now);
    }

    fn done(&self) {
        let now = self.0.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
        crate::telemetry::pending_history_writes(now);
    }
}

enum Message {
    Write(Write),
    Flush(Duration, oneshot::Sender<Vec<String>>),
}

/// The queue's handle.
#[derive(Clone)]
pub(crate) struct Journal {
    sender: mpsc::UnboundedSender<Message>,
    pending: Arc<Pending>,
}

impl Journal {
    /// Starts the writer task.
    pub(crate) fn start(
        store: Store,
        health: Arc<Health>,
        on_abandoned: history::OnAbandoned,
    ) -> Journal {
        let (sender, receiver) = mpsc::unbounded_channel();
        let pending = Arc::new(Pending::default());
        tokio::spawn(writer(
            store,
            health,
            receiver,
            pending.clone(),
            on_abandoned,
        ));
        Journal { sender, pending }
    }

    /// Queues `write`.
    pub(crate) fn push(&self, write: Write) {
        self.pending.add();
        if let Err(e) = self.sender.send(Message::Write(write)) {
            self.pending.done();
            if let Message::Write(write) = e.0 {
                error!(
                    "history write lost, the writer is gone: {}",
                    write.describe()
                );
            }
        }
    }

    /// Waits up to `timeout` for every queued write to land; returns the
    /// ones that did not, described by job and run.
    pub(crate) async fn flush(&self, timeout: Duration) -> Vec<String> {
        let (done, result) = oneshot::channel();
        if self.sender.send(Message::Flush(timeout, done)).is_err() {
            return Vec::new();
        }
        result.await.unwrap_or_default()
    }
}

async fn writer(
    store: Store,
    health: Arc<Health>,
    mut receiver: mpsc::UnboundedReceiver<Message>,
    pending: Arc<Pending>,
    on_abandoned: history::OnAbandoned,
) {
    let mut queue: VecDeque<Write> = VecDeque::new();
    let mut flushes: Vec<(tokio::time::Instant, oneshot::Sender<Vec<String>>)> = Vec::new();
    let mut states = health.subscribe();
    let mut retry = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        // Take in whatever arrived.
        while let Ok(message) = receiver.try_recv() {
            accept(message, &mut queue, &mut flushes, &pending);
        }
        if let Some(write) = queue.front().cloned() {
            let (attempt, on_abandoned) = (write.clone(), on_abandoned.clone());
            match store
                .run(move |conn| attempt.apply(conn, &on_abandoned))
                .await
            {
                Ok(()) => {
                    queue.pop_front();
                    pending.done();
                    retry.reset();
                }
                // An error is taken as a refusal only when it is not one
                // to wait out (unreachable, or a lock given up: a deadlock,
                // a lock wait timeout, SQLite's busy database) and the
                // database does answer.
                Err(e) if !e.is_transient() && store.ping().await.is_ok() => {
                    // The database answers and refused it: retrying cannot help.
                    queue.pop_front();
                    pending.done();
                    error!("history write failed: {}: {e}", write.describe());
                }
                Err(e) => {
                    debug!("history write delayed ({}): {e}", write.describe());
                    // Wait a while, or until the database is back; keep
                    // taking in writes meanwhile.
                    tokio::select! {
                        () = retry.wait() => {}
                        _ = states.wait_for(|s| *s == DbState::Up) => {}
                        message = receiver.recv() => {
                            if let Some(message) = message {
                                accept(message, &mut queue, &mut flushes, &pending);
                            }
                        }
                    }
                }
            }
        } else {
            for (_, done) in flushes.drain(..) {
                let _ = done.send(Vec::new());
            }
            match receiver.recv().await {
                Some(message) => accept(message, &mut queue, &mut flushes, &pending),
                None => return,
            }
        }
        expire_flushes(&mut flushes, &queue);
    }
}

fn accept(
    message: Message,
    queue: &mut VecDeque<Write>,
    flushes: &mut Vec<(tokio::time::Instant, oneshot::Sender<Vec<String>>)>,
    pending: &Pending,
) {
    match message {
        Message::Write(write) => {
            queue.push_back(write);
            if queue.len() > MAX_PENDING
                && let Some(dropped) = queue.pop_front()
            {
                pending.done();
                error!(
                    "history queue full ({MAX_PENDING} writes waiting for the database): dropped {}",
                    dropped.describe()
                );
            }
        }
        Message::Flush(timeout, done) => {
            flushes.push((tokio::time::Instant::now() + timeout, done))
        }
    }
}

/// Answers the flushes whose time is up.
fn expire_flushes(
    flushes: &mut Vec<(tokio::time::Instant, oneshot::Sender<Vec<String>>)>,
    queue: &VecDeque<Write>,
) {
    let now = tokio::time::Instant::now();
    let mut kept = Vec::new();
    for (deadline, done) in flushes.drain(..) {
        if now >= deadline {
            let _ = done.send(queue.iter().map(Write::describe).collect());
        } else {
            kept.push((deadline, done));
        }
    }
    *flushes = kept;
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::{Journal, Write};
    use crate::db::health::{DbState, Health};
    use crate::db::{Pool, Store};
    use crate::history::{self, NewRun, RunFinish, RunRow, RunStatus};
    use crate::schedule::{Clock, TokioClock};
    use crate::testing::TestDb;

    fn instant() -> DateTime<Utc> {
        "2030-01-01T00:00:10Z".parse().expect("instant")
    }

    /// A run of `job` recorded started, as a replica of its own (no lease
    /// row) records it.
    fn started(conn: &mut crate::db::DbConnection, job: &str) -> i64 {
        history::record_run_started(
            conn,
            &NewRun {
                job: job.to_string(),
                scheduled_at: instant(),
                attempt: 1,
                instance: "me".to_string(),
                fence: 0,
                once_key: None,
                scope: String::new(),
                lease_row: None,
                trigger: Default::default(),
                params: None,
            },
        )
        .expect("start")
    }

    fn finished(job: &str, id: i64, status: RunStatus) -> Write {
        Write::Finished {
            job: job.to_string(),
            id,
            finish: RunFinish {
                status,
                exit_code: Some(0),
                output: "done\n".to_string(),
                duration: Duration::from_millis(5),
                output_file: None,
            },
        }
    }

    fn row(db: &TestDb, id: i64) -> RunRow {
        history::find_runs(&mut db.connect(), &[id])
            .expect("read")
            .pop()
            .expect("the row")
    }

    /// Queued writes (a lease confirmation, then the ends of two runs)
    /// land, and a flush returns once they have, with nothing left over.
    /// On the paused clock.
    #[tokio::test(start_paused = true)]
    async fn queued_writes_land_and_a_flush_waits_for_them() {
        let db = TestDb::sqlite();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(instant()));
        let pool = Pool::connect(&db.database_url(), 2, clock.clone()).expect("pool");
        pool.migrate().expect("migrate");
        let mut conn = crate::db::establish_with(&db.database_url(), &clock).expect("connect");
        let (first, second) = (started(&mut conn, "first"), started(&mut conn, "second"));
        let health = Arc::new(Health::new(Arc::default()));
        let journal = Journal::start(
            Store::new(pool).reporting_to(health.clone()),
            health,
            Arc::new(|_: &[RunRow]| {}),
        );
        journal.push(Write::Confirmed {
            job: "first".to_string(),
            id: first,
        });
        journal.push(finished("first", first, RunStatus::Succeeded));
        journal.push(finished("second", second, RunStatus::Failed));
        assert_eq!(
            journal.flush(Duration::from_secs(5)).await,
            Vec::<String>::new()
        );
        let (first, second) = (row(&db, first), row(&db, second));
        assert_eq!(first.status, RunStatus::Succeeded, "{first:?}");
        assert!(
            first.finished_at.is_some() && first.confirmed_at.is_some(),
            "{first:?}"
        );
        assert_eq!(first.output, "done\n");
        assert_eq!(second.status, RunStatus::Failed, "{second:?}");
    }

    /// A run's end queued while the database is locked by another writer
    /// (calls get no answer in time: the database counts as down) waits;
    /// a flush that gives up meanwhile names it; once the lock is gone it
    /// lands, and the database is up again. On the real clock: SQLite's
    /// lock is a real one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_end_queued_while_the_database_is_locked_lands_after() {
        use diesel::connection::SimpleConnection;
        let db = TestDb::sqlite();
        let pool = db.pool(4).with_call_timeout(Duration::from_millis(200));
        let id = started(&mut db.connect(), "nightly");
        let health = Arc::new(Health::new(Arc::default()));
        let states = health.subscribe();
        let journal = Journal::start(
            Store::new(pool).reporting_to(health.clone()),
            health,
            Arc::new(|_: &[RunRow]| {}),
        );
        let mut locker = db.connect();
        locker.batch_execute("BEGIN IMMEDIATE").expect("lock");
        journal.push(finished("nightly", id, RunStatus::Succeeded));
        assert_eq!(
            journal.flush(Duration::from_millis(700)).await,
            vec![format!("the end of run {id} of nightly (succeeded)")]
        );
        assert_eq!(*states.borrow(), DbState::Down);
        locker.batch_execute("COMMIT").expect("unlock");
        assert_eq!(
            journal.flush(Duration::from_secs(20)).await,
            Vec::<String>::new()
        );
        assert_eq!(row(&db, id).status, RunStatus::Succeeded);
        assert_eq!(*states.borrow(), DbState::Up);
    }
}
