//! `replicron history` prints the run history as a table and as JSON.

use diesel::connection::SimpleConnection;

use crate::support::{TestDb, backend_test, replicron, text};

backend_test! {
    fn history_command_prints_table_and_json(db: &TestDb) {
        db.migrate();
        let mut conn = db.raw();
        conn.batch_execute(
            "INSERT INTO replicron_runs \
             (job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, exit_code, output) VALUES \
             ('nightly', '2027-01-01 00:00:00.250', 1, 'host:1:abc', 1, '2027-01-01 00:00:01', '2027-01-01 00:00:02.500', 'succeeded', 0, 'done\n'), \
             ('nightly', '2027-01-01 00:01:00.250', 1, 'host:1:abc', 2, '2027-01-01 00:01:01', '2027-01-01 00:01:02.500', 'timed_out', NULL, ''), \
             ('other', '2027-01-01 00:00:00.250', 1, 'host:1:abc', 1, '2027-01-01 00:00:01', NULL, 'running', NULL, '')",
        )
        .expect("seed the history");
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
        assert_eq!(rows[0]["id"], 2);
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
                "duration_seconds",
                "exit_code",
                "fence",
                "finished_at",
                "id",
                "instance",
                "job",
                "once_key",
                "output",
                "params",
                "parent_runs",
                "scheduled_at",
                "started_at",
                "status",
                "triggered_by",
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
    }
}
