//! The run history on every backend, and `replicron history`.

use chrono::{DateTime, TimeDelta, Utc};
use replicron::history::{
    NewRun, RunFilter, RunFinish, RunStatus, latest_run, list_runs, mark_abandoned, prune_runs,
    record_run_finished, record_run_started,
};

use crate::support::{on_each_backend, replicron, text};

fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2027-01-01T00:00:00.250Z")
        .expect("time")
        .with_timezone(&Utc)
        + TimeDelta::seconds(seconds)
}

fn finish(status: RunStatus, exit_code: Option<i32>, output: &str) -> RunFinish {
    RunFinish {
        status,
        exit_code,
        output: output.to_string(),
        duration: std::time::Duration::from_millis(1500),
    }
}

fn new_run(job: &str, at: i64, attempt: i32, fence: i64) -> NewRun<'_> {
    NewRun {
        job,
        scheduled_at: t(at),
        attempt,
        instance: "host:1:abc",
        fence,
        once_key: None,
    }
}

#[test]
fn rows_round_trip_and_the_unique_key_holds() {
    on_each_backend(|db| {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let id = record_run_started(&mut conn, &new_run("j", 0, 1, 7)).expect("start");
        let row = latest_run(&mut conn, "j").expect("latest").expect("row");
        assert_eq!(row.id, id);
        assert_eq!(row.status, "running");
        assert_eq!(row.finished_at, None);
        assert_eq!(row.scheduled_at.and_utc(), t(0));
        assert_eq!(
            (row.attempt, row.fence, row.instance.as_str()),
            (1, 7, "host:1:abc")
        );

        // A second row for the same job, instant and attempt is refused.
        let duplicate =
            record_run_started(&mut conn, &new_run("j", 0, 1, 8)).expect_err("duplicate");
        assert!(replicron::lease::is_contention(&duplicate), "{duplicate}");
        // Another attempt of the same instant is a new row.
        record_run_started(&mut conn, &new_run("j", 0, 2, 7)).expect("attempt 2");
        // Instants after 2038 survive (a TIMESTAMP bind would turn them to
        // NULL on MySQL).
        let far = t(400 * 86_400 * 365);
        record_run_started(
            &mut conn,
            &NewRun {
                scheduled_at: far,
                ..new_run("far", 0, 1, 1)
            },
        )
        .expect("a run in the year 2427");
        let row = latest_run(&mut conn, "far").expect("latest").expect("row");
        assert_eq!(row.scheduled_at.and_utc(), far);

        let output = "line one\nünïcödé ✓\n".repeat(3);
        assert!(
            record_run_finished(&mut conn, id, &finish(RunStatus::Failed, Some(3), &output))
                .expect("finish")
        );
        let runs = list_runs(
            &mut conn,
            &RunFilter {
                job: Some("j".into()),
                limit: 10,
                ..Default::default()
            },
        )
        .expect("list");
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].id, id, "newest first");
        assert_eq!(runs[1].status, "failed");
        assert_eq!(runs[1].exit_code, Some(3));
        assert_eq!(runs[1].output, output);
        // finished_at is the database's started_at plus the run's duration.
        let finished = runs[1].finished_at.expect("finished");
        assert_eq!(
            finished - runs[1].started_at,
            chrono::TimeDelta::milliseconds(1500)
        );

        let failed = list_runs(
            &mut conn,
            &RunFilter {
                status: Some(RunStatus::Failed),
                limit: 10,
                ..Default::default()
            },
        )
        .expect("list");
        assert_eq!(failed.len(), 1);
    });
}

#[test]
fn running_rows_under_an_older_fence_are_abandoned() {
    on_each_backend(|db| {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let old = record_run_started(&mut conn, &new_run("j", 0, 1, 1)).expect("start");
        let current = record_run_started(&mut conn, &new_run("j", 1, 1, 2)).expect("start");
        let other_job = record_run_started(&mut conn, &new_run("k", 0, 1, 1)).expect("start");
        assert_eq!(mark_abandoned(&mut conn, "j", 2).expect("abandon"), 1);
        let runs = list_runs(
            &mut conn,
            &RunFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .expect("list");
        let status = |id| {
            runs.iter()
                .find(|r| r.id == id)
                .map(|r| r.status.clone())
                .expect("row")
        };
        assert_eq!(status(old), "abandoned");
        assert_eq!(status(current), "running");
        assert_eq!(status(other_job), "running");
        // When an abandoned run ended is not known: nothing is invented.
        assert_eq!(
            runs.iter().find(|r| r.id == old).map(|r| r.finished_at),
            Some(None)
        );
    });
}

#[test]
fn prune_deletes_old_finished_rows_in_batches() {
    on_each_backend(|db| {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        for n in 0..5 {
            let id = record_run_started(&mut conn, &new_run("j", n, 1, 1)).expect("start");
            record_run_finished(&mut conn, id, &finish(RunStatus::Succeeded, Some(0), ""))
                .expect("finish");
        }
        record_run_started(&mut conn, &new_run("j", 9, 1, 1)).expect("still running");
        // Nothing is older than an hour yet.
        assert_eq!(
            prune_runs(&mut conn, std::time::Duration::from_secs(3600), 2).expect("prune"),
            0
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        let older_than = std::time::Duration::from_millis(100);
        assert_eq!(prune_runs(&mut conn, older_than, 2).expect("prune"), 2);
        assert_eq!(prune_runs(&mut conn, older_than, 2).expect("prune"), 2);
        assert_eq!(prune_runs(&mut conn, older_than, 2).expect("prune"), 1);
        assert_eq!(prune_runs(&mut conn, older_than, 2).expect("prune"), 0);
        let left = list_runs(
            &mut conn,
            &RunFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .expect("list");
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].status, "running");
    });
}

#[test]
fn history_command_prints_table_and_json() {
    on_each_backend(|db| {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let first = record_run_started(&mut conn, &new_run("nightly", 0, 1, 1)).expect("start");
        record_run_finished(
            &mut conn,
            first,
            &finish(RunStatus::Succeeded, Some(0), "done\n"),
        )
        .expect("finish");
        let second = record_run_started(&mut conn, &new_run("nightly", 60, 1, 2)).expect("start");
        record_run_finished(&mut conn, second, &finish(RunStatus::TimedOut, None, ""))
            .expect("finish");
        record_run_started(&mut conn, &new_run("other", 0, 1, 1)).expect("start");
        let config = db.config("");
        let config = config.to_str().expect("utf-8");

        let output = replicron(&[
            "history", "--config", config, "--job", "nightly", "--format", "json",
        ]);
        let (out, err) = text(&output);
        assert!(output.status.success(), "{out}{err}");
        let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
        let rows = rows.as_array().expect("array");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["id"], second);
        assert_eq!(rows[0]["status"], "timed_out");
        assert_eq!(rows[0]["exit_code"], serde_json::Value::Null);
        assert_eq!(rows[1]["scheduled_at"], "2027-01-01T00:00:00.250Z");
        assert_eq!(rows[1]["output"], "done\n");
        let mut keys: Vec<_> = rows[1]
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "attempt",
                "confirmed_at",
                "exit_code",
                "fence",
                "finished_at",
                "id",
                "instance",
                "job",
                "once_key",
                "output",
                "scheduled_at",
                "started_at",
                "status",
            ]
        );

        let output = replicron(&["history", "--config", config, "--limit", "2"]);
        let (out, err) = text(&output);
        assert!(output.status.success(), "{out}{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("ID"), "{out}");
        assert!(
            lines[1].contains("other") && lines[1].contains("running"),
            "{out}"
        );
        assert!(
            lines[2].contains("nightly") && lines[2].contains("timed_out"),
            "{out}"
        );
    });
}
