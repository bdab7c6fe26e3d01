//! Holding a run to its job's resource limits (`memory_max`, `cpu_max`,
//! `tasks_max`, `nofile_max`), one of two ways, chosen once at the
//! daemon's start:
//!
//! - **cgroup v2**, where the daemon's own cgroup is delegated to it (the
//!   systemd unit's `Delegate=yes`): the daemon's processes move into a leaf
//!   `daemon` beside the runs (cgroup v2 keeps processes out of a cgroup
//!   whose controllers its children use), and each run gets a child cgroup
//!   of its own, `run-<run id>`, with `memory.max`, `cpu.max` and
//!   `pids.max` written before its process moves itself in (between its
//!   clone and its exec); it is removed once the run has ended. A run the
//!   kernel's OOM killer stopped there is told apart (`memory.events`).
//! - **rlimits** elsewhere, set in the run's process between its clone
//!   and its exec: `RLIMIT_DATA` for `memory_max` (per process: its heap,
//!   its private writable mappings), `RLIMIT_NPROC` for `tasks_max` (per
//!   user: every process and thread of the run's user counts, and it binds
//!   no process of root). `cpu_max` has no rlimit: it is not enforced, and
//!   the daemon says so at its start.
//!
//! `nofile_max` is `RLIMIT_NOFILE` on both.

use std::fs;
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::config::resources::{Resources, fmt_memory};

/// How this replica holds runs to their limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Enforcement {
    /// Each run in a cgroup v2 of its own, under this directory (the
    /// daemon's delegated cgroup).
    Cgroup(PathBuf),
    /// rlimits in the run's process; why not a cgroup.
    Rlimits(String),
}

impl Enforcement {
    /// As `status` shows it: `cgroup v2` or `rlimits`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Enforcement::Cgroup(_) => "cgroup v2",
            Enforcement::Rlimits(_) => "rlimits",
        }
    }
}

static ENFORCEMENT: OnceLock<Enforcement> = OnceLock::new();

/// What [`init`] chose, as the registry publishes it.
static PUBLISHED: OnceLock<&'static str> = OnceLock::new();

/// The name the daemon's own processes' leaf cgroup has.
const DAEMON_LEAF: &str = "daemon";

/// The controllers a run's cgroup uses.
const CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// Chooses how runs are held to their limits, once, at the daemon's start,
/// and says so: a delegated cgroup v2 is set up for runs of their own (the
/// daemon's processes moved into a leaf), else rlimits, with a warning
/// when a job sets `cpu_max`, which they cannot hold.
pub(crate) fn init(config: &crate::config::Config) -> &'static Enforcement {
    let enforcement = ENFORCEMENT.get_or_init(|| {
        match own_cgroup().and_then(|dir| {
            delegate(&dir)?;
            Ok(dir)
        }) {
            Ok(dir) => Enforcement::Cgroup(dir),
            Err(why) => Enforcement::Rlimits(why),
        }
    });
    match enforcement {
        Enforcement::Cgroup(dir) => tracing::info!(
            cgroup = %dir.display(),
            "job resource limits: each run in a cgroup v2 of its own (memory_max, cpu_max, tasks_max), nofile_max as an rlimit"
        ),
        Enforcement::Rlimits(why) => tracing::info!(
            "job resource limits: rlimits (memory_max as RLIMIT_DATA per process, tasks_max as RLIMIT_NPROC per user, nofile_max as RLIMIT_NOFILE): {why}"
        ),
    }
    let _ = PUBLISHED.set(enforcement.name());
    warn_unenforced(config);
    enforcement
}

/// Warns of the jobs of `config` whose `cpu_max` this replica cannot hold
/// (on rlimits): at the start and at each reload.
pub(crate) fn warn_unenforced(config: &crate::config::Config) {
    if !matches!(enforcement(), Enforcement::Rlimits(_)) {
        return;
    }
    let capped: Vec<String> = config
        .jobs
        .iter()
        .filter(|j| j.enabled && j.resources.cpu_max.is_some())
        .map(|j| j.name.to_string())
        .collect();
    if !capped.is_empty() {
        tracing::warn!(
            jobs = %capped.join(", "),
            "cpu_max is not enforced: this replica sets rlimits, and CPU time has none (it needs a cgroup v2 delegated to replicron, Delegate=yes)"
        );
    }
}

/// How this replica holds runs to their limits: rlimits unless [`init`]
/// found a delegated cgroup.
pub(crate) fn enforcement() -> &'static Enforcement {
    ENFORCEMENT.get_or_init(|| Enforcement::Rlimits("not set up".to_string()))
}

/// What this replica publishes of it, once [`init`] has chosen (a
/// scheduler used as a library runs no processes of the job file).
pub(crate) fn published() -> Option<&'static str> {
    PUBLISHED.get().copied()
}

/// What `check` says about `cpu_max` on this host, if a job sets it: not
/// enforced where there is no cgroup v2 at all.
pub(crate) fn check_note(config: &crate::config::Config) -> Option<String> {
    let capped: Vec<String> = config
        .jobs
        .iter()
        .filter(|j| j.enabled && j.resources.cpu_max.is_some())
        .map(|j| format!("{:?}", &*j.name))
        .collect();
    if capped.is_empty() {
        return None;
    }
    let jobs = capped.join(", ");
    Some(match usable_cgroup() {
        Err(why) => format!(
            "cpu_max of {jobs} is not enforced on this host ({why}): replicron sets rlimits here, and CPU time has none"
        ),
        Ok(_) => format!(
            "cpu_max of {jobs} is enforced only where the daemon's cgroup v2 is delegated to it (Delegate=yes); elsewhere it sets rlimits, which cannot hold it, and says so at its start"
        ),
    })
}

/// The daemon's own cgroup v2 directory, if it is one it may use.
fn own_cgroup() -> Result<PathBuf, String> {
    let dir = usable_cgroup()?;
    delegated(&dir)?;
    Ok(dir)
}

/// This process's cgroup v2 directory, if the runs' controllers are
/// there: not the hierarchy's root (which is not a process's to divide,
/// and which alone has no `cgroup.events`; the root of a cgroup namespace,
/// a container's, has one).
fn usable_cgroup() -> Result<PathBuf, String> {
    let read =
        |path: &str| fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let dir = cgroup_dir(&read("/proc/self/cgroup")?, &read("/proc/self/mountinfo")?)?;
    if !dir.join("cgroup.events").exists() {
        return Err(
            "it runs in the root of the cgroup v2 hierarchy, which is not delegated to it"
                .to_string(),
        );
    }
    controllers(&dir)?;
    Ok(dir)
}

/// The directory of this process's cgroup v2, from `/proc/self/cgroup`
/// and `/proc/self/mountinfo`.
fn cgroup_dir(cgroup: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Err("no cgroup v2 hierarchy (the host uses cgroup v1)".to_string());
    };
    // Fields: id, parent, major:minor, root, mount point, options…, "-",
    // type, source, super options.
    let mount = mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        if after.split(' ').next() != Some("cgroup2") {
            return None;
        }
        let fields: Vec<&str> = before.split(' ').collect();
        Some((*fields.get(3)?, *fields.get(4)?))
    });
    let Some((root, point)) = mount else {
        return Err("no cgroup v2 file system is mounted".to_string());
    };
    let relative = match root {
        "/" => path,
        root => path
            .strip_prefix(root)
            .ok_or_else(|| format!("its cgroup {path} is outside the mounted {root}"))?,
    };
    Ok(Path::new(point).join(relative.trim_start_matches('/')))
}

/// Whether `dir` is delegated to this process: it may create cgroups in
/// it, move processes and enable controllers.
fn delegated(dir: &Path) -> Result<(), String> {
    for file in ["cgroup.procs", "cgroup.subtree_control"] {
        let path = dir.join(file);
        // Opened, not written: what opening for writing checks is what a
        // write would (the mount, the file's owner and mode).
        if let Err(e) = fs::OpenOptions::new().write(true).open(&path) {
            return Err(format!(
                "its cgroup {} is not delegated to it ({} is not writable: {e}; the systemd unit's Delegate=yes does it)",
                dir.display(),
                path.display()
            ));
        }
    }
    Ok(())
}

/// Whether the controllers the runs use are available in `dir`.
fn controllers(dir: &Path) -> Result<(), String> {
    let controllers = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let available: Vec<&str> = controllers.split_whitespace().collect();
    let missing: Vec<&str> = CONTROLLERS
        .into_iter()
        .filter(|c| !available.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "its cgroup {} lacks the {} controller{}",
            dir.display(),
            missing.join(" and "),
            if missing.len() == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

/// Moves every process of `dir` into its [`DAEMON_LEAF`] and enables the
/// runs' controllers for its children.
fn delegate(dir: &Path) -> Result<(), String> {
    let failed =
        |what: &str, e: io::Error| format!("cannot {what} in its cgroup {}: {e}", dir.display());
    let leaf = dir.join(DAEMON_LEAF);
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed("create a leaf for its own processes", e)),
    }
    // Processes may appear while others move (a fork of one not yet
    // moved): a few rounds.
    for _ in 0..10 {
        let procs = fs::read_to_string(dir.join("cgroup.procs"))
            .map_err(|e| failed("list the processes", e))?;
        let pids: Vec<&str> = procs.split_whitespace().collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            match write_file(&leaf.join("cgroup.procs"), pid) {
                // Gone meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                other => other.map_err(|e| failed("move its processes into a leaf", e))?,
            }
        }
    }
    let enable: Vec<String> = CONTROLLERS.iter().map(|c| format!("+{c}")).collect();
    write_file(&dir.join("cgroup.subtree_control"), &enable.join(" "))
        .map_err(|e| failed("enable the memory, cpu and pids controllers", e))
}

/// Writes `value` to a cgroup's `file` (created if absent, which a temp
/// directory standing in for cgroupfs needs).
fn write_file(file: &Path, value: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(file)?;
    f.write_all(value.as_bytes())
}

/// A run's own cgroup v2, its limits written; it moves itself in through
/// [`RunCgroup::procs`] between its clone and its exec.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    dir: PathBuf,
    procs: OwnedFd,
}

/// The period `cpu.max` is written with, in µs.
const CPU_PERIOD: u64 = 100_000;

impl RunCgroup {
    /// Creates `base/run-<run_id>` for `resources` (`cpus`: the host's
    /// CPUs, which `cpu_max` is a share of).
    pub(crate) fn create(
        base: &Path,
        run_id: i64,
        resources: &Resources,
        cpus: u64,
    ) -> io::Result<RunCgroup> {
        let dir = base.join(format!("run-{run_id}"));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // Left by a replica that died with this run going: its
            // processes died with it (their parent-death signal).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = fs::remove_dir(&dir);
                if let Err(e) = fs::create_dir(&dir)
                    && e.kind() != io::ErrorKind::AlreadyExists
                {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
        let cgroup = |e: io::Error, file: &str| {
            io::Error::new(
                e.kind(),
                format!("cannot write {}: {e}", dir.join(file).display()),
            )
        };
        let mut limits = Vec::new();
        if let Some(bytes) = resources.memory_max {
            limits.push(("memory.max", bytes.to_string()));
        }
        if let Some(percent) = resources.cpu_max {
            let quota = CPU_PERIOD * u64::from(percent) * cpus.max(1) / 100;
            limits.push(("cpu.max", format!("{quota} {CPU_PERIOD}")));
        }
        if let Some(tasks) = resources.tasks_max {
            limits.push(("pids.max", tasks.to_string()));
        }
        for (file, value) in &limits {
            write_file(&dir.join(file), value).map_err(|e| cgroup(e, file))?;
        }
        // Not swapped out past memory_max instead of stopped at it (where
        // the kernel accounts swap).
        if resources.memory_max.is_some() {
            let _ = write_file(&dir.join("memory.swap.max"), "0");
        }
        let procs = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| cgroup(e, "cgroup.procs"))?;
        Ok(RunCgroup {
            dir,
            procs: OwnedFd::from(procs),
        })
    }

    /// Its `cgroup.procs`, open for writing: a process that writes `0`
    /// to it moves itself in.
    pub(crate) fn procs(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd as _;
        self.procs.as_fd()
    }

    /// How many of its processes the OOM killer stopped for `memory.max`.
    pub(crate) fn oom_kills(&self) -> u64 {
        event(&self.dir.join("memory.events"), "oom_kill")
    }

    /// How many forks `pids.max` refused.
    pub(crate) fn forks_refused(&self) -> u64 {
        event(&self.dir.join("pids.events"), "max")
    }

    /// Removes it, once the run has ended: what is left in it (a process
    /// that left the run's group) is killed first.
    pub(crate) async fn remove(self) {
        let kill = self.dir.join("cgroup.kill");
        if kill.exists() {
            let _ = write_file(&kill, "1");
        }
        drop(self.procs);
        // A killed process leaves its cgroup once it is reaped.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        tracing::warn!(cgroup = %self.dir.display(), "cannot remove a run's cgroup: processes are still in it");
    }
}

/// The count of `key` in a cgroup's events file (0 if unread).
fn event(file: &Path, key: &str) -> u64 {
    fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            let (name, count) = line.split_once(' ')?;
            (name == key).then(|| count.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

/// The host's CPUs, which `cpu_max` is a share of.
pub(crate) fn cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// One rlimit to set in a run's process: what it wants, and what it gets
/// where it may not raise the hard limit this process has (the lower
/// one, already in force).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rlimit {
    pub(crate) resource: libc::c_int,
    pub(crate) want: u64,
    pub(crate) fallback: u64,
}

/// The rlimits a run of `resources` gets under `enforcement`, as soft and
/// hard limit both.
pub(crate) fn rlimits(resources: &Resources, enforcement: &Enforcement) -> Vec<Rlimit> {
    use nix::sys::resource::{Resource, getrlimit};
    let mut wanted = Vec::new();
    if let Enforcement::Rlimits(_) = enforcement {
        if let Some(bytes) = resources.memory_max {
            wanted.push((
                Resource::RLIMIT_DATA,
                libc::RLIMIT_DATA as libc::c_int,
                bytes,
            ));
        }
        if let Some(tasks) = resources.tasks_max {
            wanted.push((
                Resource::RLIMIT_NPROC,
                libc::RLIMIT_NPROC as libc::c_int,
                tasks,
            ));
        }
    }
    if let Some(files) = resources.nofile_max {
        wanted.push((
            Resource::RLIMIT_NOFILE,
            libc::RLIMIT_NOFILE as libc::c_int,
            files,
        ));
    }
    wanted
        .into_iter()
        .map(|(which, resource, want)| {
            let hard = getrlimit(which).map_or(u64::MAX, |(_, hard)| hard);
            Rlimit {
                resource,
                want,
                fallback: want.min(hard),
            }
        })
        .collect()
}

/// What a failed run's output says of its limits, if one most likely
/// stopped it: certain on a cgroup (the OOM killer's count), a guess from
/// its signal and its output's last lines on rlimits, which stop nothing
/// but refuse an allocation, a fork or an open that the program reports
/// (or dies of) in its own way.
pub(crate) fn diagnose(
    resources: &Resources,
    cgroup: Option<(u64, u64)>,
    signal: Option<i32>,
    output: &str,
) -> Option<String> {
    let tail = output.to_lowercase();
    let says = |needles: &[&str]| needles.iter().any(|n| tail.contains(n));
    if let Some(bytes) = resources.memory_max {
        let memory = fmt_memory(bytes);
        match cgroup {
            Some((oom_kills, _)) if oom_kills > 0 => {
                return Some(format!("killed: over memory_max {memory}"));
            }
            Some(_) => {}
            None if matches!(signal, Some(libc::SIGSEGV | libc::SIGABRT | libc::SIGBUS))
                || says(&[
                    "memory exhausted",
                    "cannot allocate memory",
                    "out of memory",
                    "memoryerror",
                    "memory allocation of",
                    "bad_alloc",
                    "xmalloc",
                ]) =>
            {
                return Some(format!(
                    "failed: likely over memory_max {memory} (an allocation was refused under its RLIMIT_DATA)"
                ));
            }
            None => {}
        }
    }
    if let Some(tasks) = resources.tasks_max {
        match cgroup {
            Some((_, refused)) if refused > 0 => {
                return Some(format!("failed: a fork was refused at tasks_max {tasks}"));
            }
            Some(_) => {}
            None if says(&[
                "resource temporarily unavailable",
                "cannot fork",
                "can't fork",
            ]) =>
            {
                return Some(format!(
                    "failed: likely at tasks_max {tasks} (a fork was refused under its RLIMIT_NPROC)"
                ));
            }
            None => {}
        }
    }
    if let Some(files) = resources.nofile_max
        && says(&["too many open files"])
    {
        return Some(format!(
            "failed: likely at nofile_max {files} (an open was refused under its RLIMIT_NOFILE)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Resources {
        Resources {
            memory_max: Some(512 << 20),
            cpu_max: Some(50),
            tasks_max: Some(64),
            nofile_max: Some(1024),
        }
    }

    #[test]
    fn the_cgroup_directory_comes_from_the_process_cgroup_and_the_mount() {
        let mountinfo = "22 1 0:21 / /proc rw - proc proc rw\n\
                         30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            cgroup_dir("0::/system.slice/replicron.service\n", mountinfo),
            Ok(PathBuf::from(
                "/sys/fs/cgroup/system.slice/replicron.service"
            ))
        );
        // A hybrid host: cgroup v2 mounted beside the v1 controllers.
        let hybrid = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                      40 31 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_dir(
                "1:name=systemd:/x\n0::/system.slice/replicron.service\n",
                hybrid
            ),
            Ok(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/replicron.service"
            ))
        );
        let v1 = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n";
        assert!(cgroup_dir(v1, hybrid).unwrap_err().contains("cgroup v1"));
        assert!(
            cgroup_dir("0::/x\n", "22 1 0:21 / /proc rw - proc proc rw\n")
                .unwrap_err()
                .contains("no cgroup v2 file system")
        );
        // The root, or a cgroup namespace's: which one, the directory says.
        assert_eq!(
            cgroup_dir("0::/\n", mountinfo),
            Ok(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn a_cgroup_without_write_access_or_controllers_is_not_used() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join("cgroup.procs"), "").expect("procs");
        fs::write(dir.path().join("cgroup.subtree_control"), "").expect("control");
        fs::write(dir.path().join("cgroup.controllers"), "cpuset io memory\n").expect("ctl");
        let e = controllers(dir.path()).expect_err("no pids");
        assert!(e.contains("lacks the cpu and pids controllers"), "{e}");
        fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .expect("ctl");
        assert_eq!(controllers(dir.path()), Ok(()));
        if nix::unistd::Uid::effective().is_root() {
            // Root may write anything: the rest is not for it to show.
            assert_eq!(delegated(dir.path()), Ok(()));
            return;
        }
        assert_eq!(delegated(dir.path()), Ok(()));
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(
            dir.path().join("cgroup.subtree_control"),
            fs::Permissions::from_mode(0o444),
        )
        .expect("chmod");
        let e = delegated(dir.path()).expect_err("read-only");
        assert!(e.contains("not delegated"), "{e}");
    }

    #[test]
    fn delegating_moves_the_processes_into_a_leaf_and_enables_the_controllers() {
        let dir = tempfile::tempdir().expect("temp dir");
        // A temp directory keeps what is written: an empty list, as
        // cgroupfs shows once the processes have moved.
        fs::write(dir.path().join("cgroup.procs"), "").expect("procs");
        delegate(dir.path()).expect("delegated");
        assert!(dir.path().join("daemon").is_dir());
        assert_eq!(
            fs::read_to_string(dir.path().join("cgroup.subtree_control")).expect("control"),
            "+memory +cpu +pids"
        );
        // Already set up (a restart): the same again.
        delegate(dir.path()).expect("delegated again");
    }

    #[test]
    fn a_run_cgroup_gets_its_limits_written_and_its_events_read() {
        let base = tempfile::tempdir().expect("temp dir");
        let cgroup = RunCgroup::create(base.path(), 42, &limits(), 4).expect("created");
        let dir = base.path().join("run-42");
        let read = |file: &str| fs::read_to_string(dir.join(file)).expect(file);
        assert_eq!(read("memory.max"), (512_u64 << 20).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        // 50% of 4 CPUs: two CPUs' time per period.
        assert_eq!(read("cpu.max"), "200000 100000");
        assert_eq!(read("pids.max"), "64");
        assert!(dir.join("cgroup.procs").exists());
        assert_eq!((cgroup.oom_kills(), cgroup.forks_refused()), (0, 0));
        fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n",
        )
        .expect("events");
        fs::write(dir.join("pids.events"), "max 3\n").expect("events");
        assert_eq!((cgroup.oom_kills(), cgroup.forks_refused()), (1, 3));
        // Only what is set is written.
        let only = Resources {
            tasks_max: Some(8),
            ..Resources::default()
        };
        RunCgroup::create(base.path(), 43, &only, 4).expect("created");
        let dir = base.path().join("run-43");
        assert!(!dir.join("memory.max").exists());
        assert!(!dir.join("cpu.max").exists());
        assert_eq!(fs::read_to_string(dir.join("pids.max")).expect("pids"), "8");
        // A left-over directory of the same run is taken over.
        RunCgroup::create(base.path(), 43, &only, 4).expect("again");
    }

    #[test]
    fn the_rlimits_of_each_path() {
        let rlimits_path = Enforcement::Rlimits("test".to_string());
        let set: Vec<(libc::c_int, u64)> = rlimits(&limits(), &rlimits_path)
            .iter()
            .map(|r| (r.resource, r.want))
            .collect();
        assert_eq!(
            set,
            [
                (libc::RLIMIT_DATA as libc::c_int, 512 << 20),
                (libc::RLIMIT_NPROC as libc::c_int, 64),
                (libc::RLIMIT_NOFILE as libc::c_int, 1024),
            ]
        );
        // On a cgroup, only nofile_max is an rlimit.
        let cgroup = Enforcement::Cgroup(PathBuf::from("/sys/fs/cgroup/x"));
        let set: Vec<libc::c_int> = rlimits(&limits(), &cgroup)
            .iter()
            .map(|r| r.resource)
            .collect();
        assert_eq!(set, [libc::RLIMIT_NOFILE as libc::c_int]);
        assert!(rlimits(&Resources::default(), &rlimits_path).is_empty());
        // Never above the hard limit this process has, where it may not
        // raise it.
        let huge = Resources {
            nofile_max: Some(1_048_576),
            ..Resources::default()
        };
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .expect("getrlimit");
        let r = rlimits(&huge, &rlimits_path)[0];
        assert_eq!(r.fallback, hard.min(1_048_576));
    }

    #[test]
    fn a_failure_is_put_down_to_a_limit_only_where_it_shows() {
        let r = limits();
        assert_eq!(
            diagnose(&r, Some((1, 0)), Some(libc::SIGKILL), ""),
            Some("killed: over memory_max 512M".to_string())
        );
        assert_eq!(diagnose(&r, Some((0, 0)), Some(libc::SIGKILL), ""), None);
        assert_eq!(
            diagnose(&r, Some((0, 2)), None, "sh: fork failed"),
            Some("failed: a fork was refused at tasks_max 64".to_string())
        );
        let guess = diagnose(&r, None, None, "tail: memory exhausted\n").expect("memory");
        assert!(
            guess.starts_with("failed: likely over memory_max 512M"),
            "{guess}"
        );
        let guess = diagnose(&r, None, Some(libc::SIGSEGV), "").expect("segv");
        assert!(guess.contains("memory_max"), "{guess}");
        let guess = diagnose(&r, None, None, "sh: 1: Cannot fork\n").expect("fork");
        assert!(guess.contains("tasks_max 64"), "{guess}");
        let guess = diagnose(&r, None, None, "open: Too many open files\n").expect("files");
        assert!(guess.contains("nofile_max 1024"), "{guess}");
        assert_eq!(diagnose(&r, None, None, "exit 3"), None);
        // No limit set, nothing put down to one.
        assert_eq!(
            diagnose(
                &Resources::default(),
                None,
                Some(libc::SIGSEGV),
                "memory exhausted"
            ),
            None
        );
    }
}
