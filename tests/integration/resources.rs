//! A job's resource limits, with a real replica on a host without a
//! delegated cgroup v2 (these test machines: cgroup v1), where they are
//! rlimits: a run sees its `nofile_max` and `tasks_max` as its own limits,
//! a run over its `memory_max` fails with that cause in its output while
//! the daemon goes on running its other jobs, and the replica says which
//! way it holds runs to their limits, at its start and in `status`, and
//! that `cpu_max` is not enforced, as `check` does.

use std::time::Duration;

use serde_json::Value;

use crate::support::{Replica, TestDb, backend_test, history_json, run, wait_until_or};

/// `limited` prints its limits; `hog` keeps what it reads in memory, over
/// its `memory_max`; `plain` has none.
const JOBS: &str = "[[job]]\nname = \"limited\"\nschedule = \"* * * * * *\"\nshell = \"/bin/bash\"\n\
    nofile_max = 16\ntasks_max = 512\ncpu_max = \"50%\"\n\
    command = 'echo \"nofile $(ulimit -n) $(ulimit -Hn) tasks $(ulimit -u)\"'\n\n\
    [[job]]\nname = \"hog\"\nschedule = \"* * * * * *\"\nmemory_max = \"64M\"\n\
    command = 'head -c 200M /dev/zero | tail > /dev/null'\n\n\
    [[job]]\nname = \"plain\"\nschedule = \"* * * * * *\"\ncommand = 'echo ok'\n";

/// The first finished run of `job`.
fn finished(config: &std::path::Path, job: &str) -> Option<Value> {
    history_json(config, job)
        .into_iter()
        .find(|r| r["status"] != "running")
}

backend_test! {
    fn limits_are_rlimits_here_and_a_run_over_one_fails_alone(db: &TestDb) {
        let config = db.config(JOBS);
        let replica = Replica::start(&config, "limits", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let log = replica.log_text();
        assert!(
            log.contains("job resource limits: rlimits"),
            "the start does not say how limits are held:\n{log}"
        );
        assert!(log.contains("cpu_max is not enforced"), "{log}");
        let explain = || replica.log_text();

        let mut limited = None;
        wait_until_or(
            "a finished run of limited",
            Duration::from_secs(30),
            || {
                limited = finished(&config, "limited");
                limited.is_some()
            },
            explain,
        );
        let limited = limited.expect("limited");
        assert_eq!(limited["status"], "succeeded", "{limited}");
        assert_eq!(limited["output"], "nofile 16 16 tasks 512\n", "{limited}");

        let mut hog = None;
        wait_until_or(
            "a finished run of hog",
            Duration::from_secs(60),
            || {
                hog = finished(&config, "hog");
                hog.is_some()
            },
            explain,
        );
        let hog = hog.expect("hog");
        assert_eq!(hog["status"], "failed", "{hog}");
        let output = hog["output"].as_str().expect("output");
        assert!(
            output.contains("memory exhausted")
                && output.contains("replicron: failed: likely over memory_max 64M"),
            "{output}"
        );

        // The daemon goes on: the other job's runs after the failure, and
        // hog's own next ones.
        let succeeded = |job: &str| {
            history_json(&config, job)
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .count()
        };
        let plain_before = succeeded("plain");
        let hog_runs = history_json(&config, "hog").len();
        wait_until_or(
            "plain's runs after hog's failure",
            Duration::from_secs(30),
            || succeeded("plain") >= plain_before + 2 && history_json(&config, "hog").len() > hog_runs,
            explain,
        );
        // A job without limits has the daemon's.
        let plain = finished(&config, "plain").expect("plain");
        assert_eq!(plain["output"], "ok\n");

        // status says which way this replica holds them.
        wait_until_or(
            "status naming the rlimits",
            Duration::from_secs(30),
            || {
                let (_, out, _) = run(&config, &["status", "--format", "json"]);
                let status: Value = serde_json::from_str(&out).unwrap_or_default();
                status["replicas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["id"] == "limits" && r["resource_limits"] == "rlimits")
            },
            explain,
        );
        let (_, table, _) = run(&config, &["status"]);
        assert!(table.contains("LIMITS") && table.contains("rlimits (no cpu_max)"), "{table}");

        // check lists them, and says cpu_max is not enforced here.
        let (code, out, err) = run(&config, &["check", "--count", "0"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("resources cpu_max=50% tasks_max=512 nofile_max=16"), "{out}");
        assert!(out.contains("resources memory_max=64M"), "{out}");
        assert!(
            err.contains("warning: cpu_max of \"limited\" is not enforced on this host"),
            "{err}"
        );
    }
}
