//! Starting a run's process the way `posix_spawn` does, with the one step
//! it cannot take: a parent-death signal set in the child before it execs
//! the job.
//!
//! The child is a `clone(CLONE_VM | CLONE_VFORK)` of the calling thread:
//! it shares the daemon's memory on a stack of its own while the calling
//! thread waits, so nothing of the daemon's address space is copied (a
//! `fork` of the daemon costs more than the job's own start), and it execs
//! the job directly (no helper program in between, whose own exec would
//! double the cost of a start). Between the clone and the exec the child
//! makes only raw system calls on values prepared before it: it takes
//! every signal back to its default with all of them blocked, sets its
//! parent-death signal (SIGKILL), its own process group, its cgroup and
//! its rlimits (the job's resource limits), its standard streams, its
//! directory and its user, then execs. A failing step leaves
//! its errno in memory the parent reads once the child has exec'd or
//! exited.
//!
//! The parent holds a pidfd of the child: the run's end wakes exactly its
//! own waiter, with no SIGCHLD shared among all runs.

#![expect(
    unsafe_code,
    reason = "a vfork-style clone whose child sets its parent-death signal is not in std or nix"
)]

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::resources::Rlimit;
use super::users::Switch;

/// What the child's standard streams are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Streams {
    /// stdin from /dev/null, stdout and stderr each to a pipe of ours.
    Captured,
    /// This process's own stdin, stdout and stderr.
    Inherited,
}

/// One process to start.
pub(super) struct Spawn<'a> {
    /// The program's file (already found on the PATH).
    pub(super) program: &'a Path,
    /// Its arguments, the program's name first.
    pub(super) args: Vec<OsString>,
    /// Its whole environment, as `NAME=value`.
    pub(super) env: Vec<OsString>,
    /// Its working directory, if not ours.
    pub(super) dir: Option<&'a Path>,
    /// The user to become, if not ours.
    pub(super) switch: Option<&'a Switch>,
    /// Its standard streams.
    pub(super) streams: Streams,
    /// The last moment it may start: checked by the child itself right
    /// before its exec, so that a daemon frozen (or descheduled) between
    /// its own check and the clone cannot start a run after its lease's
    /// deadline.
    pub(super) not_after: Option<tokio::time::Instant>,
    /// The `cgroup.procs` of the run's own cgroup, to move into.
    pub(super) cgroup: Option<BorrowedFd<'a>>,
    /// The rlimits to set, soft and hard alike.
    pub(super) rlimits: &'a [Rlimit],
}

/// A started process: the leader of its own process group.
pub(super) struct Child {
    pid: Pid,
    exit: Option<std::process::ExitStatus>,
    /// Set on the copy that reaps a dropped child: it is not handed on again.
    orphan: bool,
    pidfd: Option<AsyncFd<OwnedFd>>,
    /// The read ends of its stdout and stderr, when captured.
    pub(super) stdout: Option<pipe::Receiver>,
    pub(super) stderr: Option<pipe::Receiver>,
}

/// The step of the child that failed, with its errno.
const STEP_DIR: i32 = 1;
const STEP_USER: i32 = 2;
const STEP_EXEC: i32 = 3;
const STEP_OTHER: i32 = 4;
const STEP_LATE: i32 = 5;
const STEP_CGROUP: i32 = 6;
const STEP_RLIMIT: i32 = 7;

/// What the child reads: every pointer is into memory the parent keeps
/// alive (and does not touch) until the clone returns.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    dir: *const libc::c_char,
    /// stdin, stdout and stderr to put in place (-1: leave it).
    stdio: [RawFd; 3],
    parent: libc::pid_t,
    uid: Option<libc::uid_t>,
    gid: libc::gid_t,
    groups: *const libc::gid_t,
    groups_len: usize,
    /// The last moment to exec on `CLOCK_MONOTONIC` (`tv_sec` < 0: none).
    not_after: libc::timespec,
    /// The run's cgroup's `cgroup.procs` (-1: none).
    cgroup: RawFd,
    /// The rlimits to set.
    rlimits: *const Rlimit,
    rlimits_len: usize,
    /// The failed step (0 if none) and its errno, written by the child.
    step: AtomicI32,
    errno: AtomicI32,
}

/// The child's stack: it only calls into the C library's thin syscall
/// wrappers.
const CHILD_STACK: usize = 64 * 1024;

impl Spawn<'_> {
    /// Starts the process.
    pub(super) fn spawn(&self) -> io::Result<Child> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command")
            })
        };
        let program = c(self.program.as_os_str().as_bytes())?;
        let args = self
            .args
            .iter()
            .map(|a| c(a.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let env = self
            .env
            .iter()
            .map(|e| c(e.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let dir = self.dir.map(|d| c(d.as_os_str().as_bytes())).transpose()?;
        let argv = null_terminated(&args);
        let envp = null_terminated(&env);
        let (stdin, stdout, stderr, ours) = match self.streams {
            Streams::Inherited => (None, None, None, None),
            Streams::Captured => {
                let null = std::fs::File::open("/dev/null")?;
                let (out_read, out_write) = pipe_pair()?;
                let (err_read, err_write) = pipe_pair()?;
                (
                    Some(OwnedFd::from(null)),
                    Some(out_write),
                    Some(err_write),
                    Some((out_read, err_read)),
                )
            }
        };
        let raw = |fd: &Option<OwnedFd>| fd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let groups: Vec<libc::gid_t> = self
            .switch
            .map(|s| s.groups.iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default();
        let not_after = match self.not_after {
            Some(at) => {
                let left = at.saturating_duration_since(tokio::time::Instant::now());
                let mut now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: clock_gettime writes the timespec it is given.
                unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
                let nanos = now.tv_nsec as u64 + u64::from(left.subsec_nanos());
                libc::timespec {
                    tv_sec: now.tv_sec
                        + left.as_secs() as libc::time_t
                        + (nanos / 1_000_000_000) as libc::time_t,
                    tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
                }
            }
            None => libc::timespec {
                tv_sec: -1,
                tv_nsec: 0,
            },
        };
        let args = ChildArgs {
            not_after,
            program: program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            dir: dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
            stdio: [raw(&stdin), raw(&stdout), raw(&stderr)],
            parent: std::process::id() as libc::pid_t,
            uid: self.switch.map(|s| s.uid.as_raw()),
            gid: self.switch.map_or(0, |s| s.gid.as_raw()),
            groups: groups.as_ptr(),
            groups_len: groups.len(),
            cgroup: self.cgroup.map_or(-1, |fd| fd.as_raw_fd()),
            rlimits: self.rlimits.as_ptr(),
            rlimits_len: self.rlimits.len(),
            step: AtomicI32::new(0),
            errno: AtomicI32::new(0),
        };
        let mut stack = vec![0_u8; CHILD_STACK];
        let pid = clone_vfork(&args, &mut stack)?;
        // The child has exec'd or exited: what it left is final.
        let step = args.step.load(Ordering::Acquire);
        if step != 0 {
            let errno = io::Error::from_raw_os_error(args.errno.load(Ordering::Acquire));
            let mut status = 0;
            // SAFETY: reaping our own child, which has exited.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return Err(match step {
                STEP_DIR => io::Error::new(
                    errno.kind(),
                    format!(
                        "cannot change to the working directory {}: {errno}",
                        self.dir
                            .map_or_else(String::new, |d| d.display().to_string())
                    ),
                ),
                STEP_USER => io::Error::new(
                    errno.kind(),
                    format!("cannot switch to the job's user: {errno}"),
                ),
                STEP_EXEC => io::Error::new(
                    errno.kind(),
                    format!("cannot execute {}: {errno}", self.program.display()),
                ),
                STEP_CGROUP => io::Error::new(
                    errno.kind(),
                    format!("cannot move the run into its cgroup: {errno}"),
                ),
                STEP_RLIMIT => io::Error::new(
                    errno.kind(),
                    format!("cannot set the job's resource limits: {errno}"),
                ),
                STEP_LATE => io::Error::new(
                    io::ErrorKind::TimedOut,
                    "its lease's deadline passed before the process could start",
                ),
                _ => errno,
            });
        }
        let pid = Pid::from_raw(pid);
        let (stdout, stderr) = match ours {
            Some((out, err)) => (
                Some(pipe::Receiver::from_owned_fd(out)?),
                Some(pipe::Receiver::from_owned_fd(err)?),
            ),
            None => (None, None),
        };
        Ok(Child {
            pid,
            exit: None,
            orphan: false,
            pidfd: pidfd(pid),
            stdout,
            stderr,
        })
    }
}

/// A NULL-terminated array of pointers into `strings`.
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A pipe (read end, write end), both ends close-on-exec (a run's end is
/// dup'd onto its stream, which clears the flag there).
pub(super) fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: pipe2 fills the two fds it opens, or fails.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two new fds that nothing else owns.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// A pidfd for `pid`, registered with the runtime; `None` where the kernel
/// has none (before 5.3): the child is then polled.
fn pidfd(pid: Pid) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), libc::PIDFD_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    // SAFETY: pidfd_open returned a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: an OwnedFd's fd stays open and the same until it is dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
}

/// Clones the calling thread as a vfork child that runs [`child`] on
/// `stack` with `args`; returns once the child has exec'd or exited.
fn clone_vfork(args: &ChildArgs, stack: &mut [u8]) -> io::Result<libc::pid_t> {
    // Every signal blocked across the clone: no handler of the daemon's
    // may run in the child, which shares its memory. The child unblocks
    // them once it has taken each back to its default.
    let mut old = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )?;
    let top = stack.as_mut_ptr_range().end;
    // 16-byte alignment for the child's first frame.
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: the child runs `child` on its own stack, which outlives it
    // (CLONE_VFORK: this thread resumes only once the child has exec'd or
    // exited), with `args`, which it only reads (and its two atomics).
    let pid = unsafe {
        libc::clone(
            child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(args).cast_mut().cast(),
        )
    };
    let error = io::Error::last_os_error();
    // Restoring this thread's own mask cannot fail (the set is one it had).
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    if pid < 0 { Err(error) } else { Ok(pid) }
}

/// The child, between the clone and the exec: raw system calls only (the C
/// library's thin wrappers), nothing that allocates or locks, since the
/// memory is the daemon's.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive until this child
    // execs or exits.
    let args = unsafe { &*(arg as *const ChildArgs) };
    let fail = |step: i32| -> libc::c_int {
        // SAFETY: reading this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        args.errno.store(errno, Ordering::Release);
        args.step.store(step, Ordering::Release);
        // SAFETY: exit_group of the child alone (it has its own thread group).
        unsafe { libc::_exit(127) }
    };
    // SAFETY: the calls below are async-signal-safe syscall wrappers on
    // values the parent prepared; none allocates or takes a lock.
    unsafe {
        // Every signal back to its default (SIGPIPE included, which Rust
        // ignores, and whatever the daemon inherited ignored), so that no
        // handler of the daemon's runs here and every job starts alike. The
        // kernel's own call: the C library's refuses the signals it keeps
        // for itself. All zeroes is SIG_DFL, no flags, an empty mask, in
        // every architecture's layout of the kernel's sigaction.
        let default = [0_u64; 4];
        for signal in 1..=libc::SIGRTMAX() {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    default.as_ptr(),
                    std::ptr::null_mut::<libc::c_void>(),
                    8_usize,
                );
            }
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail(STEP_OTHER);
        }
        // The daemon died before the signal was set: nobody would send it.
        if libc::getppid() != args.parent {
            libc::_exit(127);
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(STEP_OTHER);
        }
        // Into the run's own cgroup ("0": the writer itself), and under
        // its rlimits, while it still has the daemon's privileges (a hard
        // limit above the daemon's is for a privileged one to set).
        if args.cgroup >= 0 && libc::write(args.cgroup, b"0".as_ptr().cast(), 1) != 1 {
            return fail(STEP_CGROUP);
        }
        if args.rlimits_len > 0 {
            for limit in std::slice::from_raw_parts(args.rlimits, args.rlimits_len) {
                // The kernel's prlimit64 on this process: { soft, hard }.
                let set = |value: u64| {
                    let both = [value, value];
                    libc::syscall(
                        libc::SYS_prlimit64,
                        0,
                        limit.resource,
                        both.as_ptr(),
                        std::ptr::null_mut::<u64>(),
                    ) == 0
                };
                if !set(limit.want) && (limit.fallback == limit.want || !set(limit.fallback)) {
                    return fail(STEP_RLIMIT);
                }
            }
        }
        for (target, &fd) in args.stdio.iter().enumerate() {
            if fd >= 0 && libc::dup2(fd, target as RawFd) < 0 {
                return fail(STEP_OTHER);
            }
        }
        if let Some(uid) = args.uid {
            // Raw system calls: the C library's setuid and friends change
            // every thread of the calling process, which here is the
            // daemon's.
            if libc::syscall(libc::SYS_setgroups, args.groups_len, args.groups) != 0
                || libc::syscall(libc::SYS_setresgid, args.gid, args.gid, args.gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            {
                return fail(STEP_USER);
            }
        }
        if !args.dir.is_null() && libc::chdir(args.dir) != 0 {
            return fail(STEP_DIR);
        }
        // The kernel's own call, on its 8-byte set: no signal blocked.
        let empty = 0_u64;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut::<u64>(),
            8_usize,
        );
        // The last step before the exec: not past the run's deadline.
        if args.not_after.tv_sec >= 0 {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
            if (now.tv_sec, now.tv_nsec) > (args.not_after.tv_sec, args.not_after.tv_nsec) {
                *libc::__errno_location() = libc::ETIME;
                return fail(STEP_LATE);
            }
        }
        libc::execve(args.program, args.argv, args.envp);
        fail(STEP_EXEC)
    }
}

impl Child {
    /// The process's id, which is also its group's.
    pub(super) fn id(&self) -> Pid {
        self.pid
    }

    /// Waits for the process to exit (cancel-safe).
    pub(super) async fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        loop {
            if let Some(exit) = self.try_wait()? {
                return Ok(exit);
            }
            match &self.pidfd {
                Some(pidfd) => {
                    let mut ready = pidfd.readable().await?;
                    ready.clear_ready();
                }
                None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    /// Reaps the process if it has exited.
    fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt as _;
        let mut status = 0;
        // SAFETY: waiting for our own child, without blocking.
        let reaped = unsafe { libc::waitpid(self.pid.as_raw(), &mut status, libc::WNOHANG) };
        match reaped {
            0 => Ok(None),
            pid if pid == self.pid.as_raw() => {
                let exit = std::process::ExitStatus::from_raw(status);
                self.exit = Some(exit);
                self.pidfd = None;
                Ok(Some(exit))
            }
            _ => Err(io::Error::last_os_error()),
        }
    }
}

impl Drop for Child {
    /// A child dropped before it was reaped (its run's task was aborted) is
    /// reaped when it exits, so that it does not stay a zombie.
    fn drop(&mut self) {
        if self.orphan || self.exit.is_some() || matches!(self.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let orphan = Child {
                pid: self.pid,
                exit: None,
                orphan: true,
                pidfd: self.pidfd.take(),
                stdout: None,
                stderr: None,
            };
            runtime.spawn(async move {
                let mut orphan = orphan;
                let _ = orphan.wait().await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    fn shell(script: &str) -> Spawn<'static> {
        Spawn {
            program: Path::new("/bin/sh"),
            args: ["/bin/sh", "-c", script].map(OsString::from).to_vec(),
            env: vec![OsString::from("GREETING=hello")],
            dir: None,
            switch: None,
            not_after: None,
            streams: Streams::Captured,
            cgroup: None,
            rlimits: &[],
        }
    }

    async fn run(spawn: &Spawn<'_>) -> (i32, String, String) {
        let mut child = spawn.spawn().expect("spawned");
        let (mut out, mut err) = (String::new(), String::new());
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .await
            .expect("read");
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .await
            .expect("read");
        let status = child.wait().await.expect("waited");
        (status.code().unwrap_or(-1), out, err)
    }

    #[tokio::test]
    async fn the_child_gets_its_arguments_environment_streams_and_exit_code() {
        let (code, out, err) = run(&shell("echo \"$GREETING $0\"; echo oops >&2; exit 3")).await;
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (3, "hello /bin/sh\n", "oops\n")
        );
    }

    #[tokio::test]
    async fn the_child_leads_its_own_group_with_no_signal_blocked_or_ignored() {
        // The job's process reads its own state (a shell would show its
        // own masks, which it changes around its children).
        let direct = |program: &'static str, args: &[&str]| Spawn {
            program: Path::new(program),
            args: std::iter::once(program)
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect(),
            ..shell("")
        };
        let (code, out, _) = run(&direct("/bin/cat", &["/proc/self/stat"])).await;
        assert_eq!(code, 0);
        let fields: Vec<&str> = out.rsplit(')').next().expect("stat").split(' ').collect();
        let pid = out.split(' ').next().expect("pid");
        // After the command's name: state, parent, group.
        assert_eq!(fields[3], pid, "the child leads its own group: {out}");
        let (code, out, _) = run(&direct(
            "/bin/grep",
            &["-E", "^(SigBlk|SigIgn)", "/proc/self/status"],
        ))
        .await;
        assert_eq!(code, 0);
        assert_eq!(
            out,
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
        );
    }

    #[tokio::test]
    async fn a_missing_directory_or_program_is_an_error_naming_it() {
        let mut spawn = shell("true");
        spawn.dir = Some(Path::new("/no/such/dir"));
        let e = spawn.spawn().err().expect("no such directory");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/no/such/dir"), "{e}");
        let mut spawn = shell("true");
        spawn.program = Path::new("/etc/hostname");
        let e = spawn.spawn().err().expect("not executable");
        assert!(
            e.to_string().contains("cannot execute /etc/hostname"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn the_child_becomes_the_user_it_is_given_and_the_daemon_stays_itself() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        let switch = super::super::users::resolve(&crate::config::RunAs {
            user: "nobody".to_string(),
            group: None,
            line: None,
        })
        .expect("nobody exists");
        let mut spawn = shell("id -u; id -g; id -G");
        spawn.switch = Some(&switch);
        let (code, out, err) = run(&spawn).await;
        assert_eq!(code, 0, "{err}");
        let ids: Vec<&str> = out.lines().collect();
        assert_eq!(ids[0], switch.uid.to_string());
        assert_eq!(ids[1], switch.gid.to_string());
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "the daemon is still root"
        );
        assert!(nix::unistd::Uid::current().is_root());
    }

    /// The rlimits it is given are the child's, soft and hard; the daemon
    /// keeps its own.
    #[tokio::test]
    async fn the_child_gets_its_rlimits_and_the_daemon_keeps_its_own() {
        use nix::sys::resource::{Resource, getrlimit};
        let before = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        let limits = [
            Rlimit {
                resource: libc::RLIMIT_NOFILE as libc::c_int,
                want: 16,
                fallback: 16,
            },
            Rlimit {
                resource: libc::RLIMIT_DATA as libc::c_int,
                want: 64 << 20,
                fallback: 64 << 20,
            },
        ];
        let spawn = Spawn {
            rlimits: &limits,
            ..shell("ulimit -Sn; ulimit -Hn; ulimit -d")
        };
        let (code, out, err) = run(&spawn).await;
        assert_eq!((code, out.as_str()), (0, "16\n16\n65536\n"), "{err}");
        assert_eq!(
            getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit"),
            before
        );
    }

    /// A child moves itself into the cgroup whose `cgroup.procs` it is
    /// given, before its exec: here a file that takes what it writes.
    #[tokio::test]
    async fn the_child_writes_itself_into_its_cgroup() {
        let procs = tempfile::NamedTempFile::new().expect("procs");
        let fd = std::fs::OpenOptions::new()
            .write(true)
            .open(procs.path())
            .expect("open");
        use std::os::fd::AsFd as _;
        let spawn = Spawn {
            cgroup: Some(fd.as_fd()),
            ..shell("true")
        };
        let (code, _, _) = run(&spawn).await;
        assert_eq!(code, 0);
        assert_eq!(std::fs::read_to_string(procs.path()).expect("read"), "0");
    }

    /// A process whose deadline has passed by the time it would exec does
    /// not start: the child checks it itself, so a daemon stopped between
    /// its own check and the clone cannot start a run late.
    #[tokio::test]
    async fn no_exec_past_the_deadline() {
        let marker = tempfile::NamedTempFile::new().expect("marker");
        let path = marker.path().to_path_buf();
        drop(marker);
        let script = format!("touch {}", path.display());
        let late = Spawn {
            not_after: Some(tokio::time::Instant::now() - std::time::Duration::from_millis(1)),
            ..shell(&script)
        };
        let error = late.spawn().err().expect("refused");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(!path.exists(), "the command ran");
        let in_time = Spawn {
            not_after: Some(tokio::time::Instant::now() + std::time::Duration::from_secs(5)),
            ..shell(&script)
        };
        let (code, _, _) = run(&in_time).await;
        assert_eq!(code, 0);
        assert!(path.exists(), "the command did not run");
        let _ = std::fs::remove_file(&path);
    }
}
