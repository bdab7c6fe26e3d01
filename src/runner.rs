//! Child processes: how a run is started, watched, stopped and heard.
//!
//! Every run gets its own process group. A job must not outlive its daemon,
//! even one killed with SIGKILL: the run's own process gets a parent-death
//! signal (SIGKILL) set before it execs the job (by util-linux's setpriv
//! where the host has it, else between fork and exec), and the whole group,
//! grandchildren included, is killed by the [`Guard`]: one small process per
//! daemon (this same binary, `replicron guard`) that holds the read end of a
//! pipe from the daemon, learns each run's process group through it, and
//! kills every group still registered when the pipe closes, which the kernel
//! does however the daemon ends. Timeouts, lost leases and shutdown signal
//! the whole group: SIGTERM, then SIGKILL after the job's `kill_grace`.
//!
//! stdout and stderr are read in fixed-size chunks, logged line by line
//! with the job's name and run id, and only the last `output_limit` bytes
//! are kept, so memory stays bounded whatever the job prints.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::task::JoinHandle;

use crate::config::Command;

/// The hidden subcommand that runs the [`Guard`].
pub const GUARD_COMMAND: &str = "guard";

/// The longest line logged as one event; longer lines are logged in pieces.
const MAX_LOG_LINE: usize = 8 * 1024;

/// After the job's own process exits, how long its output may still drain
/// before what it left behind in its group is killed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Everything needed to start one run.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The job's name, for logs.
    pub job: String,
    /// The run's history id, for logs.
    pub run_id: i64,
    /// What to execute.
    pub command: Command,
    /// The job's `env`, plus the `REPLICRON_*` variables.
    pub env: BTreeMap<String, String>,
    /// The working directory, if set.
    pub working_dir: Option<PathBuf>,
    /// How many bytes of output tail to keep.
    pub output_limit: u64,
    /// Give the run this process's stdin, stdout and stderr instead of
    /// capturing its output (`replicron exec`).
    pub inherit_stdio: bool,
}

/// The last bytes of a run's combined stdout and stderr.
#[derive(Debug, Default)]
struct Tail {
    bytes: VecDeque<u8>,
    limit: usize,
    total: u64,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if self.limit == 0 {
            return;
        }
        let chunk = &chunk[chunk.len().saturating_sub(self.limit)..];
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(self.limit);
        self.bytes.drain(..overflow);
        self.bytes.extend(chunk);
    }
}

/// The output a run left: its tail, as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// The last `output_limit` bytes, decoded lossily as UTF-8.
    pub tail: String,
    /// How many bytes the run printed in all.
    pub total_bytes: u64,
}

/// A started run.
pub struct Running {
    child: Child,
    group: Pid,
    readers: Vec<JoinHandle<()>>,
    tail: Arc<Mutex<Tail>>,
}

/// How a run's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
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
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(code) => Some(code),
            Exit::Signal(_) => None,
        }
    }
}

/// Starts a run in a new process group, registered with `guard` under
/// `deadlines`.
pub async fn spawn(spec: &RunSpec, guard: &Guard, deadlines: Deadlines) -> io::Result<Running> {
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
    // The parent-death signal must be set in the child before it runs the
    // job. util-linux's setpriv does that and then execs the job, which lets
    // std start the child with posix_spawn (vfork) instead of fork: forking
    // the whole daemon (its threads, its address space) once per run costs
    // more than everything else a run does. Without setpriv, a pre_exec
    // hook sets it, at the price of a fork.
    let mut command = match setpriv() {
        Some(setpriv) => {
            let mut c = tokio::process::Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"])
                .arg(program)
                .args(&args);
            c
        }
        None => {
            let mut c = tokio::process::Command::new(program);
            c.args(&args);
            set_parent_death_signal(&mut c);
            c
        }
    };
    let (stdin, stdout, stderr) = if spec.inherit_stdio {
        (Stdio::inherit(), Stdio::inherit(), Stdio::inherit())
    } else {
        (Stdio::null(), Stdio::piped(), Stdio::piped())
    };
    // replicron's own settings (the database URL and its password among
    // them) are not the job's: a job that needs one sets it in its `env`.
    for var in crate::config::ENV_OVERRIDES
        .iter()
        .map(|(var, _)| *var)
        .chain([crate::config::CONFIG_ENV])
    {
        command.env_remove(var);
    }
    command
        .envs(&spec.env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(false);
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn()?;
    let group = Pid::from_raw(child.id().map_or(0, |id| id as i32));
    guard.watch(group, deadlines).await;
    let tail = Arc::new(Mutex::new(Tail {
        limit: usize::try_from(spec.output_limit).unwrap_or(usize::MAX),
        ..Tail::default()
    }));
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(read_stream(
            stdout,
            "stdout",
            spec.job.clone(),
            spec.run_id,
            tail.clone(),
        )));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(read_stream(
            stderr,
            "stderr",
            spec.job.clone(),
            spec.run_id,
            tail.clone(),
        )));
    }
    Ok(Running {
        child,
        group,
        readers,
        tail,
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

/// util-linux's setpriv, if this host has it.
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            ["/usr/bin/setpriv", "/bin/setpriv"]
                .iter()
                .map(PathBuf::from)
                .find(|path| path.exists())
        })
        .as_deref()
}

#[expect(
    unsafe_code,
    reason = "prctl in the child between fork and exec is the only way to set a parent-death signal"
)]
fn set_parent_death_signal(command: &mut tokio::process::Command) {
    // SAFETY: the closure only makes the async-signal-safe prctl syscall.
    unsafe {
        command
            .pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
    }
}

async fn read_stream(
    mut stream: impl AsyncRead + Unpin,
    name: &'static str,
    job: String,
    run_id: i64,
    tail: Arc<Mutex<Tail>>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buffer[..n];
        if let Ok(mut tail) = tail.lock() {
            tail.push(chunk);
        }
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            line.extend_from_slice(piece);
            if line.ends_with(b"\n") || line.len() >= MAX_LOG_LINE {
                log_line(&job, run_id, name, &line);
                line.clear();
            }
        }
    }
    if !line.is_empty() {
        log_line(&job, run_id, name, &line);
    }
}

fn log_line(job: &str, run_id: i64, stream: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    tracing::info!(target: "replicron::job", job, run_id, stream, "{text}");
}

impl Running {
    /// The process group of the run.
    pub fn group(&self) -> Pid {
        self.group
    }

    /// Waits for the run's process to exit.
    pub async fn wait(&mut self) -> io::Result<Exit> {
        self.child.wait().await.map(Exit::from)
    }

    /// Sends `signal` to the whole group.
    pub fn signal(&self, signal: Signal) {
        let _ = signal::killpg(self.group, signal);
    }

    /// Stops the run: SIGTERM to the group, then SIGKILL after `grace` if
    /// it has not exited.
    pub async fn terminate(&mut self, grace: Duration) -> io::Result<Exit> {
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
    pub async fn finish(self) -> Output {
        let Running {
            group,
            mut readers,
            tail,
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
        let (bytes, total_bytes) = tail
            .lock()
            .map(|t| (t.bytes.iter().copied().collect::<Vec<u8>>(), t.total))
            .unwrap_or_default();
        Output {
            tail: String::from_utf8_lossy(&bytes).into_owned(),
            total_bytes,
        }
    }
}

/// When the guard stops a run on its own: SIGTERM after `term`, SIGKILL
/// after `kill`, both counted from when the guard hears of them. The daemon
/// pushes them back each time it confirms the run's lease, so they only
/// fall due when the daemon cannot (frozen, partitioned or dead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// Until SIGTERM to the group.
    pub term: Duration,
    /// Until SIGKILL to the group.
    pub kill: Duration,
}

/// The daemon's side of the guard process.
pub struct Guard {
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    _process: Child,
}

impl Guard {
    /// Starts `replicron guard` (this binary) with a pipe from this process.
    pub fn start() -> io::Result<Guard> {
        let mut process = tokio::process::Command::new(std::env::current_exe()?)
            .arg(GUARD_COMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .kill_on_drop(false)
            .spawn()?;
        let stdin = process.stdin.take();
        Ok(Guard {
            stdin: tokio::sync::Mutex::new(stdin),
            _process: process,
        })
    }

    /// Tells the guard about `group`: kill it if this daemon dies, and stop
    /// it at `deadlines` unless they are pushed back.
    pub async fn watch(&self, group: Pid, deadlines: Deadlines) {
        self.send(format!(
            "+{} {} {}\n",
            group.as_raw(),
            ceil_millis(deadlines.term),
            ceil_millis(deadlines.kill)
        ))
        .await;
    }

    /// Pushes back the deadlines of `group` (its lease was just confirmed).
    pub async fn refresh(&self, group: Pid, deadlines: Deadlines) {
        self.send(format!(
            "~{} {} {}\n",
            group.as_raw(),
            ceil_millis(deadlines.term),
            ceil_millis(deadlines.kill)
        ))
        .await;
    }

    /// The run of `group` is over: its group is no longer the guard's.
    pub async fn forget(&self, group: Pid) {
        self.send(format!("-{}\n", group.as_raw())).await;
    }

    async fn send(&self, line: String) {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = self.stdin.lock().await;
        if let Some(pipe) = stdin.as_mut()
            && let Err(e) = pipe.write_all(line.as_bytes()).await
        {
            tracing::error!(
                "the guard process is gone ({e}); jobs may outlive a crash of this daemon"
            );
            *stdin = None;
        }
    }
}

/// A deadline in whole milliseconds, rounded up: the guard never stops a
/// group before the moment the daemon meant, so a run it stops is always
/// past the daemon's own deadline when the daemon looks at how it ended.
fn ceil_millis(d: Duration) -> u128 {
    d.as_micros().div_ceil(1000)
}

/// A group the guard watches.
struct Watched {
    term_at: std::time::Instant,
    kill_at: std::time::Instant,
    termed: bool,
}

/// The guard (`replicron guard`): reads `+PGID TERM_MS KILL_MS`,
/// `~PGID TERM_MS KILL_MS` and `-PGID` lines from the daemon. A group whose
/// deadlines pass gets SIGTERM, then SIGKILL; when stdin closes (the daemon
/// ended, however), every group still registered is killed.
pub fn guard() {
    use std::collections::HashMap;
    use std::io::BufRead as _;
    use std::sync::mpsc::{RecvTimeoutError, channel};
    use std::time::Instant;

    // Signals aimed at the daemon's terminal or group are not for the guard.
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        #[expect(unsafe_code, reason = "ignoring a signal installs no handler")]
        // SAFETY: SIG_IGN installs no handler code.
        let _ = unsafe { signal::signal(s, signal::SigHandler::SigIgn) };
    }
    let (lines, commands) = channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut groups: HashMap<i32, Watched> = HashMap::new();
    loop {
        let now = Instant::now();
        for (&group, watched) in groups.iter_mut() {
            if !watched.termed && now >= watched.term_at {
                let _ = signal::killpg(Pid::from_raw(group), Signal::SIGTERM);
                watched.termed = true;
            }
        }
        groups.retain(|&group, watched| {
            let due = now >= watched.kill_at;
            if due {
                let _ = signal::killpg(Pid::from_raw(group), Signal::SIGKILL);
            }
            !due
        });
        let next = groups
            .values()
            .map(|w| if w.termed { w.kill_at } else { w.term_at })
            .min()
            .map_or(Duration::from_secs(3600), |at| {
                at.saturating_duration_since(now)
            });
        match commands.recv_timeout(next) {
            Ok(line) => apply(&mut groups, &line),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for group in groups.keys() {
        let _ = signal::killpg(Pid::from_raw(*group), Signal::SIGKILL);
    }
}

fn apply(groups: &mut std::collections::HashMap<i32, Watched>, line: &str) {
    let now = std::time::Instant::now();
    let (sign, rest) = line.split_at(line.len().min(1));
    let fields: Vec<u64> = rest
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let Some(&group) = fields.first() else { return };
    let Ok(group) = i32::try_from(group) else {
        return;
    };
    if group <= 1 {
        return;
    }
    let deadlines = match fields[1..] {
        [term, kill] => Some((
            now + Duration::from_millis(term),
            now + Duration::from_millis(kill),
        )),
        _ => None,
    };
    match (sign, deadlines) {
        ("+" | "~", Some((term_at, kill_at))) => {
            let watched = groups.entry(group).or_insert(Watched {
                term_at,
                kill_at,
                termed: false,
            });
            if !watched.termed {
                watched.term_at = term_at;
                watched.kill_at = kill_at;
            }
        }
        ("-", _) => {
            groups.remove(&group);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_exactly_the_last_bytes() {
        let mut tail = Tail {
            limit: 10,
            ..Tail::default()
        };
        tail.push(b"0123456");
        tail.push(b"789abc");
        assert_eq!(
            tail.bytes.iter().copied().collect::<Vec<_>>(),
            b"3456789abc"
        );
        tail.push(&[b'x'; 25]);
        assert_eq!(tail.bytes.len(), 10);
        assert_eq!(tail.total, 38);
        let mut none = Tail::default();
        none.push(b"abc");
        assert!(none.bytes.is_empty());
    }
}
