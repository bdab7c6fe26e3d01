//! The lease contract, on every backend: what ShedLock's provider tests
//! check, plus the `last_scheduled_at` rule and the fence.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use crate::db::schema::replicron_locks;
use crate::history::RunStatus;
use crate::lease::{
    self, Claim, Committed, Lease, Nonce, claim, ensure_rows, extend, find_lock, force_unlock,
    release,
};
use crate::testing::{TestDb, backend_test};
use chrono::{DateTime, TimeDelta, Utc};
use diesel::prelude::*;

const LONG: Duration = Duration::from_secs(60);

/// An instant the database's clock has passed: a claim may not be for an
/// instant that is still to come.
fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc)
        + TimeDelta::seconds(seconds)
}

backend_test! {
    fn a_claim_wins_once_and_an_instant_is_never_claimed_twice(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        assert_eq!(ensure_rows(&mut conn, &["job"]).expect("rows"), 1);
        assert_eq!(ensure_rows(&mut conn, &["job"]).expect("rows"), 0);

        let lease = claim(&mut conn, "job", "a", t(0), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert_eq!(lease.fence, 1);
        // The same instant, while held: not by anyone.
        assert_eq!(
            claim(&mut conn, "job", "b", t(0), LONG)
                .expect("claim")
                .won(),
            None
        );
        assert_eq!(
            claim(&mut conn, "job", "a", t(0), LONG)
                .expect("claim")
                .won(),
            None
        );
        // A later instant while held: no (no overlap).
        assert_eq!(
            claim(&mut conn, "job", "b", t(1), LONG)
                .expect("claim")
                .won(),
            None
        );
        assert!(release(&mut conn, &lease, Duration::ZERO).expect("release"));
        // The same instant after release: still never.
        assert_eq!(
            claim(&mut conn, "job", "b", t(0), LONG)
                .expect("claim")
                .won(),
            None
        );
        // A later one: yes, with the next fence.
        let later = claim(&mut conn, "job", "b", t(1), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert_eq!(later.fence, 2);
        assert!(release(&mut conn, &later, Duration::ZERO).expect("release"));
        // An earlier one than the last claimed: never.
        assert_eq!(
            claim(&mut conn, "job", "c", t(0), LONG)
                .expect("claim")
                .won(),
            None
        );
        assert_eq!(
            claim(&mut conn, "job", "c", t(-60), LONG)
                .expect("claim")
                .won(),
            None
        );
        let row = find_lock(&mut conn, "job").expect("find").expect("row");
        assert_eq!(row.fence, 2);
        assert_eq!(row.locked_by.as_deref(), Some("b"));
        assert_eq!(row.last_scheduled_at, Some(t(1).naive_utc()));
    }
}

backend_test! {
    fn a_lost_claim_says_whether_the_instant_is_taken_or_only_waiting(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let lease = claim(&mut conn, "job", "a", t(5), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert_eq!(
            claim(&mut conn, "job", "b", t(5), LONG).expect("claim"),
            Claim::Taken
        );
        assert_eq!(
            claim(&mut conn, "job", "b", t(4), LONG).expect("claim"),
            Claim::Taken
        );
        assert!(
            matches!(
                claim(&mut conn, "job", "b", t(6), LONG).expect("claim"),
                Claim::Held(holder)
                    if holder.claimed_at.is_some_and(|since| since > t(6))
                        && holder.fence == lease.fence
                        && holder.instant == Some(t(5))
            ),
            "held by the run claimed just now"
        );
        release(&mut conn, &lease, Duration::ZERO).expect("release");
        assert!(matches!(
            claim(&mut conn, "job", "b", t(6), LONG).expect("claim"),
            Claim::Won(_)
        ));
    }
}

backend_test! {
    fn a_batch_claim_decides_each_row_as_a_single_claim_would(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["free", "taken", "held"]).expect("rows");
        // "taken" already ran a later instant; "held" is running an earlier one.
        let later = claim(&mut conn, "taken", "other", t(9), LONG)
            .expect("claim")
            .won()
            .expect("won");
        release(&mut conn, &later, Duration::ZERO).expect("release");
        claim(&mut conn, "held", "other", t(1), LONG)
            .expect("claim")
            .won()
            .expect("won");
        let jobs = [
            ("free", LONG),
            ("taken", LONG),
            ("held", LONG),
            ("new", Duration::from_secs(5)),
        ];
        let nonce = lease::Nonce::new();
        let claims = lease::claim_many(&mut conn, &jobs, "me", t(5), nonce).expect("batch");
        assert!(
            matches!(&claims[0], Claim::Won(l) if l.job == "free" && l.fence == 1),
            "{claims:?}"
        );
        assert_eq!(claims[1], Claim::Taken);
        assert!(matches!(claims[2], Claim::Held(_)), "{claims:?}");
        // A job without a row gets one and is claimed.
        assert!(
            matches!(&claims[3], Claim::Won(l) if l.job == "new" && l.fence == 1),
            "{claims:?}"
        );
        // The runs it won start in one statement, each under its lease's
        // fence; a lease this statement did not win ("held", whatever it
        // names) starts nothing.
        let not_won = Lease {
            job: "held".into(),
            instant: t(5),
            instance: "me".into(),
            fence: 1,
            nonce: nonce.0,
        };
        let won: Vec<&Lease> = claims
            .iter()
            .filter_map(|c| match c {
                Claim::Won(lease) => Some(lease),
                _ => None,
            })
            .chain([&not_won])
            .collect();
        let started =
            crate::lease::runs::record_leased_runs_started(&mut conn, &won, nonce, 1)
                .expect("start");
        let mut names: Vec<&str> = started.iter().map(|(job, _)| job.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            ["free", "new"],
            "only the leases held by me at that instant"
        );
        // Running rows behind the current fence are abandoned, in one statement.
        let old = crate::history::record_run_started(
            &mut conn,
            &crate::history::NewRun {
                job: "free".into(),
                scheduled_at: t(0),
                attempt: 1,
                instance: "gone".into(),
                fence: 0,
                once_key: None,
                scope: String::new(),
                lease_row: None,
                trigger: Default::default(),
                params: None,
            },
        )
        .expect("old run");
        assert_eq!(
            crate::lease::runs::mark_abandoned_behind_leases(&mut conn, &["free", "new"])
                .expect("abandon")
                .len(),
            1
        );
        let rows = crate::history::list_runs(
            &mut conn,
            &crate::history::RunFilter {
                job: Some("free".into()),
                limit: 10,
                ..Default::default()
            },
        )
        .expect("list");
        let status = |id: i64| {
            rows.iter()
                .find(|r| r.id == id)
                .map(|r| r.status)
                .expect("row")
        };
        assert_eq!(status(old), RunStatus::Abandoned);
        assert_eq!(
            status(started.iter().find(|(j, _)| j == "free").expect("free").1),
            RunStatus::Running
        );
    }
}

backend_test! {
    fn only_the_holder_with_the_right_fence_releases(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        let lease = claim(&mut conn, "job", "a", t(0), LONG)
            .expect("claim")
            .won()
            .expect("won");
        let mut stranger = lease.clone();
        stranger.instance = "b".into();
        assert!(!release(&mut conn, &stranger, Duration::ZERO).expect("release"));
        let mut stale = lease.clone();
        stale.fence -= 1;
        assert!(!release(&mut conn, &stale, Duration::ZERO).expect("release"));
        // Still held: the next instant cannot be claimed.
        assert_eq!(
            claim(&mut conn, "job", "b", t(1), LONG)
                .expect("claim")
                .won(),
            None
        );
        assert!(release(&mut conn, &lease, Duration::ZERO).expect("release"));
        assert!(
            claim(&mut conn, "job", "b", t(1), LONG)
                .expect("claim")
                .won()
                .is_some()
        );
    }
}

backend_test! {
    fn lock_at_least_for_keeps_the_lease_after_release(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        let lease = claim(&mut conn, "job", "a", t(0), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert!(release(&mut conn, &lease, Duration::from_millis(800)).expect("release"));
        assert!(lease::is_held(&mut conn, "job").expect("held"));
        assert_eq!(
            claim(&mut conn, "job", "b", t(1), LONG)
                .expect("claim")
                .won(),
            None
        );
        thread::sleep(Duration::from_millis(1000));
        assert!(!lease::is_held(&mut conn, "job").expect("held"));
        assert!(
            claim(&mut conn, "job", "b", t(1), LONG)
                .expect("claim")
                .won()
                .is_some()
        );
    }
}

backend_test! {
    fn an_expired_lease_moves_on_and_the_old_holder_changes_nothing(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        let short = Duration::from_millis(500);
        let old = claim(&mut conn, "job", "a", t(0), short)
            .expect("claim")
            .won()
            .expect("won");
        assert!(extend(&mut conn, &old, short).expect("extend"));
        assert_eq!(
            claim(&mut conn, "job", "b", t(1), short)
                .expect("claim")
                .won(),
            None
        );
        thread::sleep(Duration::from_millis(700));
        // Expired and not yet claimed: the holder cannot extend it any more.
        assert!(!extend(&mut conn, &old, short).expect("extend"));
        let new = claim(&mut conn, "job", "b", t(1), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert_eq!(new.fence, old.fence + 1);
        assert!(!extend(&mut conn, &old, LONG).expect("extend"));
        assert!(!release(&mut conn, &old, Duration::ZERO).expect("release"));
        let row = find_lock(&mut conn, "job").expect("find").expect("row");
        assert_eq!(row.locked_by.as_deref(), Some("b"));
        assert!(lease::is_held(&mut conn, "job").expect("held"));
        assert!(extend(&mut conn, &new, LONG).expect("extend"));
    }
}

backend_test! {
    fn a_deleted_row_is_recreated_by_the_next_claim(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job"]).expect("rows");
        diesel::delete(replicron_locks::table)
            .execute(&mut **conn)
            .expect("delete");
        let lease = claim(&mut conn, "job", "a", t(0), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert_eq!(lease.fence, 1);
        // The same for a job never seen before.
        assert!(
            claim(&mut conn, "new-job", "a", t(0), LONG)
                .expect("claim")
                .won()
                .is_some()
        );
    }
}

backend_test! {
    fn force_unlock_ends_the_lease_but_keeps_the_instant(db: &TestDb) {
        let pool = db.pool(2);
        let mut conn = pool.get().expect("conn");
        claim(&mut conn, "job", "a", t(0), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert!(force_unlock(&mut conn, "job").expect("unlock"));
        assert!(!lease::is_held(&mut conn, "job").expect("held"));
        assert_eq!(
            claim(&mut conn, "job", "b", t(0), LONG)
                .expect("claim")
                .won(),
            None
        );
        assert!(
            claim(&mut conn, "job", "b", t(1), LONG)
                .expect("claim")
                .won()
                .is_some()
        );
        assert!(!force_unlock(&mut conn, "missing").expect("unlock"));
    }
}

backend_test! {
    fn database_time_is_used_not_the_callers(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let before = Utc::now() - TimeDelta::seconds(2);
        let now = crate::db::clock::database_now(&mut conn).expect("now");
        assert!(
            now > before && now < Utc::now() + TimeDelta::seconds(2),
            "{now}"
        );
        // An instant long past is only an identity: the lease still ends at
        // database time + lock_at_most_for.
        let past = t(-20 * 86_400 * 365);
        let lease = claim(&mut conn, "job", "a", past, Duration::from_millis(300))
            .expect("claim")
            .won()
            .expect("won");
        let row = find_lock(&mut conn, "job").expect("find").expect("row");
        assert_eq!(row.last_scheduled_at, Some(past.naive_utc()));
        thread::sleep(Duration::from_millis(500));
        assert!(!extend(&mut conn, &lease, LONG).expect("extend"));
        // An instant the database's clock has not reached is refused, and
        // the refusal says how long to wait. Instants after 2038 compare
        // right (a TIMESTAMP bind would turn them to NULL on MySQL).
        let far = t(400 * 86_400 * 365);
        match claim(&mut conn, "job", "a", far, LONG).expect("claim") {
            Claim::NotYet { wait } => {
                let years = wait.as_secs() / (86_400 * 365);
                assert!((398..=401).contains(&years), "{wait:?}");
            }
            other => panic!("a future instant was not refused: {other:?}"),
        }
        let soon = crate::db::clock::database_now(&mut conn).expect("now") + TimeDelta::milliseconds(400);
        let Claim::NotYet { wait } = claim(&mut conn, "job", "a", soon, LONG).expect("claim")
        else {
            panic!("an instant 400 ms ahead was not refused");
        };
        assert!(wait <= Duration::from_millis(400), "{wait:?}");
        thread::sleep(wait + Duration::from_millis(2));
        assert!(
            claim(&mut conn, "job", "a", soon, LONG)
                .expect("claim")
                .won()
                .is_some(),
            "claimed once the database's clock reached it"
        );
    }
}

backend_test! {
    /// 8 threads, each with its own connection, race for 300 consecutive
    /// instants: exactly one winner each, and a counter that is read, held for
    /// a moment, and written back under the lease loses no increment.
    fn eight_threads_race_for_300_instants(db: &TestDb) {
        const THREADS: usize = 8;
        const INSTANTS: usize = 300;
        let pool = db.pool(THREADS as u32);
        ensure_rows(&mut pool.get().expect("conn"), &["race"]).expect("rows");
        let barrier = Arc::new(Barrier::new(THREADS));
        let winners: Arc<Vec<AtomicU32>> =
            Arc::new((0..INSTANTS).map(|_| AtomicU32::new(0)).collect());
        let counter = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let url = db.database_url();
                let (barrier, winners, counter) =
                    (barrier.clone(), winners.clone(), counter.clone());
                thread::spawn(move || {
                    let mut conn = crate::db::establish(&url).expect("connect");
                    let me = format!("thread-{i}");
                    let mut won = 0;
                    for n in 0..INSTANTS {
                        barrier.wait();
                        if let Some(lease) = claim(&mut conn, "race", &me, t(n as i64), LONG)
                            .expect("claim")
                            .won()
                        {
                            winners[n].fetch_add(1, Ordering::SeqCst);
                            // Not atomic: a second holder would lose an increment.
                            let value = counter.load(Ordering::SeqCst);
                            thread::sleep(Duration::from_micros(200));
                            counter.store(value + 1, Ordering::SeqCst);
                            assert!(release(&mut conn, &lease, Duration::ZERO).expect("release"));
                            won += 1;
                        }
                        barrier.wait();
                    }
                    won
                })
            })
            .collect();
        let per_thread: Vec<u32> = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        for (n, w) in winners.iter().enumerate() {
            assert_eq!(w.load(Ordering::SeqCst), 1, "instant {n}");
        }
        assert_eq!(counter.load(Ordering::SeqCst), INSTANTS as u64);
        assert_eq!(per_thread.iter().sum::<u32>(), INSTANTS as u32);
        let row = find_lock(&mut pool.get().expect("conn"), "race")
            .expect("find")
            .expect("row");
        assert_eq!(row.fence, INSTANTS as i64);
        eprintln!("wins per thread: {per_thread:?}");
    }
}

backend_test! {
    /// A pause covers the instants from its start to its end: those are
    /// never claimed, not even after the resume. An instant due before the
    /// pause whose claim comes late is still claimed (the check for missed
    /// instants would count it missed otherwise).
    fn a_paused_job_is_not_claimed_and_its_instants_stay_unrun_after_resume(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job", "other"]).expect("rows");
        let due = crate::db::clock::database_now(&mut conn).expect("now") - TimeDelta::seconds(2);
        assert!(lease::pause(&mut conn, "job", None, "ops@host", Some("migration")).expect("pause"));
        std::thread::sleep(Duration::from_millis(20));
        let during = crate::db::clock::database_now(&mut conn).expect("now");
        let paused = Claim::Paused {
            by: Some("ops@host".to_string()),
            reason: Some("migration".to_string()),
        };
        assert_eq!(claim(&mut conn, "job", "a", during, LONG).expect("claim"), paused);
        // A batch heeds it too; the other job is not paused.
        let claims = lease::claim_many(
            &mut conn,
            &[("job", LONG), ("other", LONG)],
            "a",
            during,
            lease::Nonce::new(),
        )
        .expect("batch");
        assert_eq!(claims[0], paused);
        assert!(matches!(&claims[1], Claim::Won(l) if l.job == "other"), "{claims:?}");
        // The instant due before the pause is not the pause's.
        let lease = claim(&mut conn, "job", "a", due, LONG)
            .expect("claim")
            .won()
            .expect("an instant due before the pause is claimed");
        assert!(release(&mut conn, &lease, Duration::ZERO).expect("release"));
        assert_eq!(claim(&mut conn, "job", "a", during, LONG).expect("claim"), paused);
        let row = find_lock(&mut conn, "job").expect("read").expect("row");
        let now = crate::db::clock::database_now(&mut conn).expect("now").naive_utc();
        assert_eq!(row.paused_at_time(now), Some(None), "{row:?}");
        assert_eq!(row.paused_by.as_deref(), Some("ops@host"));

        std::thread::sleep(Duration::from_millis(20));
        assert!(lease::resume(&mut conn, "job").expect("resume"));
        assert!(!lease::resume(&mut conn, "job").expect("resume"), "resumed twice");
        let row = find_lock(&mut conn, "job").expect("read").expect("row");
        let now = crate::db::clock::database_now(&mut conn).expect("now");
        assert_eq!(row.paused_at_time(now.naive_utc()), None, "{row:?}");
        // An instant of the pause is never claimed; one after it is.
        assert_eq!(claim(&mut conn, "job", "a", during, LONG).expect("claim"), paused);
        let lease = claim(&mut conn, "job", "a", now, LONG)
            .expect("claim")
            .won()
            .expect("an instant after the resume is claimed");
        assert!(release(&mut conn, &lease, Duration::ZERO).expect("release"));

        // A pause with an end: instants from its end on are claimed again.
        let until = now + TimeDelta::milliseconds(300);
        assert!(lease::pause(&mut conn, "job", Some(until), "ops@host", None).expect("pause"));
        let row = find_lock(&mut conn, "job").expect("read").expect("row");
        assert_eq!(
            row.paused_at_time(now.naive_utc()),
            Some(Some(crate::db::clock::to_db_time(until).0.and_utc()))
        );
        assert!(matches!(
            claim(&mut conn, "job", "a", now + TimeDelta::milliseconds(100), LONG).expect("claim"),
            Claim::Paused { .. } | Claim::NotYet { .. }
        ));
        // An operator's claim (trigger --force, exec) ignores the pause.
        let forced = lease::claim_at_database_now(&mut conn, "job", "b", LONG)
            .expect("claim")
            .won()
            .expect("a claim at the database's now is not paused");
        assert!(release(&mut conn, &forced, Duration::ZERO).expect("release"));
        std::thread::sleep(Duration::from_millis(400));
        let later = crate::db::clock::database_now(&mut conn).expect("now");
        assert!(claim(&mut conn, "job", "a", later, LONG).expect("claim").won().is_some());
    }
}

backend_test! {
    /// A claim is won by its own change only. A row that names this
    /// instance and the instant because an earlier claim of this instance
    /// (a process started again under the same id, or a claim asked twice)
    /// won it is no win, in a batch or alone.
    fn a_claim_is_won_by_its_own_change_only(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job", "other"]).expect("rows");
        let first = claim(&mut conn, "job", "me", t(5), LONG)
            .expect("claim")
            .won()
            .expect("won");
        // The same instance asks again (its predecessor's win shows it and
        // the instant): taken, never won a second time.
        let again = lease::claim_many(
            &mut conn,
            &[("job", LONG), ("other", LONG)],
            "me",
            t(5),
            Nonce::new(),
        )
        .expect("batch");
        assert_eq!(again[0], Claim::Taken, "{again:?}");
        assert!(matches!(&again[1], Claim::Won(l) if l.job == "other"), "{again:?}");
        assert_eq!(
            claim(&mut conn, "job", "me", t(5), LONG).expect("claim"),
            Claim::Taken
        );
        // Its start is recorded under its own fence; a start record under a
        // fence the row no longer holds writes nothing.
        let run = |fence: i64| crate::history::NewRun {
            job: "job".into(),
            scheduled_at: t(5),
            attempt: 1,
            instance: "me".into(),
            fence,
            once_key: None,
            scope: String::new(),
            lease_row: Some("job".into()),
            trigger: Default::default(),
            params: None,
        };
        let id = crate::history::record_run_started(&mut conn, &run(first.fence)).expect("start");
        assert!(
            crate::history::record_run_started(&mut conn, &run(first.fence + 7)).is_err(),
            "a start under a fence the row does not hold is not recorded"
        );
        release(&mut conn, &first, Duration::ZERO).expect("release");
        let later = claim(&mut conn, "job", "else", t(6), LONG)
            .expect("claim")
            .won()
            .expect("won");
        let mut retry = run(first.fence);
        retry.attempt = 2;
        assert!(
            crate::history::record_run_started(&mut conn, &retry).is_err(),
            "a retry whose lease was claimed away is not recorded"
        );
        assert!(later.fence > first.fence);
        assert!(id > 0);
    }
}

backend_test! {
    /// A claim whose answer was lost: its row tells whether it committed,
    /// and a committed one's lease is taken up again, even after it ran
    /// out, as long as nobody claimed the job since.
    fn an_unanswered_claim_is_learnt_from_its_row(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job"]).expect("rows");
        let lost = Nonce::new();
        // Not committed: nothing names it.
        assert_eq!(
            lease::take_up_unanswered(&mut conn, "job", "me", t(5), lost, LONG).expect("ask"),
            Committed::No
        );
        // Committed with a short lease that then ran out.
        let committed = lease::claim_with(
            &mut conn,
            "job",
            "me",
            t(5),
            Duration::from_millis(50),
            lease::Pauses::Heeded,
            lost,
        )
        .expect("claim")
        .won()
        .expect("won");
        std::thread::sleep(Duration::from_millis(120));
        let Committed::Held(taken) =
            lease::take_up_unanswered(&mut conn, "job", "me", t(5), lost, LONG).expect("ask")
        else {
            panic!("a committed claim nobody followed is this replica's");
        };
        assert_eq!(taken.fence, committed.fence);
        // Taken up for a whole lease: nobody else may claim meanwhile.
        assert!(matches!(
            claim(&mut conn, "job", "else", t(6), LONG).expect("claim"),
            Claim::Held(_)
        ));
        assert!(extend(&mut conn, &taken, LONG).expect("extend"));
        release(&mut conn, &taken, Duration::ZERO).expect("release");
        // Once another claim followed, the instant is gone.
        claim(&mut conn, "job", "else", t(6), LONG)
            .expect("claim")
            .won()
            .expect("won");
        assert_eq!(
            lease::take_up_unanswered(&mut conn, "job", "me", t(5), lost, LONG).expect("ask"),
            Committed::Taken
        );
    }
}

backend_test! {
    /// Every pause is kept whole: changing a pause's reason or end keeps
    /// its start, and a pause replaced by another (resumed and paused
    /// again) still covers its own instants.
    fn pauses_are_kept_whole(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job"]).expect("rows");
        let start = crate::db::clock::database_now(&mut conn).expect("now");
        assert!(lease::pause(&mut conn, "job", None, "a@h", Some("first")).expect("pause"));
        let since = find_lock(&mut conn, "job").expect("read").expect("row").paused_at;
        std::thread::sleep(Duration::from_millis(30));
        assert!(lease::pause(&mut conn, "job", None, "b@h", Some("new reason")).expect("pause"));
        let row = find_lock(&mut conn, "job").expect("read").expect("row");
        assert_eq!(row.paused_at, since, "re-pausing keeps the pause's start");
        assert_eq!(row.paused_reason.as_deref(), Some("new reason"));
        std::thread::sleep(Duration::from_millis(30));
        assert!(lease::resume(&mut conn, "job").expect("resume"));
        let resumed = find_lock(&mut conn, "job")
            .expect("read")
            .expect("row")
            .paused_until
            .expect("until");
        std::thread::sleep(Duration::from_millis(30));
        assert!(lease::pause(&mut conn, "job", None, "c@h", None).expect("pause"));
        let now = crate::db::clock::database_now(&mut conn).expect("now");
        let pauses = lease::pauses_between(&mut conn, "job", start, now).expect("pauses");
        assert_eq!(pauses.len(), 2, "{pauses:?}");
        assert!(pauses.contains(&(since.expect("since"), resumed)), "{pauses:?}");
        // An instant of the first pause is still covered after the second.
        let during_first = since.expect("since") + TimeDelta::milliseconds(10);
        assert!(
            pauses
                .iter()
                .any(|(at, until)| lease::pause_covers(Some(*at), Some(*until), during_first))
        );
    }
}

backend_test! {
    /// A start record that reaches the database after its lease ran out (it
    /// waited in a stalled server) records nothing, even though nobody has
    /// claimed the row since: it would stand for a run beside the next
    /// holder's.
    fn no_start_is_recorded_once_the_lease_has_run_out(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["job"]).expect("rows");
        let nonce = lease::Nonce::new();
        let claims = lease::claim_many(&mut conn, &[("job", LONG)], "me", t(0), nonce).expect("claim");
        let Claim::Won(won) = &claims[0] else {
            panic!("{claims:?}");
        };
        // The lease runs out while the record is on its way.
        diesel::update(replicron_locks::table)
            .filter(replicron_locks::name.eq("job"))
            .set(replicron_locks::lock_until.eq(crate::db::clock::At::epoch()))
            .execute(&mut **conn)
            .expect("expire");
        let started = crate::lease::runs::record_leased_runs_started(&mut conn, &[won], nonce, 1)
            .expect("start");
        assert!(started.is_empty(), "{started:?}");
        let single = crate::history::record_run_started(
            &mut conn,
            &crate::history::NewRun {
                job: "job".into(),
                scheduled_at: t(0),
                attempt: 1,
                instance: "me".into(),
                fence: won.fence,
                once_key: None,
                scope: String::new(),
                lease_row: Some("job".into()),
                trigger: Default::default(),
                params: None,
            },
        );
        assert!(matches!(single, Err(diesel::result::Error::NotFound)), "{single:?}");
        let rows: i64 = crate::db::schema::replicron_runs::table
            .count()
            .get_result(&mut **conn)
            .expect("count");
        assert_eq!(rows, 0);
    }
}

backend_test! {
    fn several_leases_released_in_one_statement_each_checked_against_its_own_fence(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        ensure_rows(&mut conn, &["a", "b", "c", "d"]).expect("rows");
        let won = |conn: &mut crate::db::DbConnection, job: &str, by: &str, at: i64| {
            let claimed = claim(conn, job, by, t(at), LONG).expect("claim");
            claimed.clone().won().unwrap_or_else(|| panic!("{job} by {by} at {at}: {claimed:?}"))
        };
        let a = won(&mut conn, "a", "me", 0);
        let b = won(&mut conn, "b", "me", 0);
        let c = won(&mut conn, "c", "me", 0);
        let d = won(&mut conn, "d", "me", 0);
        // c's lease was taken over since: its row has another fence and holder.
        force_unlock(&mut conn, "c").expect("unlock");
        let theirs = won(&mut conn, "c", "other", 1);
        // d's stale copy names a fence the row no longer has.
        let stale_d = Lease { fence: d.fence - 1, ..d.clone() };
        let ours = lease::release_many(&mut conn, &[&a, &b, &c, &stale_d], Duration::ZERO)
            .expect("release");
        assert_eq!(ours, vec![true, true, false, false]);
        // a and b are free for their next instant; c stays the other's, d ours.
        let next_a = won(&mut conn, "a", "x", 1);
        let next_b = won(&mut conn, "b", "x", 1);
        assert!(next_a.fence > a.fence && next_b.fence > b.fence);
        assert_eq!(lease::release_many(&mut conn, &[&next_a, &next_b], Duration::ZERO).expect("release"), vec![true, true]);
        assert_eq!(claim(&mut conn, "c", "x", t(2), LONG).expect("claim").won(), None);
        assert_eq!(claim(&mut conn, "d", "x", t(1), LONG).expect("claim").won(), None);
        assert!(release(&mut conn, &theirs, Duration::ZERO).expect("release"));
        assert!(release(&mut conn, &d, Duration::ZERO).expect("release"));
        // Held on for lock_at_least_for, as a single release is.
        let a2 = won(&mut conn, "a", "me", 2);
        let b2 = won(&mut conn, "b", "me", 2);
        assert_eq!(lease::release_many(&mut conn, &[&a2, &b2], LONG).expect("release"), vec![true, true]);
        assert_eq!(claim(&mut conn, "a", "x", t(3), LONG).expect("claim").won(), None);
        assert_eq!(lease::release_many(&mut conn, &[], LONG).expect("none"), Vec::<bool>::new());
    }
}

backend_test! {
    /// An `overlap = "allow"` job's runs hold their instants' own rows. A
    /// run is marked `abandoned` once its instant's lease has ended, never
    /// while it is held, and a run held on the job's own row (a trigger's)
    /// is left to the job's next claimant; the holder's end, recorded
    /// later (it was cut off, not dead), replaces the mark. Retention
    /// deletes the instants' rows whose leases ended long enough ago, and
    /// no other row.
    fn an_allow_runs_instant_row_decides_when_it_is_abandoned(db: &TestDb) {
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let (first, second) = (lease::instant_row("al", t(0)), lease::instant_row("al", t(2)));
        ensure_rows(&mut conn, &["al", &first, &second]).expect("rows");
        let start = |conn: &mut crate::db::DbConnection, row: &str, instant, fence| {
            crate::history::record_run_started(
                conn,
                &crate::history::NewRun {
                    job: "al".into(),
                    scheduled_at: instant,
                    attempt: 1,
                    instance: "gone".into(),
                    fence,
                    once_key: None,
                    scope: String::new(),
                    lease_row: Some(row.to_string()),
                    trigger: Default::default(),
                    params: None,
                },
            )
            .expect("start")
        };
        let won = |conn: &mut crate::db::DbConnection, row: &str, instant| {
            claim(conn, row, "gone", instant, LONG)
                .expect("claim")
                .won()
                .expect("won")
        };
        let held = won(&mut conn, &first, t(0));
        let one = start(&mut conn, &first, t(0), held.fence);
        let other = won(&mut conn, &second, t(2));
        let two = start(&mut conn, &second, t(2), other.fence);
        let triggered = won(&mut conn, "al", t(1));
        let three = start(&mut conn, "al", t(1), triggered.fence);
        let sweep = |conn: &mut crate::db::DbConnection| {
            crate::lease::runs::mark_abandoned_behind_instants(conn, "al")
                .expect("sweep")
                .into_iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(sweep(&mut conn), Vec::<i64>::new(), "every lease is held");
        force_unlock(&mut conn, &first).expect("unlock");
        force_unlock(&mut conn, "al").expect("unlock");
        assert_eq!(sweep(&mut conn), vec![one]);
        assert_eq!(sweep(&mut conn), Vec::<i64>::new(), "marked once");
        let status = |conn: &mut crate::db::DbConnection, id| {
            crate::history::find_run(conn, id)
                .expect("read")
                .expect("row")
                .status
        };
        assert_eq!(status(&mut conn, two), RunStatus::Running);
        assert_eq!(status(&mut conn, three), RunStatus::Running);
        let finish = crate::history::RunFinish {
            status: RunStatus::LostLock,
            exit_code: None,
            output: String::new(),
            duration: Duration::from_secs(1),
            output_file: None,
        };
        crate::history::record_run_finished(&mut conn, one, &finish, true).expect("end");
        assert_eq!(status(&mut conn, one), RunStatus::LostLock);

        // Retention: the ended instant row once its lease is old enough.
        let aged = |conn: &mut crate::db::DbConnection, name: &str| {
            diesel::update(replicron_locks::table.filter(replicron_locks::name.eq(name)))
                .set(replicron_locks::lock_until.eq(crate::db::clock::to_db_time(t(0)).0))
                .execute(conn)
                .expect("age");
        };
        aged(&mut conn, &first);
        aged(&mut conn, "al");
        assert_eq!(
            lease::prune_instant_rows(&mut conn, Duration::from_secs(3600)).expect("prune"),
            1
        );
        let names: Vec<String> = replicron_locks::table
            .select(replicron_locks::name)
            .order(replicron_locks::name)
            .load::<String>(&mut **conn)
            .expect("names");
        assert_eq!(names, vec!["al".to_string(), second.clone()]);
    }
}

/// The names of the waiters' rows sort in the line's order: the runs that
/// are not a backfill's first, then the higher priority, then the older
/// instant.
#[test]
fn a_waiters_row_names_its_place_in_line() {
    use crate::lease::queue::{Place, waiter_row};
    let place = |behind, priority, seconds| Place {
        behind,
        priority,
        instant: t(seconds),
    };
    let rows: Vec<String> = [
        place(false, 10, 50),
        place(false, 10, 60),
        place(false, 0, 5),
        place(false, -1000, 0),
        place(true, 1000, 0),
        place(true, 0, 1),
    ]
    .into_iter()
    .map(|p| waiter_row("replicron.limit.vendor.1", "some-job-with-a-long-name", p))
    .collect();
    let mut sorted = rows.clone();
    sorted.sort();
    assert_eq!(rows, sorted);
    assert!(rows.iter().all(|row| row.len() <= 64), "{rows:?}");
}

backend_test! {
    /// A waiter tries for a gate's slot only while fewer live waiters are
    /// ahead of it in the gate's line than slots are free; a place whose
    /// lease ended (its replica died) keeps nobody waiting, and a place
    /// left is gone.
    fn a_waiter_tries_for_a_slot_in_its_turn(db: &TestDb) {
        use crate::lease::queue::{Place, leave_line, line_prefix, may_try, wait_in_line, waiter_row};
        let pool = db.pool(1);
        let mut conn = pool.get().expect("conn");
        let slots = vec!["replicron.limit.v.1".to_string(), "replicron.limit.v.2".to_string()];
        let prefix = line_prefix(&slots[0]);
        let row = |job: &str, seconds| {
            waiter_row(&slots[0], job, Place { behind: false, priority: 0, instant: t(seconds) })
        };
        let (first, second, third) = (row("a", 1), row("b", 2), row("c", 3));
        // Nobody waits: anyone may try.
        assert!(may_try(&mut conn, &prefix, &third, &slots).expect("line"));
        wait_in_line(&mut conn, &first, "r1", t(1)).expect("join");
        wait_in_line(&mut conn, &second, "r2", t(2)).expect("join");
        // Two slots free: the first two waiters may try, the third not.
        assert!(may_try(&mut conn, &prefix, &first, &slots).expect("line"));
        assert!(may_try(&mut conn, &prefix, &second, &slots).expect("line"));
        assert!(!may_try(&mut conn, &prefix, &third, &slots).expect("line"));
        // One slot taken: only the first.
        claim(&mut conn, &slots[0], "x", t(0), LONG).expect("claim").won().expect("won");
        assert!(may_try(&mut conn, &prefix, &first, &slots).expect("line"));
        assert!(!may_try(&mut conn, &prefix, &second, &slots).expect("line"));
        // The first leaves the line: the second's turn.
        leave_line(&mut conn, &first).expect("leave");
        assert!(may_try(&mut conn, &prefix, &second, &slots).expect("line"));
        assert!(!may_try(&mut conn, &prefix, &third, &slots).expect("line"));
        // The second's replica dies: once its place has run out, the third's turn.
        force_unlock(&mut conn, &second).expect("end");
        assert!(may_try(&mut conn, &prefix, &third, &slots).expect("line"));
        // Another gate's line is another line.
        let elsewhere = waiter_row("replicron.lock.other", "z", Place { behind: false, priority: 0, instant: t(0) });
        wait_in_line(&mut conn, &elsewhere, "r3", t(0)).expect("join");
        assert!(may_try(&mut conn, &prefix, &third, &slots).expect("line"));
        // Pruning leaves the live places.
        crate::lease::queue::prune_waiter_rows(&mut conn, Duration::ZERO).expect("prune");
        assert!(find_lock(&mut conn, &elsewhere).expect("read").is_some());
    }
}
