//! `replicron run` as PID 1 of a PID namespace, as a container's
//! entrypoint is (`unshare --pid --fork --mount-proc`): a job's orphaned
//! grandchild is reaped (no zombie stays), and SIGTERM sent to PID 1
//! drains the running run, which is recorded, before replicron exits 0.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{Replica, TestDb, backend_test, history_json, wait_until};

/// Every process: its parent and its state letter (`Z`: a zombie).
fn processes() -> HashMap<i32, (i32, char)> {
    let mut all = HashMap::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the name may hold anything but ends
        // at the last parenthesis.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        all.insert(pid, (ppid, state));
    }
    all
}

/// The processes below `root` (not itself), with their states.
fn descendants(root: i32) -> Vec<(i32, char)> {
    let all = processes();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (&pid, &(ppid, state)) in &all {
            if ppid == parent {
                found.push((pid, state));
                parents.push(pid);
            }
        }
    }
    found
}

backend_test! {
    fn as_pid1_it_reaps_orphans_and_drains_on_sigterm(db: &TestDb) {
        let dir = db.dir().display().to_string();
        let config = db.config(&format!(
            "[daemon]\nshutdown_grace = \"20s\"\n\n\
             [[job]]\nname = \"leaves\"\nschedule = \"* * * * * *\"\n\
             command = '[ -e {dir}/left ] && exit 0; touch {dir}/left; \
             setsid -f sh -c \"touch {dir}/orphan-began; sleep 1; touch {dir}/orphan-ended\" </dev/null >/dev/null 2>&1; \
             while [ ! -e {dir}/orphan-began ]; do sleep 0.05; done'\n\n\
             [[job]]\nname = \"drains\"\nschedule = \"* * * * * *\"\n\
             command = '[ -e {dir}/orphan-ended ] || exit 0; [ -e {dir}/started ] && exit 0; \
             touch {dir}/started; sleep 3; echo done'\n"
        ));
        let mut replica = Replica::start_through(
            &["unshare", "--pid", "--fork", "--mount-proc", "--"],
            &config,
            "pid1",
            &[],
        );
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        // unshare's one child is replicron, PID 1 of the new namespace.
        let init = descendants(replica.pid())
            .into_iter()
            .map(|(pid, _)| pid)
            .find(|pid| processes().get(pid).is_some_and(|(ppid, _)| *ppid == replica.pid()))
            .expect("unshare's child");
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).expect("status");
        let nspid = status
            .lines()
            .find_map(|line| line.strip_prefix("NSpid:"))
            .and_then(|pids| pids.split_whitespace().last())
            .expect("NSpid");
        assert_eq!(nspid, "1", "replicron is PID 1 of its namespace: {status}");

        // The job's shell ends once its grandchild is in a session of its
        // own (out of the run's process group, which ends with the run);
        // the grandchild, reparented to PID 1, ends a second later.
        let ended = db.dir().join("orphan-ended");
        wait_until("the orphan to end", Duration::from_secs(20), || ended.exists());
        let zombies = || -> Vec<(i32, char)> {
            descendants(init)
                .into_iter()
                .filter(|(_, state)| *state == 'Z')
                .collect()
        };
        crate::support::wait_until_or(
            "no zombie under PID 1",
            Duration::from_secs(10),
            || zombies().is_empty(),
            || format!("zombies: {:?}\n{}", zombies(), replica.log_text()),
        );

        // SIGTERM to PID 1 while a run is going: the run finishes and is
        // recorded, and replicron exits 0.
        let started = db.dir().join("started");
        wait_until("the draining run to start", Duration::from_secs(20), || {
            started.exists()
        });
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), Signal::SIGTERM)
            .expect("SIGTERM");
        let status = replica.wait_exit(Duration::from_secs(20)).expect("exits");
        assert!(status.success(), "{status:?}\n{}", replica.log_text());
        let rows = history_json(&config, "drains");
        assert!(rows.iter().all(|r| r["status"] != "running"), "{rows:?}");
        let drained: Vec<_> = rows.iter().filter(|r| r["output"] == "done\n").collect();
        assert_eq!(drained.len(), 1, "{rows:?}");
        assert_eq!(drained[0]["status"], "succeeded", "{rows:?}");
    }
}
