//! What a run does, as the scheduler sees it: an [`Action`] is started with
//! a [`RunContext`] and tells how it ended ([`Ending`]). A child process
//! ([`super::Process`]) is the daemon's kind of action; an async function
//! given to `Job::run` ([`FnAction`]) is the library's.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{oneshot, watch};

use super::Guard;
use crate::lease::keeper::{LeaseState, LeaseTimes};

/// What a run does. The daemon's child processes are one kind; an async
/// function given to `Job::run` is the other.
pub(crate) trait Action: Send + Sync + 'static {
    /// Runs once. It is called, and its future polled, inside a task of its
    /// own, so a panic (in either) ends the run, not the scheduler; once the
    /// context's stop signal has fired and `kill_grace` passed, the task is
    /// aborted.
    fn run(&self, ctx: RunContext) -> Pin<Box<dyn Future<Output = Ending> + Send>>;
}

/// How a run's action ended, as it tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ending {
    pub(crate) how: Ended,
    /// A process's exit code.
    pub(crate) exit_code: Option<i32>,
    /// The signal that ended a process.
    pub(crate) signal: Option<i32>,
    /// The tail of its output, or its error's text.
    pub(crate) output: String,
    /// The file its whole output is kept in (`output_store = "files"`).
    pub(crate) output_file: Option<String>,
}

/// See [`Ending`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It did its work (a process: exit code 0).
    Succeeded,
    /// It failed.
    Failed,
    /// It could not start (a program that does not exist).
    NotStarted,
}

impl Ending {
    /// An ending without a process behind it.
    pub(crate) fn of(how: Ended, output: String) -> Ending {
        Ending {
            how,
            exit_code: None,
            signal: None,
            output,
            output_file: None,
        }
    }
}

/// An async function as an [`Action`].
pub(crate) struct FnAction<F>(pub(crate) F);

impl<F, Fut, E> Action for FnAction<F>
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    fn run(&self, ctx: RunContext) -> Pin<Box<dyn Future<Output = Ending> + Send>> {
        ctx.report_started(None);
        let run = (self.0)(ctx);
        Box::pin(async move {
            match run.await {
                Ok(()) => Ending::of(Ended::Succeeded, String::new()),
                Err(e) => Ending::of(Ended::Failed, e.to_string()),
            }
        })
    }
}

/// Why a run is told to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// Its `timeout` passed.
    Timeout,
    /// Its lease could not be confirmed in time, or is another's.
    LeaseLost,
    /// The scheduler is shutting down (`immediate`: a second signal).
    Shutdown { immediate: bool },
}

/// What one run is for, and the signal that tells it to stop. Cheap to
/// clone.
#[derive(Clone)]
pub struct RunContext {
    pub(crate) job: Arc<str>,
    pub(crate) instant: DateTime<Utc>,
    pub(crate) fence: i64,
    pub(crate) attempt: u32,
    /// How the instant's attempt before this one ended, if it had one.
    pub(crate) previous_status: Option<crate::run::RunStatus>,
    /// What started this attempt, as its history row says.
    pub(crate) trigger: crate::run::Trigger,
    pub(crate) run_id: i64,
    pub(crate) instance: Arc<str>,
    pub(crate) stop: watch::Receiver<Option<StopReason>>,
    /// The lease's state, for a child process's guard deadlines.
    pub(crate) lease: watch::Receiver<LeaseState>,
    pub(crate) lease_times: LeaseTimes,
    pub(crate) kill_grace: Duration,
    pub(crate) guard: Option<Arc<Guard>>,
    pub(crate) started: Arc<std::sync::Mutex<Option<oneshot::Sender<Option<u32>>>>>,
    /// The parameters the run was given (with its job's defaults).
    pub(crate) params: Arc<crate::run::Params>,
    /// Why an operator started it (`trigger` or `backfill --reason`).
    pub(crate) reason: Option<Arc<str>>,
    /// The run's `run` span.
    pub(crate) span: tracing::Span,
    /// W3C `traceparent` and `tracestate` of the run's span, when traces
    /// are on.
    pub(crate) trace: Option<Arc<(String, String)>>,
}

impl RunContext {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The scheduled instant this run is for (UTC): the run's identity,
    /// the same on every replica.
    pub fn instant(&self) -> DateTime<Utc> {
        self.instant
    }

    /// The lease's fencing token: it grows with every claim of the job, so
    /// a write guarded by it can refuse a holder that lost its lease.
    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// The parameters the run was given, with its job's defaults for those
    /// it was not (`replicron trigger JOB --param NAME=VALUE`).
    pub fn params(&self) -> &std::collections::BTreeMap<String, String> {
        &self.params
    }

    /// Why the operator who started the run (`replicron trigger` or
    /// `backfill --reason`, the API, the dashboard) said they did, if they
    /// said.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The run's span (`run`: job, instant, fence, run id, attempt,
    /// trigger, replica). The action already runs inside it; a job that
    /// spawns tasks of its own parents their spans to it, and with
    /// OpenTelemetry traces on they join the run's trace.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The run's W3C trace context (`traceparent`), when replicron sends
    /// traces: what a job passes on to the services it calls.
    pub fn traceparent(&self) -> Option<&str> {
        self.trace.as_deref().map(|(parent, _)| parent.as_str())
    }

    /// The attempt's number, as its history row records it: 1, or more
    /// when the instant is retried (after a failure, or after its run's
    /// replica died, with `on_abandon = "rerun"`).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How the instant's attempt before this one ended (`failed`,
    /// `timed_out`, or `abandoned`: its replica died, or lost its lease,
    /// mid-run, and this attempt runs it again); `None` for its first.
    /// A rerun after `abandoned` may find some of the work done already.
    pub fn previous_status(&self) -> Option<&'static str> {
        self.previous_status.map(crate::run::RunStatus::as_str)
    }

    /// What started this attempt, as its history row's `triggered_by`
    /// says: `schedule`, `catch_up`, `manual`, `backfill`, `dependency`,
    /// or `retry` for the attempts after the first.
    pub fn trigger(&self) -> &'static str {
        self.trigger.as_str()
    }

    /// The run's row in `replicron_runs`.
    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    /// The replica running it.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Resolves when the run must stop: its timeout passed, its lease could
    /// not be confirmed in time (another replica may soon claim the job), or
    /// the scheduler is shutting down past its grace. The run then has
    /// `kill_grace` to return before it is dropped.
    pub async fn cancelled(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(Option::is_some).await;
    }

    /// Whether the run has been told to stop.
    pub fn is_cancelled(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Tells the scheduler the run has started (a process: its pid), which
    /// is when its lateness is measured and logged.
    pub(crate) fn report_started(&self, pid: Option<u32>) {
        if let Some(sender) = self.started.lock().ok().and_then(|mut s| s.take()) {
            let _ = sender.send(pid);
        }
    }
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("job", &self.job)
            .field("instant", &self.instant)
            .field("fence", &self.fence)
            .field("attempt", &self.attempt)
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}
