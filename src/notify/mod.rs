//! Telling someone: what MAILTO did, for a fleet. A job's failures, lost
//! leases, abandoned and missed instants and (if asked) its recoveries are
//! sent to a webhook and/or a local command; every run pings a URL in the
//! healthchecks.io convention (`/start`, then the URL or `/fail`).
//!
//! The replica that records an event sends it, so each event is sent once
//! across the fleet. Sending never delays a tick loop or a run: events and
//! pings go through a bounded queue to a task of their own ([`Notifier`]),
//! each delivery has a timeout and a bounded number of retries with
//! backoff, and every outcome is counted in
//! `replicron_notifications_total{job,event,result}`. A notification that
//! finally fails, or does not fit in the queue, is logged with its job and
//! run id. See `docs/design.md#failure-handling`.

#[cfg(feature = "daemon")]
mod send;
#[cfg(not(feature = "daemon"))]
#[path = "send_off.rs"]
mod send;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tracing::error;

pub(crate) use crate::config::notify::{Notify, Template};
use crate::history::{RunStatus, Trigger};
pub(crate) use crate::run::Event;

/// What is sent for one event: the JSON document a webhook receives, and
/// the `REPLICRON_*` variables and stdin of a command.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Notice {
    /// One line for people (chat webhooks show it as the message).
    pub(crate) text: String,
    /// The event.
    pub(crate) event: Event,
    /// The job.
    pub(crate) job: String,
    /// The instant (RFC 3339, UTC, ms).
    pub(crate) scheduled_at: String,
    /// The run's status in history.
    pub(crate) status: RunStatus,
    /// Its exit code, if its process exited.
    pub(crate) exit_code: Option<i32>,
    /// Its attempt (0: a missed instant, which had none).
    pub(crate) attempt: i32,
    /// The replica that ran it (or, for a missed instant, recorded it).
    pub(crate) instance: String,
    /// How long it ran, where known (for `long_running`: how long it had
    /// been running).
    pub(crate) duration_seconds: Option<f64>,
    /// For `late_start`: how long after it was due it started.
    pub(crate) late_seconds: Option<f64>,
    /// The tail of its output.
    pub(crate) output: String,
    /// Its row in `replicron_runs`.
    pub(crate) history_id: Option<i64>,
    /// What started it (`schedule`, `catch_up`, `manual`, …).
    pub(crate) trigger: Trigger,
}

/// The run (or the instant) a notice tells of: the fields of its history
/// row that a notice carries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Told<'a> {
    /// The job.
    pub(crate) job: &'a str,
    /// Its instant.
    pub(crate) instant: DateTime<Utc>,
    /// Its status in history.
    pub(crate) status: RunStatus,
    /// Its exit code, if its process exited.
    pub(crate) exit_code: Option<i32>,
    /// Its attempt (0: a missed instant, which had none).
    pub(crate) attempt: i32,
    /// The replica that ran it (or recorded it).
    pub(crate) instance: &'a str,
    /// How long it ran, where known (for `long_running`: how long it has
    /// been running).
    pub(crate) duration: Option<Duration>,
    /// Its output (the notice keeps the end).
    pub(crate) output: &'a str,
    /// Its row in `replicron_runs`.
    pub(crate) history_id: Option<i64>,
}

impl<'a> Told<'a> {
    /// An instant of `job` recorded with `status` as row `id` by
    /// `instance`, which ran nothing (a missed or skipped one).
    pub(crate) fn unrun(
        job: &'a str,
        instant: DateTime<Utc>,
        status: RunStatus,
        instance: &'a str,
        id: i64,
    ) -> Told<'a> {
        Told {
            job,
            instant,
            status,
            exit_code: None,
            attempt: 0,
            instance,
            duration: None,
            output: "",
            history_id: Some(id),
        }
    }
}

/// The most of a run's output a notification carries (its end).
const OUTPUT_TAIL: usize = 4096;

impl Notice {
    /// A notice of `event` for the run `told`.
    pub(crate) fn new(event: Event, told: Told<'_>) -> Notice {
        let Told {
            job,
            instant,
            status,
            exit_code,
            attempt,
            instance,
            duration,
            output,
            history_id,
        } = told;
        let scheduled_at = crate::schedule::fmt_instant(instant);
        let code = exit_code
            .map(|c| format!(" (exit {c})"))
            .unwrap_or_default();
        let text = match event {
            Event::Recovered => {
                format!("replicron: {job} succeeded again at {scheduled_at} on {instance}")
            }
            Event::Missed => {
                format!("replicron: {job} did not run at {scheduled_at}: no replica claimed it")
            }
            Event::Abandoned => format!(
                "replicron: {job} at {scheduled_at} was abandoned: its replica {instance} vanished"
            ),
            Event::LongRunning => format!(
                "replicron: {job} at {scheduled_at} is still running{after} on {instance}{run}",
                after = duration
                    .map(|d| format!(" after {}", rounded(d)))
                    .unwrap_or_default(),
                run = history_id
                    .map(|id| format!(" (run {id})"))
                    .unwrap_or_default(),
            ),
            Event::LateStart => format!(
                "replicron: {job} at {scheduled_at} started late on {instance}{run}",
                run = history_id
                    .map(|id| format!(" (run {id})"))
                    .unwrap_or_default(),
            ),
            _ => format!(
                "replicron: {job} {status}{code} at {scheduled_at} on {instance}",
                status = status.as_str()
            ),
        };
        let mut start = output.len().saturating_sub(OUTPUT_TAIL);
        while !output.is_char_boundary(start) {
            start += 1;
        }
        Notice {
            text,
            event,
            job: job.to_string(),
            scheduled_at,
            status,
            exit_code,
            attempt,
            instance: instance.to_string(),
            duration_seconds: duration.map(|d| d.as_secs_f64()),
            late_seconds: None,
            output: output[start..].to_string(),
            history_id,
            trigger: Trigger::Schedule,
        }
    }

    /// This notice of a run that started `late` after it was due
    /// (`late_start`); its text says how late.
    pub(crate) fn late_by(mut self, late: Duration) -> Notice {
        self.late_seconds = Some(late.as_secs_f64());
        self.text
            .push_str(&format!(", {} after it was due", rounded(late)));
        self
    }

    /// This notice of a run that `trigger` started; its text says so
    /// where that was not the schedule.
    pub(crate) fn started_by(mut self, trigger: Trigger) -> Notice {
        self.trigger = trigger;
        if trigger != Trigger::Schedule {
            self.text.push_str(&format!(" ({trigger} run)"));
        }
        self
    }
}

/// `d` for people: to the second, or to the millisecond under one.
fn rounded(d: Duration) -> String {
    let d = if d >= Duration::from_secs(1) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(d).to_string()
}

/// A ping of a run, in the healthchecks.io convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ping {
    /// `<url>/start`: the run started.
    Start,
    /// `<url>`: it succeeded.
    Success,
    /// `<url>/fail`: it did not.
    Fail,
}

impl Ping {
    fn suffix(self) -> &'static str {
        match self {
            Ping::Start => "/start",
            Ping::Success => "",
            Ping::Fail => "/fail",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Ping::Start => "ping_start",
            Ping::Success => "ping_success",
            Ping::Fail => "ping_fail",
        }
    }
}

enum Message {
    Event {
        notify: Arc<Notify>,
        notice: Notice,
    },
    Ping {
        notify: Arc<Notify>,
        job: String,
        ping: Ping,
        run_id: i64,
    },
}

/// How many of the notifications this replica sent (or failed to send)
/// are kept for the dashboard and the API.
const RECENT: usize = 200;

/// One notification this replica sent or failed to send.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Sent {
    /// When its last try ended (UTC, RFC 3339 with ms).
    pub(crate) at: String,
    /// The job.
    pub(crate) job: String,
    /// The event (`failed`, `missed`, …) or the ping (`start`, `success`, `fail`).
    pub(crate) event: &'static str,
    /// The history row it is about, if any.
    pub(crate) run_id: Option<i64>,
    /// `webhook`, `command` or `ping`.
    pub(crate) to: &'static str,
    /// `sent`, `failed` or `dropped`.
    pub(crate) result: &'static str,
    /// Why it failed (URLs' credentials hidden).
    pub(crate) error: Option<String>,
}

/// The newest [`RECENT`] notifications of one scheduler (a replica),
/// oldest first: each scheduler keeps its own, so that two in one process
/// (a library's host) show theirs apart.
#[derive(Clone, Debug, Default)]
pub(crate) struct SentLog(Arc<std::sync::Mutex<std::collections::VecDeque<Sent>>>);

impl SentLog {
    /// Records a notification's result: counted in
    /// `replicron_notifications_total` and kept for [`SentLog::recent`].
    pub(crate) fn record(
        &self,
        job: &str,
        event: &'static str,
        run_id: Option<i64>,
        to: &'static str,
        result: &'static str,
        error: Option<String>,
    ) {
        crate::telemetry::notification(job, event, result);
        let sent = Sent {
            at: crate::schedule::fmt_instant(Utc::now()),
            job: job.to_string(),
            event,
            run_id,
            to,
            result,
            error: error.map(|e| crate::db::redact(&e)),
        };
        if let Ok(mut all) = self.0.lock() {
            if all.len() >= RECENT {
                all.pop_front();
            }
            all.push_back(sent);
        }
    }

    /// The notifications sent or not sent, newest first.
    pub(crate) fn recent(&self) -> Vec<Sent> {
        self.0
            .lock()
            .map(|all| all.iter().rev().cloned().collect())
            .unwrap_or_default()
    }
}

/// How many notifications may wait to be sent; beyond, one is dropped and
/// logged.
const QUEUE: usize = 1000;
/// How many are sent at once.
const IN_FLIGHT: usize = 16;

/// Sends events and pings off the tick loops: see the module's docs.
pub(crate) struct Notifier {
    queue: mpsc::Sender<Message>,
    jobs: RwLock<HashMap<String, Arc<Notify>>>,
    /// Queued or being sent.
    outstanding: Arc<AtomicUsize>,
    /// What was sent, or not.
    log: SentLog,
    dispatcher: JoinHandle<()>,
}

impl Notifier {
    /// Starts the sending task, which keeps what it sends in `log`.
    pub(crate) fn start(log: SentLog) -> Arc<Notifier> {
        let (queue, messages) = mpsc::channel(QUEUE);
        let outstanding = Arc::new(AtomicUsize::new(0));
        Arc::new(Notifier {
            queue,
            jobs: RwLock::new(HashMap::new()),
            outstanding: outstanding.clone(),
            log: log.clone(),
            dispatcher: tokio::spawn(dispatch(messages, outstanding, log)),
        })
    }

    /// The notification settings of every job from now on (at start and
    /// at each reload).
    pub(crate) fn set_jobs<'j>(
        &self,
        jobs: impl IntoIterator<Item = (&'j str, Option<&'j Arc<Notify>>)>,
    ) {
        let map = jobs
            .into_iter()
            .filter_map(|(job, notify)| Some((job.to_string(), notify?.clone())))
            .filter(|(_, notify)| notify.is_set())
            .collect();
        if let Ok(mut jobs) = self.jobs.write() {
            *jobs = map;
        }
    }

    fn of(&self, job: &str) -> Option<Arc<Notify>> {
        self.jobs.read().ok()?.get(job).cloned()
    }

    /// Whether `job` sends `event`.
    pub(crate) fn wants(&self, job: &str, event: Event) -> bool {
        self.of(job)
            .is_some_and(|n| n.on.contains(&event) && (n.webhook.is_some() || n.command.is_some()))
    }

    /// Queues `notice` (of `job`'s event) if the job sends that event.
    pub(crate) fn event(&self, notice: Notice) {
        let Some(notify) = self.of(&notice.job) else {
            return;
        };
        let wanted = notify.on.contains(&notice.event);
        if !wanted || (notify.webhook.is_none() && notify.command.is_none()) {
            return;
        }
        let (job, event, id) = (notice.job.clone(), notice.event.as_str(), notice.history_id);
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        if self
            .queue
            .try_send(Message::Event { notify, notice })
            .is_err()
        {
            self.outstanding.fetch_sub(1, Ordering::SeqCst);
            self.log.record(&job, event, id, "queue", "dropped", None);
            error!(job = %job, event, run_id = id, "notification dropped: {QUEUE} are already waiting to be sent");
        }
    }

    /// Queues a ping of run `run_id` of `job`, if the job has a ping URL.
    pub(crate) fn ping(&self, job: &str, ping: Ping, run_id: i64) {
        let Some(notify) = self.of(job) else {
            return;
        };
        if notify.ping_url.is_none() {
            return;
        }
        let message = Message::Ping {
            notify,
            job: job.to_string(),
            ping,
            run_id,
        };
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        if self.queue.try_send(message).is_err() {
            self.outstanding.fetch_sub(1, Ordering::SeqCst);
            self.log
                .record(job, ping.label(), Some(run_id), "ping", "dropped", None);
            error!(job = %job, run_id, "ping dropped: {QUEUE} notifications are already waiting to be sent");
        }
    }
}

impl Notifier {
    /// At shutdown: waits at most `timeout` for what is queued or being
    /// sent, and logs how many were not sent; returns that number.
    pub(crate) async fn flush(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let unsent = self.outstanding.load(Ordering::SeqCst);
            if unsent == 0 {
                return 0;
            }
            if tokio::time::Instant::now() >= deadline {
                error!(
                    unsent,
                    "notifications not sent before exit (their webhooks or commands did not answer in time)"
                );
                return unsent;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.dispatcher.abort();
    }
}

/// The most pings of one job that may wait behind its earlier ones (whose
/// ping URL is slow or hangs); beyond, new pings of that job are dropped.
const PING_BACKLOG: usize = 100;

/// A job's pings in flight: the last one sent or waiting, and how many wait.
#[derive(Default)]
struct PingChain {
    last: Option<JoinHandle<()>>,
    pending: Arc<AtomicUsize>,
}

/// Takes messages off the queue and sends each in a task of its own, at
/// most [`IN_FLIGHT`] at once; a job's pings go out in order. A ping takes
/// its sending slot only once the job's previous ping is done, so a ping
/// URL that hangs delays that job's pings, never another job's
/// notifications.
async fn dispatch(
    mut messages: mpsc::Receiver<Message>,
    outstanding: Arc<AtomicUsize>,
    log: SentLog,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut chains: HashMap<String, PingChain> = HashMap::new();
    while let Some(message) = messages.recv().await {
        match message {
            Message::Event { notify, notice } => {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (outstanding, log) = (outstanding.clone(), log.clone());
                tokio::spawn(async move {
                    send::event(&notify, &notice, &log).await;
                    drop(slot);
                    outstanding.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Message::Ping {
                notify,
                job,
                ping,
                run_id,
            } => {
                chains.retain(|_, c| c.last.as_ref().is_some_and(|h| !h.is_finished()));
                let chain = chains.entry(job.clone()).or_default();
                if chain.pending.load(Ordering::SeqCst) >= PING_BACKLOG {
                    outstanding.fetch_sub(1, Ordering::SeqCst);
                    log.record(&job, ping.label(), Some(run_id), "ping", "dropped", None);
                    error!(
                        job = %job,
                        run_id,
                        "ping dropped: {PING_BACKLOG} earlier pings of this job are still waiting \
                         (its ping URL does not answer)"
                    );
                    continue;
                }
                chain.pending.fetch_add(1, Ordering::SeqCst);
                let previous = chain.last.take();
                let (slots, pending, outstanding, log) = (
                    slots.clone(),
                    chain.pending.clone(),
                    outstanding.clone(),
                    log.clone(),
                );
                chain.last = Some(tokio::spawn(async move {
                    // The start of a run before its end, whatever the network.
                    if let Some(previous) = previous {
                        let _ = previous.await;
                    }
                    if let Ok(slot) = slots.acquire_owned().await {
                        send::ping(&notify, &job, ping, run_id, &log).await;
                        drop(slot);
                    }
                    pending.fetch_sub(1, Ordering::SeqCst);
                    outstanding.fetch_sub(1, Ordering::SeqCst);
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_variables_and_never_show_them() {
        let t = Template::parse("Bearer ${TOKEN}-${SUFFIX_2}").expect("valid");
        assert_eq!(t.vars(), ["TOKEN", "SUFFIX_2"]);
        let env = |name: &str| match name {
            "TOKEN" => Some("s3cret".to_string()),
            "SUFFIX_2" => Some("x".to_string()),
            _ => None,
        };
        assert_eq!(t.render(env).expect("rendered"), "Bearer s3cret-x");
        assert!(!format!("{t:?}").contains("s3cret"));
        assert_eq!(
            Template::parse("${NOPE}").expect("valid").render(env),
            Err("${NOPE} is not set in replicron's environment".to_string())
        );
        assert!(Template::parse("a ${OPEN").is_err());
        assert!(Template::parse("${1X}").is_err());
        assert!(Template::parse("${}").is_err());
        assert_eq!(
            Template::parse("plain").expect("valid").vars(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn events_by_name_and_status() {
        for event in Event::ALL {
            assert_eq!(event.as_str().parse::<Event>(), Ok(event));
        }
        assert!(
            "fail"
                .parse::<Event>()
                .is_err_and(|e| e.contains("failed, timed_out"))
        );
        assert!(!Event::defaults().contains(&Event::Recovered));
        assert_eq!(Event::defaults().len(), Event::ALL.len() - 1);
        assert_eq!(Event::of_status(RunStatus::Killed), None);
        assert_eq!(Event::of_status(RunStatus::Missed), Some(Event::Missed));
    }

    #[test]
    fn long_and_late_runs_are_told_with_their_replica_and_run() {
        let instant = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let notice = |event| {
            Notice::new(
                event,
                Told {
                    job: "nightly",
                    instant,
                    status: RunStatus::Running,
                    exit_code: None,
                    attempt: 1,
                    instance: "web-2",
                    duration: Some(Duration::from_secs(20 * 60))
                        .filter(|_| event == Event::LongRunning),
                    output: "",
                    history_id: Some(7),
                },
            )
        };
        let long = notice(Event::LongRunning);
        assert_eq!(
            long.text,
            "replicron: nightly at 2027-01-15T08:00:00.000Z is still running after 20m on web-2 (run 7)"
        );
        let late = notice(Event::LateStart).late_by(Duration::from_millis(125_400));
        assert_eq!(
            late.text,
            "replicron: nightly at 2027-01-15T08:00:00.000Z started late on web-2 (run 7), 2m 5s after it was due"
        );
        let json = serde_json::to_value(&late).expect("json");
        assert_eq!(json["event"], "late_start");
        assert_eq!(json["status"], "running");
        assert_eq!(json["late_seconds"], 125.4);
        assert_eq!(
            serde_json::to_value(&long).expect("json")["duration_seconds"],
            1200.0
        );
    }

    #[test]
    fn a_notice_carries_the_end_of_long_output() {
        let output = format!("{}é{}", "a".repeat(5000), "end");
        let notice = Notice::new(
            Event::Failed,
            Told {
                job: "billing",
                instant: DateTime::from_timestamp(1_800_000_000, 0).expect("time"),
                status: RunStatus::Failed,
                exit_code: Some(3),
                attempt: 2,
                instance: "web-1",
                duration: Some(Duration::from_millis(1500)),
                output: &output,
                history_id: Some(42),
            },
        );
        assert!(notice.output.len() <= OUTPUT_TAIL && notice.output.ends_with("éend"));
        assert_eq!(
            notice.text,
            "replicron: billing failed (exit 3) at 2027-01-15T08:00:00.000Z on web-1"
        );
        let json = serde_json::to_value(&notice).expect("json");
        assert_eq!(json["history_id"], 42);
        assert_eq!(json["duration_seconds"], 1.5);
        assert_eq!(json["event"], "failed");
    }
}
