//! The run history's statements, on every backend.

use crate::history::{
    NewRun, RunFilter, RunFinish, RunStatus, latest_run, list_runs, mark_abandoned, prune_runs,
    record_run_finished, record_run_started, record_runs_finished,
};
use chrono::{DateTime, TimeDelta, Utc};

use crate::testing::{TestDb, backend_test};

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
        output_file: None,
    }
}

fn new_run(job: &str, at: i64, attempt: i32, fence: i64) -> NewRun {
    crate::testing::new_run(job, t(at), attempt, "host:1:abc", fence)
}

backend_test! {
    fn rows_round_trip_and_the_unique_key_holds(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let id = record_run_started(&mut conn, &new_run("j", 0, 1, 7)).expect("start");
        let row = latest_run(&mut conn, "j").expect("latest").expect("row");
        assert_eq!(row.id, id);
        assert_eq!(row.status, RunStatus::Running);
        assert_eq!(row.finished_at, None);
        assert_eq!(row.scheduled_at.and_utc(), t(0));
        assert_eq!(
            (row.attempt, row.fence, row.instance.as_str()),
            (1, 7, "host:1:abc")
        );

        // A second row for the same job, instant and attempt is refused.
        let duplicate =
            record_run_started(&mut conn, &new_run("j", 0, 1, 8)).expect_err("duplicate");
        assert!(crate::db::is_contention(&duplicate), "{duplicate}");
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
            record_run_finished(&mut conn, id, &finish(RunStatus::Failed, Some(3), &output), true)
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
        assert_eq!(runs[1].status, RunStatus::Failed);
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
    }
}

backend_test! {
    fn running_rows_under_an_older_fence_are_abandoned(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let old = record_run_started(&mut conn, &new_run("j", 0, 1, 1)).expect("start");
        let current = record_run_started(&mut conn, &new_run("j", 1, 1, 2)).expect("start");
        let other_job = record_run_started(&mut conn, &new_run("k", 0, 1, 1)).expect("start");
        assert_eq!(mark_abandoned(&mut conn, "j", 2).expect("abandon").len(), 1);
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
                .map(|r| r.status)
                .expect("row")
        };
        assert_eq!(status(old), RunStatus::Abandoned);
        assert_eq!(status(current), RunStatus::Running);
        assert_eq!(status(other_job), RunStatus::Running);
        // When an abandoned run ended is not known: nothing is invented.
        assert_eq!(
            runs.iter().find(|r| r.id == old).map(|r| r.finished_at),
            Some(None)
        );
    }
}

backend_test! {
    fn prune_deletes_old_finished_rows_in_batches(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        for n in 0..5 {
            let id = record_run_started(&mut conn, &new_run("j", n, 1, 1)).expect("start");
            record_run_finished(&mut conn, id, &finish(RunStatus::Succeeded, Some(0), ""), true)
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
        assert_eq!(left[0].status, RunStatus::Running);
    }
}

backend_test! {
    fn several_ends_written_in_one_statement_each_get_their_own(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let a = record_run_started(&mut conn, &new_run("a", 0, 1, 1)).expect("start");
        let b = record_run_started(&mut conn, &new_run("b", 0, 1, 1)).expect("start");
        let c = record_run_started(&mut conn, &new_run("c", 0, 1, 1)).expect("start");
        let untouched = record_run_started(&mut conn, &new_run("d", 0, 1, 1)).expect("start");
        let ok = RunFinish {
            status: RunStatus::Succeeded,
            exit_code: Some(0),
            output: "fine\n".to_string(),
            duration: std::time::Duration::from_millis(1500),
            output_file: None,
        };
        let failed = RunFinish {
            status: RunStatus::Failed,
            exit_code: Some(3),
            output: "it's 'quoted' \\ and\nmultiline ✓".to_string(),
            duration: std::time::Duration::from_millis(250),
            output_file: None,
        };
        let killed = RunFinish {
            status: RunStatus::TimedOut,
            exit_code: None,
            output: String::new(),
            duration: std::time::Duration::from_secs(61),
            output_file: None,
        };
        let ends = [(a, &ok), (b, &failed), (c, &killed)];
        assert_eq!(record_runs_finished(&mut conn, &ends).expect("ends"), 3);
        // Written again, the same: nothing changes, and nothing fails.
        record_runs_finished(&mut conn, &ends).expect("ends again");
        let rows = list_runs(&mut conn, &RunFilter { limit: 10, ..Default::default() }).expect("list");
        let row = |id| rows.iter().find(|r| r.id == id).expect("row");
        for (id, finish) in ends {
            let row = row(id);
            assert_eq!((row.status, row.exit_code, row.output.as_str()), (finish.status, finish.exit_code, finish.output.as_str()));
            let took = row.finished_at.expect("end") - row.started_at;
            assert_eq!(took.num_milliseconds(), finish.duration.as_millis() as i64, "run {id}");
        }
        assert_eq!(row(untouched).status, RunStatus::Running);
        assert_eq!(row(untouched).finished_at, None);
        assert_eq!(record_runs_finished(&mut conn, &[]).expect("none"), 0);
    }
}
