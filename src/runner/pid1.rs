//! replicron as PID 1 (a container's entrypoint, a new PID namespace).
//!
//! PID 1 has two duties no other process has: it adopts every orphan of
//! its namespace (a job's background child whose parent exited), which
//! stays a zombie until PID 1 waits for it, and a signal it has no handler
//! for is not delivered to it (a `docker stop`'s SIGTERM would do nothing).
//! The daemon reaps only its own children, each by its pidfd; a reaper of
//! every child inside it would take their exit statuses from under their
//! waiters. So as PID 1, replicron forks first: the parent stays PID 1 as
//! a small init (as tini does) that forwards the stop and reload signals
//! to its one child, the command itself, reaps every process that comes to
//! it, and ends with its child's status once the child has ended.

use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, pthread_sigmask};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// The signals PID 1 passes on to the command.
const FORWARDED: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// If this process is PID 1, forks: returns in the child, which goes on
/// as the command; the parent never returns (it ends with the child's
/// status). Called first thing in `main`, with one thread.
pub(crate) fn init_if_pid1() {
    if std::process::id() != 1 {
        return;
    }
    let mut waited = SigSet::empty();
    for signal in FORWARDED {
        waited.add(signal);
    }
    waited.add(Signal::SIGCHLD);
    // Blocked before the fork, so that none is lost in between; the
    // child unblocks them.
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&waited), None).is_err() {
        return;
    }
    #[expect(unsafe_code, reason = "a fork has no safe form")]
    // SAFETY: this process has a single thread (the caller's promise), so
    // the child may go on as an ordinary program.
    let forked = unsafe { fork() };
    match forked {
        Ok(ForkResult::Child) => {
            let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&waited), None);
        }
        Ok(ForkResult::Parent { child }) => serve(child, &waited),
        Err(e) => {
            let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&waited), None);
            eprintln!("replicron: as PID 1, cannot fork the command ({e}): orphans are not reaped");
        }
    }
}

/// PID 1's loop: each forwarded signal is sent on to `child`; each SIGCHLD
/// reaps every process that has ended. Ends the process with `child`'s
/// status (128 + its signal, as a shell says, if a signal ended it).
fn serve(child: Pid, waited: &SigSet) -> ! {
    loop {
        match waited.wait() {
            Ok(Signal::SIGCHLD) => {}
            Ok(signal) => {
                let _ = kill(child, signal);
                continue;
            }
            Err(_) => continue,
        }
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => end(code),
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == child => {
                    end(128 + signal as i32)
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => end(1),
            }
        }
    }
}

/// Ends PID 1, and with it the namespace.
fn end(code: i32) -> ! {
    #[expect(
        unsafe_code,
        reason = "the only way to end without the atexit handlers"
    )]
    // SAFETY: `_exit` takes no pointers and ends the process at once; PID 1
    // has written nothing it would flush.
    unsafe {
        libc::_exit(code)
    }
}
