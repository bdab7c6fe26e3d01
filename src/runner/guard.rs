//! The guard: one small process per replica (this same binary, `replicron
//! guard`) that holds the read end of a pipe from the replica, learns each
//! run's process group and its lease deadlines through it, stops a group
//! whose deadlines pass (a frozen or partitioned replica cannot let its job
//! run on past its lease), and kills every group still registered when the
//! pipe closes, which the kernel does however the replica ends.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::process::Child;

use crate::lease::keeper::Deadlines;

/// The hidden subcommand that runs the [`Guard`].
pub(crate) const GUARD_COMMAND: &str = "guard";

/// The daemon's side of the guard process.
pub(crate) struct Guard {
    stdin: tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>,
    _process: Option<Child>,
}

/// A guard forked by [`fork_early`], until [`Guard::start`] takes its pipe.
static FORKED: std::sync::Mutex<Option<std::os::fd::OwnedFd>> = std::sync::Mutex::new(None);

/// Forks the guard now, while this process is small and has one thread:
/// the forked guard shares this binary's pages instead of loading its own
/// copy (an exec'd guard maps and relocates the whole binary again, some
/// megabytes), and touches only its own loop. [`Guard::start`] then takes
/// its pipe. Call it first thing in `main`, before any thread starts.
#[expect(
    unsafe_code,
    reason = "a fork, and the descriptor calls of its child, have no safe form"
)]
pub(crate) fn fork_early() -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let (read, write) = super::spawn::pipe_pair()?;
    // SAFETY: this process has a single thread (the caller's promise), so
    // the child may go on as an ordinary program.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Child => {
            drop(write);
            let null = std::fs::File::open("/dev/null");
            // SAFETY: plain descriptor calls in our own process.
            unsafe {
                libc::dup2(read.as_raw_fd(), 0);
                if let Ok(null) = &null {
                    libc::dup2(null.as_raw_fd(), 1);
                }
                libc::setpgid(0, 0);
                // What ps and top show for it (its command line is the
                // daemon's).
                libc::prctl(libc::PR_SET_NAME, c"replicron-guard".as_ptr());
            }
            drop(read);
            drop(null);
            guard();
            // SAFETY: the guard is done; nothing of the parent's is ours to
            // flush or run at exit.
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { .. } => {
            drop(read);
            if let Ok(mut forked) = FORKED.lock() {
                *forked = Some(write);
            }
            Ok(())
        }
    }
}

impl Guard {
    /// The guard [`fork_early`] started, or else `replicron guard` (this
    /// binary) started now with a pipe from this process.
    pub(crate) fn start() -> io::Result<Guard> {
        if let Some(write) = FORKED.lock().ok().and_then(|mut forked| forked.take()) {
            return Ok(Guard {
                stdin: tokio::sync::Mutex::new(Some(
                    tokio::net::unix::pipe::Sender::from_owned_fd(write)?,
                )),
                _process: None,
            });
        }
        let mut process = tokio::process::Command::new(std::env::current_exe()?)
            .arg(GUARD_COMMAND)
            // It needs none of the daemon's variables, secrets among them.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .kill_on_drop(false)
            .spawn()?;
        let stdin = process
            .stdin
            .take()
            .map(|stdin| stdin.into_owned_fd())
            .transpose()?
            .map(tokio::net::unix::pipe::Sender::from_owned_fd)
            .transpose()?;
        Ok(Guard {
            stdin: tokio::sync::Mutex::new(stdin),
            _process: Some(process),
        })
    }

    /// Tells the guard about `group`: kill it if this daemon dies, and stop
    /// it at `deadlines` unless they are pushed back.
    pub(crate) async fn watch(&self, group: Pid, deadlines: Deadlines) {
        self.send(format!(
            "+{} {} {}\n",
            group.as_raw(),
            ceil_millis(deadlines.term),
            ceil_millis(deadlines.kill)
        ))
        .await;
    }

    /// Pushes back the deadlines of `group` (its lease was just confirmed).
    pub(crate) async fn refresh(&self, group: Pid, deadlines: Deadlines) {
        self.send(format!(
            "~{} {} {}\n",
            group.as_raw(),
            ceil_millis(deadlines.term),
            ceil_millis(deadlines.kill)
        ))
        .await;
    }

    /// The run of `group` is over: its group is no longer the guard's.
    pub(crate) async fn forget(&self, group: Pid) {
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
pub(crate) fn guard() {
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
    // What the daemon's start touched before the fork is not the guard's.
    super::memory::shed_startup_pages();
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
