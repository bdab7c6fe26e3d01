//! Child processes: how a run of a job that is a command is started,
//! watched, stopped and heard. A [`Process`] is the daemon's kind of
//! [`Action`].
//!
//! Every run gets its own process group. A job must not outlive its
//! replica, even one killed with SIGKILL: the run's own process gets a
//! parent-death signal (SIGKILL) set before it execs the job (by
//! util-linux's setpriv where the host has it, else between fork and exec),
//! and the whole group, grandchildren included, is killed by the [`Guard`]
//! when the replica dies. Timeouts, lost leases and shutdown signal the
//! whole group: SIGTERM, then SIGKILL after the job's `kill_grace`. The
//! output is read by [`output`].

mod action;
mod guard;
pub(crate) mod kept;
pub(crate) mod live;
pub(crate) mod memory;
pub(crate) mod output;
pub(crate) mod pid1;
pub(crate) mod resources;
mod spawn;
pub(crate) mod users;

pub use self::action::RunContext;
pub(crate) use self::action::{Action, Ended, Ending, FnAction, StopReason};
pub(crate) use self::guard::{GUARD_COMMAND, Guard, fork_early as fork_early_guard, guard};

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::task::JoinHandle;

use self::live::{Live, read_stream};
use self::output::{Output, Stream};
use crate::config::Command;
use crate::lease::keeper::{Deadlines, LeaseState};

/// After the job's own process exits, how long its output may still drain
/// before what it left behind in its group is killed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// A job that is a command: what to execute, with what environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Process {
    /// What to execute.
    pub(crate) command: Command,
    /// The job's `env`; the `REPLICRON_*` variables of each run are added.
    pub(crate) env: BTreeMap<String, String>,
    /// The working directory, if set.
    pub(crate) working_dir: Option<PathBuf>,
    /// How many bytes of output tail to keep.
    pub(crate) output_limit: u64,
    /// Where and how much of its whole output to keep in files
    /// (`output_store = "files"`), if it does.
    pub(crate) output_files: Option<crate::config::OutputFiles>,
    /// Give the run this process's stdin, stdout and stderr instead of
    /// capturing its output (`replicron exec`).
    pub(crate) inherit_stdio: bool,
    /// Variables of this process's environment the run must not see (the
    /// ones the job file's notification settings read secrets from).
    pub(crate) hidden_env: Vec<String>,
    /// The user (and group) to run as, if not replicron's own.
    pub(crate) run_as: Option<crate::config::RunAs>,
    /// The secret parameters whose default is read from a file at each
    /// run's start, for a run not given a value for them.
    pub(crate) secret_sources: Vec<(String, crate::config::params::SecretSource)>,
    /// The job's `secret_params`: their values, given or default, are
    /// masked in the run's output.
    pub(crate) secret_params: Vec<String>,
    /// The job's `secret_env`: each variable's value is read from its file
    /// at each run's start, and masked in the run's output.
    pub(crate) secret_env: Vec<(String, crate::config::params::SecretSource)>,
    /// What the run may use of the host.
    pub(crate) resources: crate::config::resources::Resources,
}

impl Action for Process {
    fn run(&self, ctx: RunContext) -> Pin<Box<dyn Future<Output = Ending> + Send>> {
        let process = self.clone();
        Box::pin(async move { process.run_for(ctx).await })
    }
}

impl Process {
    /// The environment of one run: the job's `env`, its parameters and the
    /// `REPLICRON_*` variables.
    fn env_for(&self, ctx: &RunContext) -> Result<BTreeMap<String, String>, String> {
        let mut env = self.env.clone();
        env.extend(ctx.params().iter().map(|(k, v)| (k.clone(), v.clone())));
        for (name, source) in &self.secret_sources {
            if !ctx.params().contains_key(name) {
                env.insert(name.clone(), source.read(name)?);
            }
        }
        for (name, source) in &self.secret_env {
            env.insert(name.clone(), source.read_env(name)?);
        }
        env.insert("REPLICRON_JOB".into(), ctx.job().to_string());
        env.insert(
            "REPLICRON_SCHEDULED_AT".into(),
            crate::schedule::fmt_instant(ctx.instant()),
        );
        env.insert("REPLICRON_RUN_ID".into(), ctx.run_id().to_string());
        env.insert("REPLICRON_FENCE".into(), ctx.fence().to_string());
        env.insert("REPLICRON_INSTANCE".into(), ctx.instance().to_string());
        env.insert("REPLICRON_ATTEMPT".into(), ctx.attempt().to_string());
        env.insert("REPLICRON_TRIGGER".into(), ctx.trigger().to_string());
        if let Some(reason) = ctx.reason() {
            env.insert("REPLICRON_REASON".into(), reason.to_string());
        }
        if let Some(previous) = ctx.previous_status() {
            env.insert("REPLICRON_PREVIOUS_STATUS".into(), previous.to_string());
        }
        // The run's trace, for the job's own spans to join (W3C).
        if let Some((parent, state)) = ctx.trace.as_deref() {
            env.insert("TRACEPARENT".into(), parent.clone());
            if !state.is_empty() {
                env.insert("TRACESTATE".into(), state.clone());
            }
        }
        Ok(env)
    }

    /// Runs the command for `ctx`: spawned, watched, stopped when told to,
    /// its guard deadlines kept in step with its lease.
    async fn run_for(self, ctx: RunContext) -> Ending {
        let env = match self.env_for(&ctx) {
            Ok(env) => env,
            Err(e) => {
                return Ending::of(Ended::NotStarted, format!("replicron: not started: {e}\n"));
            }
        };
        let spec = RunSpec {
            job: ctx.job().to_string(),
            run_id: ctx.run_id(),
            command: self.command.clone(),
            working_dir: self.working_dir.clone(),
            output_limit: self.output_limit,
            output_files: self.output_files.clone(),
            inherit_stdio: self.inherit_stdio,
            hidden_env: self.hidden_env.clone(),
            run_as: self.run_as.clone(),
            resources: self.resources,
            secrets: self
                .secret_params
                .iter()
                .chain(self.secret_env.iter().map(|(name, _)| name))
                .filter_map(|name| env.get(name).cloned())
                .collect(),
            env,
        };
        let mut lease = ctx.lease.clone();
        let deadlines = |state: LeaseState| match state {
            LeaseState::Held(confirmed) => ctx.lease_times.deadlines(confirmed),
            LeaseState::Lost => ctx
                .lease_times
                .deadlines(tokio::time::Instant::now() - ctx.lease_times.lease),
        };
        let first = deadlines(*lease.borrow_and_update());
        // The process may start until its lease's confirmation deadline, no
        // later: it checks so itself, right before its exec.
        let not_after = tokio::time::Instant::now() + first.term;
        // The lease's confirmation deadline has passed (or the lease is
        // lost) between the executor's check and here: the guard would stop
        // the run at once, so it is not started at all.
        if first.term.is_zero() {
            return Ending::of(
                Ended::NotStarted,
                "replicron: not started: its lease could not be confirmed in time\n".to_string(),
            );
        }
        // A cgroup of its own where the replica has them and the job sets
        // a limit one holds.
        let mut cgroup = match resources::enforcement() {
            resources::Enforcement::Cgroup(base)
                if spec.resources.memory_max.is_some()
                    || spec.resources.cpu_max.is_some()
                    || spec.resources.tasks_max.is_some() =>
            {
                match resources::RunCgroup::create(
                    base,
                    ctx.run_id(),
                    &spec.resources,
                    resources::cpus(),
                ) {
                    Ok(cgroup) => Some(cgroup),
                    Err(e) => {
                        return Ending::of(
                            Ended::NotStarted,
                            format!("replicron: cannot start the run: its cgroup: {e}\n"),
                        );
                    }
                }
            }
            _ => None,
        };
        let started = spawn(
            &spec,
            ctx.guard.as_deref(),
            first,
            Some(not_after),
            cgroup.as_ref(),
        )
        .await;
        if started.is_err()
            && let Some(cgroup) = cgroup.take()
        {
            tokio::spawn(cgroup.remove());
        }
        let mut running = match started {
            Ok(running) => running,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Ending::of(Ended::NotStarted, format!("replicron: not started: {e}\n"));
            }
            Err(e) => {
                return Ending::of(
                    Ended::NotStarted,
                    format!("replicron: cannot start the run: {e}\n"),
                );
            }
        };
        ctx.report_started(Some(running.group().as_raw() as u32));
        // Watchable from the dashboard while it runs (not a run that has
        // this process's own stdio).
        let _live = (!spec.inherit_stdio)
            .then(|| live::register(ctx.instance.clone(), ctx.run_id(), running.live.clone()));
        let mut stop = ctx.stop.clone();
        let exit = loop {
            tokio::select! {
                exit = running.wait() => break match exit {
                    Ok(exit) => exit,
                    Err(e) => {
                        tracing::error!(job = %spec.job, "lost track of the run's process: {e}");
                        Exit::Code(-1)
                    }
                },
                reason = async { stop.wait_for(Option::is_some).await.map(|r| *r).ok().flatten() } => {
                    break match reason {
                        Some(StopReason::Shutdown { immediate: true }) => {
                            running.signal(Signal::SIGKILL);
                            running.wait().await.unwrap_or(Exit::Signal(9))
                        }
                        // Stopped for its lease: dead before the lease can expire.
                        Some(StopReason::LeaseLost) => running
                            .terminate(ctx.lease_times.stop_grace)
                            .await
                            .unwrap_or(Exit::Signal(9)),
                        _ => running.terminate(ctx.kill_grace).await.unwrap_or(Exit::Signal(9)),
                    };
                }
                changed = lease.changed() => {
                    let state = *lease.borrow();
                    if changed.is_err() {
                        // The keeper is gone: the lease is the executor's to judge.
                        lease = watch_forever(state);
                    } else if let Some(guard) = &ctx.guard
                        && let LeaseState::Held(_) = state
                    {
                        guard.refresh(running.group(), deadlines(state)).await;
                    }
                }
            }
        };
        let group = running.group();
        let (output, whole) = running.finish().await;
        if let Some(guard) = &ctx.guard {
            guard.forget(group).await;
        }
        let signal = match exit {
            Exit::Signal(signal) => Some(signal),
            Exit::Code(_) => None,
        };
        let mut tail = output.tail;
        if let Some(note) = &whole.note {
            if !tail.is_empty() && !tail.ends_with('\n') {
                tail.push('\n');
            }
            tail.push_str(&format!("replicron: {note}\n"));
        }
        let events = cgroup.as_ref().map(|c| (c.oom_kills(), c.forks_refused()));
        if let Some(cgroup) = cgroup {
            tokio::spawn(cgroup.remove());
        }
        // Stopped for one of its limits, as far as can be told.
        if exit != Exit::Code(0)
            && let Some(why) = resources::diagnose(&spec.resources, events, signal, &tail)
        {
            tracing::warn!(job = %spec.job, run_id = spec.run_id, "{why}");
            if !tail.is_empty() && !tail.ends_with('\n') {
                tail.push('\n');
            }
            tail.push_str(&format!("replicron: {why}\n"));
        }
        Ending {
            how: if exit == Exit::Code(0) {
                Ended::Succeeded
            } else {
                Ended::Failed
            },
            exit_code: exit.code(),
            signal,
            output: tail,
            output_file: whole.file.map(|file| file.to_string_lossy().into_owned()),
        }
    }
}

/// A receiver whose value never changes again.
fn watch_forever(value: LeaseState) -> tokio::sync::watch::Receiver<LeaseState> {
    let (sender, receiver) = tokio::sync::watch::channel(value);
    std::mem::forget(sender);
    receiver
}

/// Everything needed to start one run.
#[derive(Clone, Debug)]
struct RunSpec {
    /// The job's name, for logs.
    job: String,
    /// The run's history id, for logs.
    run_id: i64,
    /// What to execute.
    command: Command,
    /// The job's `env`, plus the `REPLICRON_*` variables.
    env: BTreeMap<String, String>,
    /// The working directory, if set.
    working_dir: Option<PathBuf>,
    /// How many bytes of output tail to keep.
    output_limit: u64,
    /// Where and how much of its whole output to keep in files.
    output_files: Option<crate::config::OutputFiles>,
    /// Give the run this process's stdio.
    inherit_stdio: bool,
    /// Variables of this process's environment the run must not see.
    hidden_env: Vec<String>,
    /// The user to run as.
    run_as: Option<crate::config::RunAs>,
    /// The values of its secret parameters, masked in its output.
    secrets: Arc<[String]>,
    /// What it may use of the host.
    resources: crate::config::resources::Resources,
}

/// What became of a run's whole output, for a job that keeps it in files.
#[derive(Debug, Default)]
struct WholeOutput {
    /// Its file.
    file: Option<PathBuf>,
    /// Why some or all of it is not kept.
    note: Option<String>,
}

/// A started run.
struct Running {
    child: spawn::Child,
    group: Pid,
    readers: Vec<JoinHandle<()>>,
    live: Arc<Live>,
    /// Flushes its kept output's file every second, if it has one.
    flusher: Option<JoinHandle<()>>,
    /// Why its whole output is not kept, though its job keeps it.
    not_kept: Option<String>,
}

/// How a run's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt as _;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Code(-1),
        }
    }
}

impl Exit {
    /// The exit code for history; `None` when killed by a signal.
    pub(crate) fn code(self) -> Option<i32> {
        match self {
            Exit::Code(code) => Some(code),
            Exit::Signal(_) => None,
        }
    }
}

/// Starts a run in a new process group, registered with `guard` under
/// `deadlines`.
async fn spawn(
    spec: &RunSpec,
    guard: Option<&Guard>,
    deadlines: Deadlines,
    not_after: Option<tokio::time::Instant>,
    cgroup: Option<&resources::RunCgroup>,
) -> io::Result<Running> {
    let (program, args): (&str, Vec<&str>) = match &spec.command {
        Command::Shell { shell, command } => (shell, vec!["-c", command]),
        Command::Exec { args } => (&args[0], args[1..].iter().map(String::as_str).collect()),
    };
    // Found here rather than by the exec that setpriv makes, so that a
    // missing program is reported as such, not as setpriv's failure.
    let path = spec
        .env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let program = find_program(program, &path, spec.working_dir.as_deref())?;
    // Resolved at each run, as cron does: a user added or changed since the
    // job file was loaded is taken as it is now.
    let switch = match &spec.run_as {
        Some(run_as) => Some(users::resolve(run_as).map_err(io::Error::other)?),
        None => None,
    };
    // The job's whole environment: this process's (read once: replicron
    // never changes its own), less replicron's own settings (the database
    // URL and its password among them: a job that needs one sets it in its
    // `env`) and the variables the notification settings read secrets
    // from; then the user's, then the job's own.
    let mut env = inherited_env().clone();
    for var in &spec.hidden_env {
        env.remove(OsStr::new(var));
    }
    let mut dir = spec.working_dir.clone();
    if let Some(switch) = &switch {
        env.insert("USER".into(), switch.name.clone().into());
        env.insert("LOGNAME".into(), switch.name.clone().into());
        env.insert("HOME".into(), switch.home.clone().into());
        if dir.is_none() && switch.home.is_dir() {
            dir = Some(switch.home.clone());
        }
    }
    env.extend(spec.env.iter().map(|(k, v)| (k.into(), v.into())));
    let env = env
        .into_iter()
        .map(|(mut name, value)| {
            name.push("=");
            name.push(value);
            name
        })
        .collect();
    let rlimits = resources::rlimits(&spec.resources, resources::enforcement());
    let mut child = spawn::Spawn {
        program: &program,
        args: std::iter::once(program.clone().into_os_string())
            .chain(args.iter().map(OsString::from))
            .collect(),
        env,
        dir: dir.as_deref(),
        switch: switch.as_ref(),
        streams: if spec.inherit_stdio {
            spawn::Streams::Inherited
        } else {
            spawn::Streams::Captured
        },
        not_after,
        cgroup: cgroup.map(resources::RunCgroup::procs),
        rlimits: &rlimits,
    }
    .spawn()?;
    let group = child.id();
    if let Some(guard) = guard {
        guard.watch(group, deadlines).await;
    }
    let (kept, not_kept) = match &spec.output_files {
        Some(files) if !spec.inherit_stdio => {
            match kept::Kept::create(&files.dir, &spec.job, spec.run_id, files.max) {
                Ok(kept) => (Some(kept), None),
                Err(e) => {
                    let why = format!(
                        "its whole output is not kept: {}: {e}",
                        kept::path_of(&files.dir, &spec.job, spec.run_id).display()
                    );
                    tracing::warn!(job = %spec.job, run_id = spec.run_id, "{why}");
                    (None, Some(why))
                }
            }
        }
        _ => (None, None),
    };
    // Flushed at least once a second: a replica that dies loses its last
    // second at most.
    let flusher = kept.as_ref().map(|kept| {
        let kept = Arc::downgrade(kept);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(kept::FLUSH_EVERY);
            loop {
                every.tick().await;
                match kept.upgrade() {
                    Some(kept) => kept.flush(),
                    None => break,
                }
            }
        })
    });
    let live = Live::keeping(
        usize::try_from(spec.output_limit).unwrap_or(usize::MAX),
        kept,
    );
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(read_stream(
            stdout,
            Stream::Stdout,
            spec.job.clone(),
            spec.run_id,
            live.clone(),
            spec.secrets.clone(),
        )));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(read_stream(
            stderr,
            Stream::Stderr,
            spec.job.clone(),
            spec.run_id,
            live.clone(),
            spec.secrets.clone(),
        )));
    }
    Ok(Running {
        child,
        group,
        readers,
        live,
        flusher,
        not_kept,
    })
}

/// This process's environment as it was first read, less replicron's own
/// settings.
fn inherited_env() -> &'static BTreeMap<OsString, OsString> {
    static ENV: OnceLock<BTreeMap<OsString, OsString>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        for var in crate::config::daemon_env_vars().chain(crate::secrets::never_inherited()) {
            env.remove(OsStr::new(var));
        }
        env
    })
}

/// The file `program` names: itself if it holds a `/` (relative to the run's
/// working directory), else the first executable of that name in `path`.
fn find_program(program: &str, path: &str, working_dir: Option<&Path>) -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |candidate: &Path| {
        candidate
            .metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let not_found = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no such command: {program}"),
        )
    };
    if program.contains('/') {
        let candidate = match working_dir {
            Some(dir) if !program.starts_with('/') => dir.join(program),
            _ => PathBuf::from(program),
        };
        return if executable(&candidate) {
            Ok(candidate)
        } else if candidate.exists() {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("not an executable file: {program}"),
            ))
        } else {
            Err(not_found())
        };
    }
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| executable(candidate))
        .ok_or_else(not_found)
}

impl Running {
    /// The process group of the run.
    fn group(&self) -> Pid {
        self.group
    }

    /// Waits for the run's process to exit.
    async fn wait(&mut self) -> io::Result<Exit> {
        self.child.wait().await.map(Exit::from)
    }

    /// Sends `signal` to the whole group.
    fn signal(&self, signal: Signal) {
        let _ = signal::killpg(self.group, signal);
    }

    /// Stops the run: SIGTERM to the group, then SIGKILL after `grace` if
    /// it has not exited.
    async fn terminate(&mut self, grace: Duration) -> io::Result<Exit> {
        self.signal(Signal::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status.map(Exit::from),
            Err(_) => {
                self.signal(Signal::SIGKILL);
                self.child.wait().await.map(Exit::from)
            }
        }
    }

    /// Collects the output once the process has exited. Whatever the run
    /// left running in its group is killed: a job does not outlive its run.
    async fn finish(self) -> (Output, WholeOutput) {
        let Running {
            group,
            mut readers,
            live,
            flusher,
            not_kept,
            ..
        } = self;
        let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        let mut open = Vec::new();
        for reader in &mut readers {
            // A timeout polls its future first, so a finished reader is Ok.
            open.push(
                tokio::time::timeout_at(deadline, &mut *reader)
                    .await
                    .is_err(),
            );
        }
        // Whatever is still in the group outlived its run.
        if signal::killpg(group, Signal::SIGKILL).is_ok() && open.iter().any(|&o| o) {
            tracing::warn!(
                group = group.as_raw(),
                "the run left processes behind holding its output; killed them"
            );
        }
        for (reader, still_open) in readers.iter_mut().zip(open) {
            if still_open {
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, reader).await;
            }
        }
        if let Some(flusher) = flusher {
            flusher.abort();
        }
        let mut whole = WholeOutput {
            file: None,
            note: not_kept,
        };
        if let Some(kept) = live.kept() {
            whole.note = kept.finish().or(whole.note);
            whole.file = Some(kept.path().to_path_buf());
        }
        (live.output(), whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::keeper::LeaseTimes;
    use std::sync::Mutex;
    use tokio::sync::{oneshot, watch};

    fn touching(file: &Path) -> Process {
        Process {
            command: Command::Shell {
                shell: "/bin/sh".into(),
                command: format!("touch {}", file.display()),
            },
            env: BTreeMap::new(),
            working_dir: None,
            output_limit: 1024,
            output_files: None,
            inherit_stdio: false,
            hidden_env: Vec::new(),
            run_as: None,
            secret_sources: Vec::new(),
            secret_params: Vec::new(),
            secret_env: Vec::new(),
            resources: Default::default(),
        }
    }

    /// A run's context, and the senders it listens to (a dropped stop
    /// sender reads as "stop").
    type Senders = (watch::Sender<Option<StopReason>>, watch::Sender<LeaseState>);

    fn context(lease: LeaseState) -> (RunContext, Senders) {
        let (stop, stopped) = watch::channel(None);
        let (started, _) = oneshot::channel();
        let (leases, leased) = watch::channel(lease);
        let ctx = RunContext {
            job: Arc::from("job"),
            instant: chrono::Utc::now(),
            fence: 1,
            attempt: 1,
            previous_status: None,
            trigger: crate::run::Trigger::Schedule,
            run_id: 1,
            instance: Arc::from("me"),
            stop: stopped,
            lease: leased,
            lease_times: LeaseTimes::new(Duration::from_secs(3), Duration::from_secs(1)),
            kill_grace: Duration::from_secs(1),
            guard: None,
            started: Arc::new(Mutex::new(Some(started))),
            params: Arc::default(),
            reason: None,
            span: tracing::Span::none(),
            trace: None,
        };
        (ctx, (stop, leases))
    }

    /// A run whose lease is past its confirmation deadline when its process
    /// would be spawned is not started at all; a run under a fresh one is.
    #[tokio::test]
    async fn no_process_starts_under_a_lease_past_its_deadline() {
        let dir = tempfile::tempdir().expect("temp dir");
        let late = dir.path().join("late");
        let stale = tokio::time::Instant::now() - Duration::from_secs(3);
        for state in [LeaseState::Lost, LeaseState::Held(stale)] {
            let (ctx, _senders) = context(state);
            let ending = touching(&late).run(ctx).await;
            assert_eq!(ending.how, Ended::NotStarted, "{state:?}");
            assert!(ending.output.contains("not started"), "{}", ending.output);
        }
        assert!(
            !late.exists(),
            "a process ran under a lease past its deadline"
        );
        let fresh = dir.path().join("fresh");
        let (ctx, _senders) = context(LeaseState::Held(tokio::time::Instant::now()));
        let ending = touching(&fresh).run(ctx).await;
        assert_eq!(ending.how, Ended::Succeeded);
        assert!(fresh.exists());
    }

    /// A `secret_env` variable is read from its file at the run's start:
    /// the run gets it, its printed output has it masked; a file that
    /// cannot be read starts nothing, and says which file. The reason a
    /// run was started with is `REPLICRON_REASON`.
    #[tokio::test]
    async fn a_secret_is_read_at_the_start_given_to_the_run_and_masked() {
        use crate::config::params::SecretSource;
        let dir = tempfile::tempdir().expect("temp dir");
        let secret = dir.path().join("api-token");
        std::fs::write(&secret, "tok-5ecret-value\n").expect("written");
        let seen = dir.path().join("seen");
        let mut process = touching(&seen);
        process.command = Command::Shell {
            shell: "/bin/sh".into(),
            command: format!(
                "printf '%s|%s' \"$API_TOKEN\" \"$REPLICRON_REASON\" > {}; echo \"token is $API_TOKEN\"",
                seen.display()
            ),
        };
        process.secret_env = vec![("API_TOKEN".into(), SecretSource::File(secret.clone()))];
        let (mut ctx, _senders) = context(LeaseState::Held(tokio::time::Instant::now()));
        ctx.reason = Some(Arc::from("ticket 42"));
        let ending = process.clone().run(ctx).await;
        assert_eq!(ending.how, Ended::Succeeded, "{}", ending.output);
        assert_eq!(
            std::fs::read_to_string(&seen).expect("seen"),
            "tok-5ecret-value|ticket 42"
        );
        assert_eq!(ending.output, "token is [redacted]\n");

        std::fs::remove_file(&secret).expect("removed");
        std::fs::remove_file(&seen).expect("removed");
        let (ctx, _senders) = context(LeaseState::Held(tokio::time::Instant::now()));
        let ending = process.run(ctx).await;
        assert_eq!(ending.how, Ended::NotStarted);
        assert!(
            ending.output.contains("secret_env API_TOKEN")
                && ending.output.contains(&secret.display().to_string()),
            "{}",
            ending.output
        );
        assert!(!seen.exists(), "a run started without its secret");
    }
}
