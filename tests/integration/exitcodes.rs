//! A job's exit-code rules on every backend, through `replicron trigger`
//! (the run in the command's own process, recorded as the fleet records
//! it): which codes succeed, which skip, which failures are retried, the
//! rule that decided in each run's output, and no notice for a skip.

use serde_json::Value;

use crate::support::{TestDb, backend_test, history_json, run};

/// `job`'s rows as (attempt, status, exit code, output), oldest first.
fn endings(config: &std::path::Path, job: &str) -> Vec<(i64, String, Option<i64>, String)> {
    let mut rows: Vec<(i64, String, Option<i64>, String)> = history_json(config, job)
        .iter()
        .map(|r: &Value| {
            (
                r["attempt"].as_i64().expect("attempt"),
                r["status"].as_str().expect("status").to_string(),
                r["exit_code"].as_i64(),
                r["output"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    rows
}

backend_test! {
    /// Exit 3 with success_exit_codes = [0, 3] is recorded succeeded;
    /// exit 99 with skip_exit_codes = [99] skipped, tried once though the
    /// job has retries, and not notified; with retry_on_exit_codes = [75]
    /// a job exiting 75, 75, then 2 runs three attempts, the last final.
    /// `trigger` exits 0 for the first two and 2 for the third.
    fn exit_codes_decide_success_skip_and_retry(db: &TestDb) {
        db.migrate();
        let dir = db.dir();
        let (count, events) = (dir.join("picky.count"), dir.join("events"));
        let jobs = format!(
            "[notify]\non = [\"failed\", \"skipped\", \"recovered\"]\n\
             command = 'echo \"$REPLICRON_EVENT $REPLICRON_JOB\" >> {events}'\n\n\
             [[job]]\nname = \"three\"\nschedule = \"@manual\"\ncommand = 'echo three; exit 3'\n\
             success_exit_codes = [0, 3]\n\n\
             [[job]]\nname = \"nothing\"\nschedule = \"@manual\"\ncommand = 'exit 99'\n\
             skip_exit_codes = [99]\nretries = 2\nretry_backoff = \"100ms\"\n\n\
             [[job]]\nname = \"picky\"\nschedule = \"@manual\"\n\
             command = 'n=$(($(cat {count} 2>/dev/null || echo 0) + 1)); echo $n > {count}; \
             [ $n -lt 3 ] && exit 75; exit 2'\n\
             retries = 3\nretry_backoff = \"100ms\"\nretry_on_exit_codes = [75]\n",
            events = events.display(),
            count = count.display(),
        );
        let config = db.config(&jobs);

        let (code, out, err) = run(&config, &["trigger", "three"]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(
            endings(&config, "three"),
            [(
                1,
                "succeeded".to_string(),
                Some(3),
                "three\nreplicron: exit 3: success by success_exit_codes\n".to_string()
            )]
        );

        let (code, out, err) = run(&config, &["trigger", "nothing"]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(
            endings(&config, "nothing"),
            [(
                1,
                "skipped".to_string(),
                Some(99),
                "replicron: exit 99: skipped by skip_exit_codes\n".to_string()
            )]
        );

        let (code, out, err) = run(&config, &["trigger", "picky"]);
        assert_eq!(code, 2, "{out}{err}");
        let failed = |attempt: i64, code: i64, output: &str| {
            (attempt, "failed".to_string(), Some(code), output.to_string())
        };
        assert_eq!(
            endings(&config, "picky"),
            [
                failed(1, 75, ""),
                failed(2, 75, ""),
                failed(3, 2, "replicron: exit 2: not retried (retry_on_exit_codes = [75])\n"),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(&count).expect("the count").trim(),
            "3"
        );
        // The failure is notified; the skip is not.
        let told = std::fs::read_to_string(&events).unwrap_or_default();
        assert_eq!(told, "failed picky\n");
    }
}
