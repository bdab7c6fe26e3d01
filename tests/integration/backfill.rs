//! `replicron backfill` as an operator runs it, on every backend: a second
//! backfill of a range runs again what did not succeed and only that, a dry
//! run says what ran and what will, `verify` agrees with what a backfill
//! ran, and a backfill killed or interrupted twice is run again without
//! holding the job's schedule for its whole `lock_at_most_for`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::DurationRound as _;
use serde_json::Value;

use crate::support::{TestDb, backend_test, history_json, run, wait_until};

/// Minute `m` of a whole hour six hours ago, as REPLICRON_SCHEDULED_AT
/// gives it.
fn minute(m: i64) -> String {
    let base = (chrono::Utc::now() - chrono::TimeDelta::hours(6))
        .duration_trunc(chrono::TimeDelta::hours(1))
        .expect("hour");
    (base + chrono::TimeDelta::minutes(m)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The lines of `path` (none if it does not exist).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `replicron backfill JOB --from FROM --to TO EXTRA…` on `config`.
fn backfill(
    config: &Path,
    job: &str,
    from: &str,
    to: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec!["backfill", job, "--from", from, "--to", to];
    args.extend_from_slice(extra);
    run(config, &args)
}

/// The same, once the backfill of JOB in progress (a killed one's mark,
/// which ends by itself) lets it begin: tried again while refused so, for
/// at most a minute.
pub(crate) fn backfill_once_free(
    config: &Path,
    job: &str,
    from: &str,
    to: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (code, said, err) = backfill(config, job, from, to, extra);
        if code != 2
            || !err.contains("a backfill of it is in progress")
            || std::time::Instant::now() > deadline
        {
            return (code, said, err);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The same, started and left running.
fn start_backfill(config: &Path, job: &str, from: &str, to: &str) -> Child {
    Command::new(crate::support::binary())
        .args([
            "backfill",
            "--config",
            config.to_str().expect("utf-8"),
            job,
            "--from",
            from,
            "--to",
            to,
        ])
        .env_remove("REPLICRON_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("backfill")
}

/// `verify` of `job` over `[from, to]`: its exit code and JSON report.
fn verify(config: &Path, job: &str, from: &str, to: &str) -> (i32, Value, String) {
    let (code, out, err) = run(
        config,
        &[
            "verify", "--job", job, "--from", from, "--to", to, "--format", "json",
        ],
    );
    (
        code,
        serde_json::from_str(&out).unwrap_or(Value::Null),
        format!("{out}{err}"),
    )
}

/// The statuses of `job`'s rows at `instant`, by attempt.
fn statuses_at(config: &Path, job: &str, instant: &str) -> Vec<String> {
    let mut rows: Vec<Value> = history_json(config, job)
        .into_iter()
        .filter(|r| r["scheduled_at"] == instant)
        .collect();
    rows.sort_by_key(|r| r["attempt"].as_i64());
    rows.iter()
        .map(|r| r["status"].as_str().unwrap_or("").to_string())
        .collect()
}

backend_test! {
    /// Ten per-minute instants, three of which fail: the backfill exits 1.
    /// The dry run then says, per instant, how it ran and what will run.
    /// The same backfill again runs the three failed ones and only them
    /// (one succeeds now: exit 1 still), again the two left (exit 0), then
    /// nothing. An overlapping range runs only its new instants;
    /// `--rerun-succeeded` runs succeeded ones again. Through it all
    /// `verify` finds no duplicate, and counts the backfill's reruns.
    fn a_second_backfill_reruns_what_did_not_succeed_and_verify_agrees(db: &TestDb) {
        db.migrate();
        let (out, failing) = (db.dir().join("instants.out"), db.dir().join("failing"));
        let config = db.config(&format!(
            "[[job]]\nname = \"billing\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"$REPLICRON_SCHEDULED_AT\" >> {}; if grep -qxF \"$REPLICRON_SCHEDULED_AT\" {} 2>/dev/null; then exit 3; fi'\n",
            out.display(),
            failing.display()
        ));
        let fail = |minutes: &[i64]| {
            let text: String = minutes.iter().map(|m| format!("{}\n", minute(*m))).collect();
            std::fs::write(&failing, text).expect("failing");
        };
        let (from, to) = (minute(0), minute(10));
        fail(&[2, 5, 7]);
        let (code, said, err) = backfill(&config, "billing", &from, &to, &[]);
        assert_eq!(code, 1, "{said}{err}");
        assert_eq!(lines(&out).len(), 10);

        let (code, listed, err) = backfill(&config, "billing", &from, &to, &["--dry-run"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(listed.matches("ran before: failed; will run again").count(), 3, "{listed}");
        assert_eq!(listed.matches("ran before: succeeded; skipped").count(), 7, "{listed}");
        assert!(listed.contains(&format!("{}  ran before: failed; will run again", minute(5))), "{listed}");
        assert_eq!(lines(&out).len(), 10, "a dry run ran the job");

        // 00:05 succeeds now; 00:02 and 00:07 fail again.
        fail(&[2, 7]);
        let (code, said, err) = backfill(&config, "billing", &from, &to, &[]);
        assert_eq!(code, 1, "{said}{err}");
        assert_eq!(lines(&out)[10..], [minute(2), minute(5), minute(7)], "only the failed ones, in order");
        assert_eq!(said.matches("skipped: it succeeded before").count(), 7, "{said}");
        assert_eq!(said.matches("(ran before: failed)").count(), 3, "{said}");
        assert_eq!(statuses_at(&config, "billing", &minute(5)), ["failed", "succeeded"]);

        fail(&[]);
        let (code, said, err) = backfill(&config, "billing", &from, &to, &["--only-missing"]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(lines(&out)[13..], [minute(2), minute(7)]);
        assert_eq!(statuses_at(&config, "billing", &minute(7)), ["failed", "failed", "succeeded"]);
        let (code, said, err) = backfill(&config, "billing", &from, &to, &[]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(said.matches("skipped: it succeeded before").count(), 10, "{said}");
        assert_eq!(lines(&out).len(), 15, "nothing ran");

        // An overlapping range runs its new instants only.
        let (code, said, err) = backfill(&config, "billing", &minute(5), &minute(15), &[]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(lines(&out)[15..], (10..15).map(minute).collect::<Vec<_>>());

        let (code, report, text) = verify(&config, "billing", &minute(0), &minute(14));
        assert_eq!(code, 0, "{text}");
        assert_eq!(report["jobs"][0]["rerun"], 3, "{report}");
        assert_eq!(report["violations"], serde_json::json!([]), "{report}");

        // Succeeded instants run again only when asked; still no duplicate.
        let (code, said, err) = backfill(&config, "billing", &minute(0), &minute(2), &["--rerun-succeeded"]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(lines(&out)[20..], [minute(0), minute(1)]);
        let (code, report, text) = verify(&config, "billing", &minute(0), &minute(14));
        assert_eq!(code, 0, "{text}");
        assert_eq!(report["jobs"][0]["rerun"], 5, "{report}");
        let (code, _, err) = backfill(&config, "billing", &from, &to, &["--rerun-succeeded", "--only-missing"]);
        assert_eq!(code, 2, "{err}");
    }
}

backend_test! {
    /// A backfill killed (SIGKILL) while an instant runs, and one ended by a
    /// second Ctrl-C, leave that instant recorded as not done: the same
    /// backfill again runs it (and exits 0), though the job keeps its
    /// default 10-minute `lock_at_most_for`: the killed backfill's mark and
    /// lease end within a backfill's short lease.
    fn a_killed_or_twice_interrupted_backfill_runs_its_instant_again(db: &TestDb) {
        db.migrate();
        let (out, hang) = (db.dir().join("instants.out"), db.dir().join("hang"));
        let config = db.config(&format!(
            "[[job]]\nname = \"slow\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"start $REPLICRON_SCHEDULED_AT\" >> {out}; if [ -e {hang} ]; then sleep 120; fi; echo \"end $REPLICRON_SCHEDULED_AT\" >> {out}'\n",
            out = out.display(),
            hang = hang.display()
        ));
        for (round, (from, to)) in [(minute(0), minute(3)), (minute(10), minute(13))].into_iter().enumerate() {
            std::fs::write(&hang, "").expect("hang");
            let mut first = start_backfill(&config, "slow", &from, &to);
            let started = format!("start {from}");
            wait_until("the first instant started", Duration::from_secs(30), || lines(&out).contains(&started));
            if round == 0 {
                first.kill().expect("kill");
            } else {
                let pid = nix::unistd::Pid::from_raw(first.id() as i32);
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
                std::thread::sleep(Duration::from_millis(300));
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
            }
            let ended = first.wait_with_output().expect("ends");
            if round == 1 {
                assert_eq!(ended.status.code(), Some(130), "{ended:?}");
                let err = String::from_utf8_lossy(&ended.stderr);
                assert!(err.contains("left to be marked abandoned"), "{err}");
            }
            std::fs::remove_file(&hang).expect("no hang");
            let (code, listed, err) = backfill(&config, "slow", &from, &to, &["--dry-run"]);
            assert_eq!(code, 0, "{err}");
            // Interrupted (its row left running or abandoned), or, when the
            // second Ctrl-C came after the first had stopped the body,
            // recorded killed: either way it runs again.
            assert!(
                listed.contains(&format!("{from}  ran before: interrupted"))
                    || listed.contains(&format!("{from}  ran before: killed; will run again")),
                "{listed}"
            );
            let waited = std::time::Instant::now();
            let (code, said, err) = backfill_once_free(&config, "slow", &from, &to, &[]);
            assert_eq!(code, 0, "{said}{err}");
            assert!(waited.elapsed() < Duration::from_secs(45), "waited {:?}", waited.elapsed());
            assert!(
                said.contains("(ran before: running)")
                    || said.contains("(ran before: abandoned)")
                    || said.contains("(ran before: killed)"),
                "{said}"
            );
            let ends: Vec<String> = lines(&out).into_iter().filter(|l| l.starts_with("end ")).collect();
            let (first, last) = (format!("end {from}"), format!("end {to}"));
            let here: Vec<&String> = ends.iter().filter(|l| **l >= first && **l < last).collect();
            assert_eq!(here.len(), 3, "each instant ended once: {ends:?}");
            let statuses = statuses_at(&config, "slow", &from);
            assert_eq!(statuses.last().map(String::as_str), Some("succeeded"), "{statuses:?}");
            assert_eq!(statuses.len(), 2, "{statuses:?}");
        }
    }
}

backend_test! {
    /// A replica's API refuses to backfill a paused job without `force`
    /// (409, as the command line exits 2), and a backfill going pauses
    /// with its job: no instant starts while the job is paused, and it goes
    /// on, to the end, once resumed. Meanwhile a second backfill of the job
    /// is refused, from the command line and the API, naming the first.
    /// With `force` it runs while paused.
    fn an_api_backfill_obeys_pause(db: &TestDb) {
        use crate::web::{TOKEN, free_ports, post_json};
        db.migrate();
        let out = db.dir().join("instants.out");
        let [port] = free_ports::<1>();
        let jobs = format!(
            "[web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"billing\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"$REPLICRON_SCHEDULED_AT\" >> {}; sleep 0.3'\n",
            out.display()
        );
        let replica_config = db.config_named(
            "replica.toml",
            &db.url,
            &format!("[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n{jobs}"),
        );
        let config = db.config(&jobs);
        // Paused before the replica starts: nothing of the schedule runs.
        let (code, _, err) = run(&config, &["pause", "billing"]);
        assert_eq!(code, 0, "{err}");
        let replica = crate::support::Replica::start(&replica_config, "r0", None, &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let auth = [("Authorization", &*format!("Bearer {TOKEN}"))];
        let body = |from: i64, to: i64, force: bool| {
            format!(r#"{{"from": "{}", "to": "{}", "force": {force}}}"#, minute(from), minute(to))
        };
        let (code, answer) = post_json(port, "/api/v1/jobs/billing/backfill", &auth, &body(0, 40, false));
        assert_eq!(code, 409, "{answer}");
        assert!(answer.to_string().contains("paused"), "{answer}");
        let (code, _, err) = backfill(&config, "billing", &minute(0), &minute(40), &[]);
        assert_eq!(code, 2, "{err}");
        assert!(lines(&out).is_empty(), "a refused backfill ran");

        // Resumed, started, paused halfway: it stops starting instants.
        let (code, _, err) = run(&config, &["resume", "billing"]);
        assert_eq!(code, 0, "{err}");
        let (code, answer) = post_json(port, "/api/v1/jobs/billing/backfill", &auth, &body(0, 40, false));
        assert_eq!(code, 202, "{answer}");
        wait_until("five instants", Duration::from_secs(30), || lines(&out).len() >= 5);
        let (code, _, err) = run(&config, &["pause", "billing"]);
        assert_eq!(code, 0, "{err}");
        // The instant going when the pause came may still start its body.
        std::thread::sleep(Duration::from_secs(1));
        let at_pause = lines(&out).len();
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(lines(&out).len(), at_pause, "instants started while paused");
        assert!(at_pause < 40, "{at_pause}");
        replica.wait_for_log("backfill waits: the job is paused", Duration::from_secs(30));
        // One backfill of a job at a time, fleet-wide: the replica's is named.
        let (code, _, err) = backfill(&config, "billing", &minute(100), &minute(103), &["--force"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("a backfill of it is in progress (by r0"), "{err}");

        // Meanwhile the API refuses a second backfill of the job too.
        let (code, answer) = post_json(port, "/api/v1/jobs/billing/backfill", &auth, &body(100, 103, true));
        assert_eq!(code, 409, "{answer}");
        assert!(answer.to_string().contains("in progress"), "{answer}");

        let (code, _, err) = run(&config, &["resume", "billing"]);
        assert_eq!(code, 0, "{err}");
        let expected: Vec<String> = (0..40).map(minute).collect();
        // A bound, not a wait: about 15 s alone, longer beside the suite's
        // other replicas.
        wait_until("the whole range", Duration::from_secs(240), || {
            expected.iter().all(|m| lines(&out).contains(m))
        });

        // Forced, another range runs while the job is paused.
        let (code, _, err) = run(&config, &["pause", "billing"]);
        assert_eq!(code, 0, "{err}");
        wait_until("the backfill's end", Duration::from_secs(30), || {
            let (code, answer) = post_json(port, "/api/v1/jobs/billing/backfill", &auth, &body(100, 103, true));
            assert!(code == 202 || code == 409, "{answer}");
            code == 202
        });
        wait_until("the forced range", Duration::from_secs(60), || {
            (100..103).map(minute).all(|m| lines(&out).contains(&m))
        });
        drop(replica);
        let written = lines(&out);
        let mut once = written.clone();
        once.sort();
        once.dedup();
        assert_eq!(once.len(), written.len(), "none twice: {written:?}");
    }
}

backend_test! {
    /// `backfill PARENT --with-dependents` runs each job that runs after
    /// PARENT at each of its backfilled instants that succeeded, once, in
    /// order, linked to the parents' runs: not where PARENT failed, and a
    /// fan-in only where every parent succeeded. Run again (the failure
    /// fixed, the fan-in's other parent backfilled), it runs what is left
    /// and nothing twice. Without the flag no dependent runs.
    fn a_backfill_with_dependents_runs_each_child_once_in_order(db: &TestDb) {
        db.migrate();
        let (out, failing) = (db.dir().join("instants.out"), db.dir().join("failing"));
        let body = |name: &str| {
            format!(
                "command = 'echo \"{name} $REPLICRON_SCHEDULED_AT\" >> {}; if grep -qxF \"{name} $REPLICRON_SCHEDULED_AT\" {} 2>/dev/null; then exit 3; fi'\n",
                out.display(),
                failing.display()
            )
        };
        let config = db.config(&format!(
            "[[job]]\nname = \"extract\"\nschedule = \"* * * * *\"\n{}\n\
             [[job]]\nname = \"other\"\nschedule = \"* * * * *\"\n{}\n\
             [[job]]\nname = \"load\"\nafter = [\"extract\"]\n{}\n\
             [[job]]\nname = \"report\"\nafter = [\"extract\", \"other\"]\n{}",
            body("extract"),
            body("other"),
            body("load"),
            body("report")
        ));
        let of = |name: &str| -> Vec<String> {
            lines(&out)
                .into_iter()
                .filter_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
                .collect()
        };
        let (from, to) = (minute(0), minute(5));
        let (code, said, err) = backfill(&config, "extract", &from, &to, &[]);
        assert_eq!(code, 0, "{said}{err}");
        assert!(of("load").is_empty(), "a backfill without --with-dependents ran a child");
        std::fs::write(&failing, format!("extract {}\n", minute(7))).expect("failing");
        let (code, said, err) = backfill(&config, "extract", &minute(5), &minute(10), &["--with-dependents"]);
        assert_eq!(code, 1, "{said}{err}");
        assert!(said.contains("report: not run: not every parent of it succeeded"), "{said}");
        // After each instant that succeeded, in order; none where it failed.
        assert_eq!(of("load"), [5, 6, 8, 9].map(minute));
        assert!(of("report").is_empty());
        let lines_now = lines(&out);
        let at = |needle: String| lines_now.iter().position(|l| *l == needle).expect("written");
        assert!(at(format!("extract {}", minute(6))) < at(format!("load {}", minute(6))));
        assert!(at(format!("load {}", minute(6))) < at(format!("extract {}", minute(8))));

        let (code, listed, err) = backfill(&config, "extract", &minute(5), &minute(10), &["--with-dependents", "--dry-run"]);
        assert_eq!(code, 0, "{err}");
        assert!(listed.contains(&format!("{}    then load, once extract has succeeded: never ran; will run", minute(7))), "{listed}");

        std::fs::remove_file(&failing).expect("fixed");
        let (code, said, err) = backfill(&config, "other", &minute(5), &minute(10), &[]);
        assert_eq!(code, 0, "{said}{err}");
        // The earlier range, with dependents now: its load runs once each.
        let (code, said, err) = backfill(&config, "extract", &minute(0), &minute(10), &["--with-dependents"]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(of("extract").len(), 11, "only the failed instant again");
        assert_eq!(of("load"), [5, 6, 8, 9, 0, 1, 2, 3, 4, 7].map(minute));
        assert_eq!(of("report"), (5..10).map(minute).collect::<Vec<_>>());
        let (code, said, err) = backfill(&config, "extract", &minute(0), &minute(10), &["--with-dependents"]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(lines(&out).len(), 11 + 10 + 5 + 5, "nothing twice");
        // Each child's run is linked to the parents' runs that started it.
        let rows = history_json(&config, "report");
        assert_eq!(rows.len(), 5, "{rows:?}");
        assert!(rows.iter().all(|r| r["triggered_by"] == "backfill" && r["parent_runs"].as_array().is_some_and(|p| p.len() == 2)), "{rows:?}");
    }
}

backend_test! {
    /// `backfill --cancel ID` stops the backfill ID in progress, run by
    /// another process: the instant running ends, no further one starts,
    /// and it exits 1 saying so. `status` lists it while it is in
    /// progress, with its id and progress (instants done of its total,
    /// failed, the one it is at). An unknown id, or the id of another
    /// job's backfill, cancels nothing. With none in progress
    /// `JOB --cancel` exits 1; a new backfill of the job then runs.
    fn a_backfill_is_cancelled(db: &TestDb) {
        db.migrate();
        let (out, hang) = (db.dir().join("instants.out"), db.dir().join("hang"));
        let config = db.config(&format!(
            "[[job]]\nname = \"slow\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"start $REPLICRON_SCHEDULED_AT\" >> {out}; while [ -e {hang} ]; do sleep 0.05; done; echo \"end $REPLICRON_SCHEDULED_AT\" >> {out}'\n",
            out = out.display(),
            hang = hang.display()
        ));
        std::fs::write(&hang, "").expect("hang");
        let first = start_backfill(&config, "slow", &minute(0), &minute(5));
        let started = format!("start {}", minute(0));
        wait_until("the first instant started", Duration::from_secs(30), || lines(&out).contains(&started));
        // `status` lists it.
        let (code, said, err) = run(&config, &["status", "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let status: Value = serde_json::from_str(&said).expect("status JSON");
        let going = &status["backfills"][0];
        assert_eq!(going["job"], "slow", "{status}");
        assert_eq!((going["total"].as_i64(), going["done"].as_i64(), going["failed"].as_i64()), (Some(5), Some(0), Some(0)), "{status}");
        assert_eq!(going["current"], minute(0), "{status}");
        assert_eq!(going["from"], minute(0), "{status}");
        assert_eq!(status["throttle"]["backfill_instants_left"], 5, "{status}");
        assert_eq!(status["throttle"]["max_backfill_instants"], 10000, "{status}");
        assert_eq!(status["throttle"]["max_starts_per_second"], 50, "{status}");
        let id = going["id"].as_i64().expect("id").to_string();
        let (_, table, _) = run(&config, &["status"]);
        assert!(table.contains("BACKFILL") && table.contains("0/5"), "{table}");
        let (code, _, err) = run(&config, &["backfill", "--cancel", "999999"]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("no backfill 999999 is in progress"), "{err}");
        let (code, _, err) = run(&config, &["backfill", "other", "--cancel", &id]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(&format!("backfill {id} is of slow, not of other")), "{err}");
        let (code, _, err) = run(&config, &["backfill", "--cancel", "x"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("expected a backfill's id"), "{err}");
        let (code, said, err) = run(&config, &["backfill", "--cancel", &id]);
        assert_eq!(code, 0, "{said}{err}");
        assert!(said.contains(&format!("cancelled backfill {id} of slow run by")), "{said}");
        let (_, audit, _) = run(&config, &["audit", "--format", "json"]);
        assert!(audit.contains("cancelled backfill"), "{audit}");
        std::fs::remove_file(&hang).expect("no hang");
        let ended = first.wait_with_output().expect("ends");
        let err = String::from_utf8_lossy(&ended.stderr);
        assert_eq!(ended.status.code(), Some(1), "{err}");
        assert!(err.contains("the backfill was cancelled; 4 of 5 instants were not started"), "{err}");
        assert_eq!(lines(&out), [format!("start {}", minute(0)), format!("end {}", minute(0))]);
        let (code, _, err) = run(&config, &["backfill", "slow", "--cancel"]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("no backfill of slow is in progress"), "{err}");
        let (_, said, _) = run(&config, &["status", "--format", "json"]);
        let status: Value = serde_json::from_str(&said).expect("status JSON");
        assert_eq!(status["backfills"], serde_json::json!([]), "{status}");
        let (code, said, err) = backfill(&config, "slow", &minute(0), &minute(5), &[]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(lines(&out).len(), 10, "the four left ran");
    }
}

backend_test! {
    /// A backfill of an `overlap = "allow"` job runs beside the job's
    /// scheduled runs, each of which holds its instant's own row under a
    /// fence of that row's: the backfill's instants hold rows of their
    /// own too, so none of its claims takes the scheduled runs going for a
    /// vanished holder's, and none is marked `abandoned` (a false alert).
    fn a_backfill_of_an_allow_job_leaves_its_scheduled_runs_going(db: &TestDb) {
        db.migrate();
        let jobs = "[[job]]\nname = \"wide\"\nschedule = \"* * * * * *\"\n\
                    overlap = \"allow\"\nmax_concurrent = 10\n\
                    command = 'if [ \"$REPLICRON_TRIGGER\" = backfill ]; then sleep 0.1; else sleep 4; fi'\n";
        let config = db.config(jobs);
        let replica = crate::support::Replica::start(&config, "r0", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        wait_until("scheduled runs going", Duration::from_secs(30), || {
            history_json(&config, "wide")
                .iter()
                .filter(|r| r["status"] == "running" && r["triggered_by"] == "schedule")
                .count()
                >= 2
        });
        // Four instants, a second apart.
        let from = minute(0);
        let to = (chrono::DateTime::parse_from_rfc3339(&from).expect("time") + chrono::TimeDelta::seconds(4))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (code, said, err) = backfill(&config, "wide", &from, &to, &[]);
        assert_eq!(code, 0, "{said}{err}");
        // The scheduled runs that went meanwhile end as they ran.
        std::thread::sleep(Duration::from_secs(5));
        drop(replica);
        let rows = history_json(&config, "wide");
        let backfilled = rows.iter().filter(|r| r["triggered_by"] == "backfill").count();
        assert_eq!(backfilled, 4, "{rows:#?}");
        let abandoned: Vec<&Value> = rows.iter().filter(|r| r["status"] == "abandoned").collect();
        assert!(abandoned.is_empty(), "{abandoned:#?}");
    }
}

backend_test! {
    /// `[daemon] max_backfill_instants` bounds the instants the backfills
    /// in progress have left, together, across the fleet: with 6 and a
    /// backfill of 5 instants going, one of 3 more is refused naming the
    /// limit and the backfill in progress (and recorded so in the audit
    /// log); one of 1 fits. A value out of range is refused by `check`,
    /// naming the file and the key, as is a bad `max_starts_per_second`.
    fn the_fleets_backfilled_instants_are_bounded(db: &TestDb) {
        db.migrate();
        let (out, hang) = (db.dir().join("instants.out"), db.dir().join("hang"));
        let jobs = format!(
            "[[job]]\nname = \"slow\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"slow $REPLICRON_SCHEDULED_AT\" >> {out}; while [ -e {hang} ]; do sleep 0.05; done'\n\n\
             [[job]]\nname = \"other\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"other $REPLICRON_SCHEDULED_AT\" >> {out}'\n",
            out = out.display(),
            hang = hang.display()
        );
        let config = db.config_named("bounded.toml", &db.url, &format!("[daemon]\nmax_backfill_instants = 6\n\n{jobs}"));
        std::fs::write(&hang, "").expect("hang");
        let first = start_backfill(&config, "slow", &minute(0), &minute(5));
        let started = format!("slow {}", minute(0));
        wait_until("the first instant started", Duration::from_secs(30), || lines(&out).contains(&started));
        let (code, said, err) = backfill(&config, "other", &minute(0), &minute(3), &[]);
        assert_eq!(code, 2, "{said}{err}");
        assert!(err.contains("over [daemon] max_backfill_instants = 6"), "{err}");
        assert!(err.contains("5 left of backfill") && err.contains(" of slow (by "), "{err}");
        let (_, audit, _) = run(&config, &["audit", "--format", "json"]);
        assert!(audit.contains("max_backfill_instants = 6"), "the refusal is audited: {audit}");
        let (code, said, err) = backfill(&config, "other", &minute(0), &minute(1), &[]);
        assert_eq!(code, 0, "{said}{err}");
        std::fs::remove_file(&hang).expect("no hang");
        let ended = first.wait_with_output().expect("ends");
        assert_eq!(ended.status.code(), Some(0), "{ended:?}");
        // Over: the whole limit is free again.
        let (code, said, err) = backfill(&config, "other", &minute(1), &minute(7), &[]);
        assert_eq!(code, 0, "{said}{err}");

        for (daemon, key) in [
            ("max_backfill_instants = 0", "max_backfill_instants"),
            ("max_starts_per_second = -5", "max_starts_per_second"),
            ("max_starts_per_second = \"fast\"", "max_starts_per_second"),
        ] {
            let bad = db.config_named("bad.toml", &db.url, &format!("[daemon]\n{daemon}\n\n{jobs}"));
            let (code, said, err) = run(&bad, &["check"]);
            assert_ne!(code, 0, "{daemon}: {said}{err}");
            assert!(err.contains("bad.toml") && err.contains(key), "{daemon}: {err}");
        }
    }
}

backend_test! {
    /// `[daemon] max_starts_per_second` paces a backfill's instants: at 2 a
    /// second, 6 quick instants take at least 2.5 s.
    fn a_backfill_starts_under_the_throttle(db: &TestDb) {
        db.migrate();
        let out = db.dir().join("instants.out");
        let config = db.config_named(
            "throttled.toml",
            &db.url,
            &format!(
                "[daemon]\nmax_starts_per_second = 2\n\n[[job]]\nname = \"quick\"\nschedule = \"* * * * *\"\n\
                 command = 'echo \"$REPLICRON_SCHEDULED_AT\" >> {}'\n",
                out.display()
            ),
        );
        let began = std::time::Instant::now();
        let (code, said, err) = backfill(&config, "quick", &minute(0), &minute(6), &[]);
        assert_eq!(code, 0, "{said}{err}");
        assert_eq!(lines(&out).len(), 6);
        assert!(began.elapsed() >= Duration::from_millis(2500), "took {:?}", began.elapsed());
    }
}

backend_test! {
    /// The API and the dashboard list every backfill in progress in the
    /// fleet with its progress (one run by another process too), and cancel
    /// it: an action that needs the token (refused without it; the
    /// dashboard's form needs a signed-in session and its CSRF token),
    /// refused for an id not in progress, and recorded in the audit log. A
    /// replica's backfill starts under its `max_starts_per_second`,
    /// counted in `replicron_throttled_starts_total`.
    fn an_api_backfill_is_listed_and_cancelled(db: &TestDb) {
        use crate::web::{TOKEN, free_ports, get_json, http, post_json};
        db.migrate();
        let (out, hang) = (db.dir().join("instants.out"), db.dir().join("hang"));
        let [port] = free_ports::<1>();
        let jobs = format!(
            "[web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"slow\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"slow $REPLICRON_SCHEDULED_AT\" >> {out}; while [ -e {hang} ]; do sleep 0.05; done'\n\n\
             [[job]]\nname = \"quick\"\nschedule = \"* * * * *\"\n\
             command = 'echo \"quick $REPLICRON_SCHEDULED_AT\" >> {out}'\n",
            out = out.display(),
            hang = hang.display()
        );
        let replica_config = db.config_named(
            "replica.toml",
            &db.url,
            &format!("[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\nmax_starts_per_second = 1\n\n{jobs}"),
        );
        let config = db.config(&jobs);
        let replica = crate::support::Replica::start(&replica_config, "r0", None, &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        let bearer = format!("Bearer {TOKEN}");
        let auth = [("Authorization", bearer.as_str())];
        let body = |from: i64, to: i64| format!(r#"{{"from": "{}", "to": "{}"}}"#, minute(from), minute(to));

        // Three quick instants at one a second: two of them held back.
        let (code, answer) = post_json(port, "/api/v1/jobs/quick/backfill", &auth, &body(0, 3));
        assert_eq!(code, 202, "{answer}");
        wait_until("three quick instants", Duration::from_secs(30), || {
            lines(&out).iter().filter(|l| l.starts_with("quick ")).count() == 3
        });
        let (_, _, metrics) = http(port, "GET", "/metrics", &[], "");
        let throttled: f64 = metrics
            .lines()
            .find(|l| l.starts_with("replicron_throttled_starts_total{kind=\"backfill\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        assert!(throttled >= 2.0, "{metrics}");

        // A backfill another process runs is listed with its progress.
        std::fs::write(&hang, "").expect("hang");
        let cli = start_backfill(&config, "slow", &minute(0), &minute(4));
        wait_until("its first instant", Duration::from_secs(30), || lines(&out).contains(&format!("slow {}", minute(0))));
        let (code, jobs_now) = get_json(port, "/api/v1/jobs");
        assert_eq!(code, 200, "{jobs_now}");
        let listed = &jobs_now["backfills"][0];
        assert_eq!((listed["job"].as_str(), listed["total"].as_i64(), listed["done"].as_i64()), (Some("slow"), Some(4), Some(0)), "{jobs_now}");
        assert_eq!(listed["current"], minute(0), "{jobs_now}");
        let id = listed["id"].as_i64().expect("id");
        let (_, job_now) = get_json(port, "/api/v1/jobs/slow");
        assert_eq!(job_now["backfills"][0]["id"], id, "{job_now}");
        let (_, _, page) = http(port, "GET", "/jobs/slow", &[], "");
        assert!(page.contains("id=\"backfills\"") && page.contains("0/4"), "{page}");
        assert!(!page.contains("cancel-backfill"), "an anonymous page offers a cancel");
        let (_, _, overview) = http(port, "GET", "/", &[], "");
        assert!(overview.contains("Backfills in progress"), "{overview}");

        // Cancelled through the API: not without the token, not by an id
        // not in progress.
        let cancel = "/api/v1/jobs/slow/cancel-backfill";
        let (code, answer) = post_json(port, cancel, &[], &format!(r#"{{"id": {id}}}"#));
        assert_eq!(code, 401, "{answer}");
        let (code, answer) = post_json(port, cancel, &auth, r#"{"id": 999999}"#);
        assert_eq!(code, 409, "{answer}");
        assert!(answer.to_string().contains("no backfill 999999 is in progress"), "{answer}");
        let (code, answer) = post_json(port, cancel, &auth, &format!(r#"{{"id": {id}}}"#));
        assert_eq!(code, 200, "{answer}");
        assert!(answer.to_string().contains(&format!("cancelled backfill {id} of slow")), "{answer}");
        std::fs::remove_file(&hang).expect("no hang");
        let ended = cli.wait_with_output().expect("ends");
        assert_eq!(ended.status.code(), Some(1), "{ended:?}");
        assert_eq!(lines(&out).iter().filter(|l| l.starts_with("slow ")).count(), 1);
        let (_, jobs_now) = get_json(port, "/api/v1/jobs");
        assert_eq!(jobs_now["backfills"], serde_json::json!([]), "{jobs_now}");
        let id_text = id.to_string();
        let (_, audit) = get_json(port, "/api/v1/audit?action=backfill");
        let entries = audit["entries"].as_array().cloned().unwrap_or_default();
        assert!(
            entries.iter().any(|e| e["via"] == "api" && e["result"] == "done" && e["args"]["cancel"] == true && e["args"]["id"] == id_text.as_str()),
            "{audit}"
        );
        assert!(
            entries.iter().any(|e| e["via"] == "api" && e["result"] == "refused" && e["args"]["id"] == "999999"),
            "{audit}"
        );

        // Cancelled from the dashboard: its form, signed in, with the
        // page's CSRF token.
        std::fs::write(&hang, "").expect("hang");
        let cli = start_backfill(&config, "slow", &minute(10), &minute(13));
        wait_until("its first instant", Duration::from_secs(30), || lines(&out).contains(&format!("slow {}", minute(10))));
        let cookie = crate::web::sign_in(port);
        let (_, _, page) = http(port, "GET", "/jobs/slow", &[("Cookie", &cookie)], "");
        assert!(page.contains("/jobs/slow/cancel-backfill"), "{page}");
        let csrf = page
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("csrf")
            .to_string();
        let form = ("Content-Type", "application/x-www-form-urlencoded");
        let (code, _, _) = http(port, "POST", "/jobs/slow/cancel-backfill", &[("Cookie", &cookie), form], "csrf=wrong");
        assert_eq!(code, 403, "a form without the page's CSRF token");
        let (code, _, said) = http(port, "POST", "/jobs/slow/cancel-backfill", &[("Cookie", &cookie), form], &format!("csrf={csrf}"));
        assert!(code == 303 || code == 200, "{code} {said}");
        std::fs::remove_file(&hang).expect("no hang");
        let ended = cli.wait_with_output().expect("ends");
        assert_eq!(ended.status.code(), Some(1), "{ended:?}");
        assert!(!lines(&out).contains(&format!("slow {}", minute(11))), "an instant after the cancel started");
        let (_, audit) = get_json(port, "/api/v1/audit?action=backfill");
        assert!(
            audit["entries"].as_array().is_some_and(|e| e.iter().any(|e| e["via"] == "dashboard" && e["result"] == "done" && e["args"]["cancel"] == true)),
            "{audit}"
        );
        drop(replica);
    }
}
