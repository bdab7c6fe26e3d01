//! Claims of the jobs due at one instant, batched: every job loop of a
//! replica that wakes at the same instant hands its claim to this one task,
//! which claims them all with one conditional UPDATE (per lease length) and
//! one read, records the starts of the runs it won with one INSERT … SELECT
//! and one read, answers the job loops (their runs start), and only then
//! marks their vanished predecessors abandoned with one more read: a
//! handful of statements per replica per instant instead of several per
//! job, and no more on the way to a run's start than claiming and recording
//! it. Each row is claimed under exactly the conditions of a single claim;
//! only the round trips are shared.
//!
//! A burst is shared by the fleet: of the live replicas that define a job
//! alike (the registry's rows, as of this replica's last heartbeat), a
//! rendezvous hash of (job, instant) names the first claimant, which
//! claims at once; the others claim only [`STEAL_AFTER`] past the instant,
//! as stealers, and find it taken unless that replica is down, slow or
//! cut off. The claim itself is the same statement either way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::job::Job;
use crate::db::{DbError, Store};
use crate::history::OnAbandoned;
use crate::lease::{self, Claim, Lease, Nonce};
use crate::registry::Instance;
use crate::schedule::Clock;

/// How long past an instant a replica waits before it claims a job whose
/// first claimant is another live replica: the longest a share of a burst
/// waits for a replica that is down, slow or cut off from the database.
pub(crate) const STEAL_AFTER: Duration = Duration::from_millis(500);

/// How long no claim must have come before a batch is closed.
const GATHER_QUIET: Duration = Duration::from_micros(150);
/// How long a batch may gather at most.
const GATHER_AT_MOST: Duration = Duration::from_millis(1);

/// What a claim through the batcher came to.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// Won.
    Won {
        /// The lease.
        lease: Lease,
        /// The run's history row, if its start could be recorded in the
        /// batch (attempt 1).
        run: Option<i64>,
        /// When the claim statement was sent, on the monotonic clock: the
        /// lease is counted from here (the database counts it from when the
        /// statement began, which is no earlier), never from the answer.
        sent: Instant,
    },
    /// Not won: why, as [`Claim`] says (never [`Claim::Won`]).
    NotWon(Claim),
    /// The database could not be heard (the connection or the server died,
    /// or no answer came in time): the claim may have committed all the
    /// same.
    Unanswered(Unanswered),
}

/// A claim whose answer was lost. Its nonce tells, once the database
/// answers again, whether it committed.
#[derive(Debug)]
pub(crate) struct Unanswered {
    /// The claim statement's nonce.
    pub(crate) nonce: Nonce,
    /// When it was sent.
    pub(crate) sent: Instant,
    /// Why there is no answer.
    pub(crate) error: DbError,
    /// Becomes `true` once the statement's call has returned (it may go on
    /// after its caller stopped waiting): only then does the row tell the
    /// claim's fate.
    returned: watch::Receiver<bool>,
}

impl Unanswered {
    /// Waits until the claim's call has returned, at most until `deadline`;
    /// `false` if it has not.
    pub(crate) async fn returned_by(&mut self, deadline: Instant) -> bool {
        let returned = self.returned.wait_for(|returned| *returned);
        matches!(
            tokio::time::timeout_at(deadline, returned).await,
            Ok(Ok(_)) | Ok(Err(_))
        )
    }

    /// A claim whose answer came, but too late to hold its lease in time:
    /// like one whose answer was lost, its lease is confirmed again before
    /// anything runs.
    pub(crate) fn late(lease: &Lease, sent: Instant) -> Unanswered {
        let (_, returned) = watch::channel(true);
        Unanswered {
            nonce: Nonce(lease.nonce),
            sent,
            error: DbError::Task("the claim was answered too late".to_string()),
            returned,
        }
    }
}

/// Tells its watchers when dropped, however the call it lives in ends.
struct Returned(watch::Sender<bool>);

impl Drop for Returned {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

struct Request {
    job: String,
    lease_for: Duration,
    instant: DateTime<Utc>,
    reply: oneshot::Sender<Result<Claimed, DbError>>,
}

/// Who claims a job's instant first: for each job of this replica's job
/// file, the live replicas that define it as this one does (their
/// registry rows' digests), each by a stable hash of its id, this one
/// first. Jobs built in code have no digest and are claimed at once by
/// every replica, as is every job while this replica knows no other.
#[derive(Debug, Default)]
pub(crate) struct Fleet {
    jobs: HashMap<String, Vec<u64>>,
}

impl Fleet {
    /// The fleet as `me` sees it, with `mine` (its `name=digest` lines),
    /// from the registry's `instances`: the live ones count.
    pub(crate) fn of(me: &str, mine: &str, instances: &[Instance]) -> Fleet {
        let others: Vec<(u64, HashMap<&str, &str>)> = instances
            .iter()
            .filter(|i| i.alive && i.row.id != me)
            .map(|i| {
                let digests = i.row.job_digests.as_deref().unwrap_or("");
                (stable_hash(i.row.id.as_bytes()), digest_lines(digests))
            })
            .collect();
        let me = stable_hash(me.as_bytes());
        let jobs = digest_lines(mine)
            .into_iter()
            .filter_map(|(job, digest)| {
                let alike = others
                    .iter()
                    .filter(|(_, theirs)| theirs.get(job) == Some(&digest))
                    .map(|(seed, _)| *seed);
                let seeds: Vec<u64> = std::iter::once(me).chain(alike).collect();
                (seeds.len() > 1).then(|| (job.to_string(), seeds))
            })
            .collect();
        Fleet { jobs }
    }

    /// Whether this replica claims `instant` of `job` first: the highest
    /// of the live replicas' weights for (job, instant) is its own.
    pub(crate) fn first_here(&self, job: &str, instant: DateTime<Utc>) -> bool {
        let Some(seeds) = self.jobs.get(job) else {
            return true;
        };
        let key = mix(stable_hash(job.as_bytes()) ^ instant.timestamp_micros() as u64);
        let weight = |seed: u64| (mix(seed ^ key), seed);
        let mine = weight(seeds[0]);
        seeds[1..].iter().all(|&seed| weight(seed) < mine)
    }
}

/// `name=digest` lines as a map.
fn digest_lines(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .collect()
}

/// FNV-1a, 64 bits: the same on every replica and every version, as the
/// rendezvous hash needs (std's hasher promises neither).
fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64's finalizer: spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The handle job loops claim through.
#[derive(Clone)]
pub(crate) struct Claimer {
    requests: mpsc::UnboundedSender<Request>,
    fleet: Arc<RwLock<Arc<Fleet>>>,
    /// The database's clock, as this replica reads it: a stealer waits
    /// until [`STEAL_AFTER`] past the instant by it.
    clock: Arc<dyn Clock>,
}

impl Claimer {
    /// Starts the batching task for `instance`.
    pub(crate) fn start(
        store: Store,
        instance: String,
        clock: Arc<dyn Clock>,
        on_abandoned: OnAbandoned,
    ) -> Claimer {
        let (requests, receiver) = mpsc::unbounded_channel();
        tokio::spawn(batcher(store, instance, receiver, on_abandoned));
        Claimer {
            requests,
            fleet: Arc::default(),
            clock,
        }
    }

    /// Takes the fleet as the last heartbeat read it.
    pub(crate) fn set_fleet(&self, fleet: Fleet) {
        if let Ok(mut current) = self.fleet.write() {
            *current = Arc::new(fleet);
        }
    }

    /// How long this replica waits before it claims `instant` of `job`:
    /// nothing if it is the first claimant, or if the instant is
    /// [`STEAL_AFTER`] old already (a retry, a catch-up).
    fn steal_wait(&self, job: &str, instant: DateTime<Utc>) -> Option<Duration> {
        let fleet = self.fleet.read().map(|f| f.clone()).ok()?;
        if fleet.first_here(job, instant) {
            return None;
        }
        let until = instant + chrono::TimeDelta::from_std(STEAL_AFTER).ok()?;
        (until - self.clock.now())
            .to_std()
            .ok()
            .filter(|wait| !wait.is_zero())
    }

    /// Claims `instant` of `job`, at once if this replica is its first
    /// claimant, else as a stealer.
    pub(crate) async fn claim(
        &self,
        job: &Job,
        instant: DateTime<Utc>,
    ) -> Result<Claimed, DbError> {
        let stealing = match self.steal_wait(&job.name, instant) {
            Some(wait) => {
                tokio::time::sleep(wait).await;
                true
            }
            None => false,
        };
        let claimed = self.claim_now(job, instant).await;
        if stealing && matches!(claimed, Ok(Claimed::Won { .. })) {
            crate::telemetry::claim_stolen();
        }
        claimed
    }

    async fn claim_now(&self, job: &Job, instant: DateTime<Utc>) -> Result<Claimed, DbError> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            job: job.name.to_string(),
            lease_for: job.settings.lock_at_most_for,
            instant,
            reply,
        };
        if self.requests.send(request).is_err() {
            return Err(DbError::Task("the claim batcher is gone".to_string()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(DbError::Task(
                "the claim batcher dropped a claim".to_string(),
            ))
        })
    }
}

async fn batcher(
    store: Store,
    instance: String,
    mut receiver: mpsc::UnboundedReceiver<Request>,
    on_abandoned: OnAbandoned,
) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        // The job loops of one instant wake together (the alarm rings for
        // all of them at once) and each hands its claim in a moment later:
        // gather until none has come for a quiet spell, or for at most a
        // millisecond, yielding meanwhile so that they run.
        let first_at = std::time::Instant::now();
        let mut last_arrival = first_at;
        loop {
            tokio::task::yield_now().await;
            let before = batch.len();
            while let Ok(request) = receiver.try_recv() {
                batch.push(request);
            }
            let now = std::time::Instant::now();
            if batch.len() > before {
                last_arrival = now;
            } else if now - last_arrival >= GATHER_QUIET || now - first_at >= GATHER_AT_MOST {
                break;
            }
        }
        let mut by_instant: HashMap<DateTime<Utc>, Vec<Request>> = HashMap::new();
        for request in batch {
            by_instant.entry(request.instant).or_default().push(request);
        }
        // Each batch on its own task (and pool connection): a claim that
        // came after its instant's batch closed does not wait for it.
        for (instant, requests) in by_instant {
            let (store, me, on_abandoned) = (store.clone(), instance.clone(), on_abandoned.clone());
            tokio::spawn(claim_batch(store, me, instant, requests, on_abandoned));
        }
    }
}

/// Claims and records one batch, answers its requests, then marks the runs
/// of vanished holders abandoned.
async fn claim_batch(
    store: Store,
    instance: String,
    instant: DateTime<Utc>,
    requests: Vec<Request>,
    on_abandoned: OnAbandoned,
) {
    let jobs: Vec<(String, Duration)> = requests
        .iter()
        .map(|r| (r.job.clone(), r.lease_for))
        .collect();
    let nonce = Nonce::new();
    // Set when nobody waits for the answer any more: a claim that commits
    // after that gives its leases back at once instead of recording runs
    // nobody will start (the job loops ask the rows what became of it).
    let abandoned = Arc::new(AtomicBool::new(false));
    let (returned, returned_rx) = watch::channel(false);
    let sent = Instant::now();
    let outcome = {
        let abandoned = abandoned.clone();
        store
            .run(move |conn| {
                let _returned = Returned(returned);
                claim_and_record(conn, &jobs, &instance, instant, nonce, &abandoned)
            })
            .await
    };
    match outcome {
        Ok((claims, ids)) => {
            let recorded: Vec<String> = ids.keys().cloned().collect();
            for (request, claim) in requests.into_iter().zip(claims) {
                let claimed = match claim {
                    Claim::Won(lease) => {
                        let run = ids.get(&lease.job).copied();
                        Claimed::Won { lease, run, sent }
                    }
                    not_won => Claimed::NotWon(not_won),
                };
                let _ = request.reply.send(Ok(claimed));
            }
            if !recorded.is_empty() {
                let _ = store
                    .run(move |conn| mark_abandoned(conn, &recorded, &on_abandoned))
                    .await;
            }
        }
        Err(e) => {
            abandoned.store(true, Ordering::SeqCst);
            for request in requests {
                let answer = if e.is_unreachable() {
                    Ok(Claimed::Unanswered(Unanswered {
                        nonce,
                        sent,
                        error: DbError::shared(&e),
                        returned: returned_rx.clone(),
                    }))
                } else {
                    Err(DbError::shared(&e))
                };
                let _ = request.reply.send(answer);
            }
        }
    }
}

/// Claims `jobs` at `instant` with `nonce` and records the start of each
/// run won; the leases are won whatever comes of the record: a run whose
/// start is not recorded here records its own. Returns the claims, and the
/// run ids of the jobs whose start was recorded here. If its caller stopped waiting
/// (`abandoned`) by the time the claim returns, the leases won are given
/// back at once and nothing is recorded.
///
/// Two commits, not one transaction: a transaction would hold the claimed
/// rows' locks, and the shared locks its `INSERT … SELECT` takes on them,
/// until the record commits, and at 1,000 per-second jobs on three replicas
/// the other replicas' claims queued and deadlocked behind them (a third
/// of the instants were missed).
fn claim_and_record(
    conn: &mut crate::db::DbConnection,
    jobs: &[(String, Duration)],
    instance: &str,
    instant: DateTime<Utc>,
    nonce: Nonce,
    abandoned: &AtomicBool,
) -> Result<(Vec<Claim>, HashMap<String, i64>), DbError> {
    let refs: Vec<(&str, Duration)> = jobs.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let claims = lease::claim_many(conn, &refs, instance, instant, nonce)
        .map_err(|e| DbError::query(format!("claiming {} job(s) at {instant}", jobs.len()), e))?;
    let won: Vec<&Lease> = claims
        .iter()
        .filter_map(|c| match c {
            Claim::Won(lease) => Some(lease),
            _ => None,
        })
        .collect();
    if abandoned.load(Ordering::SeqCst) {
        for lease in won {
            let _ = lease::release(conn, lease, Duration::ZERO);
        }
        return Err(DbError::Task(
            "the claim returned after its caller stopped waiting".to_string(),
        ));
    }
    let mut ids: HashMap<String, i64> = HashMap::new();
    if !won.is_empty()
        && let Ok(rows) = lease::runs::record_leased_runs_started(conn, &won, nonce, 1)
    {
        ids = rows.into_iter().collect();
    }
    Ok((claims, ids))
}

/// Marks abandoned the runs of vanished holders of the leases of `jobs`
/// (whose new runs are recorded). A failure leaves them to the next run of
/// the job recorded here: its sweep finds every older one still running.
fn mark_abandoned(
    conn: &mut crate::db::DbConnection,
    jobs: &[String],
    on_abandoned: &OnAbandoned,
) -> Result<(), DbError> {
    let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
    if let Ok(marked) = lease::runs::mark_abandoned_behind_leases(conn, &jobs)
        && !marked.is_empty()
    {
        tracing::warn!(
            runs = marked.len(),
            "marked runs of vanished holders abandoned"
        );
        on_abandoned(&marked);
    }
    Ok(())
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::{Claimed, Claimer, Fleet};
    use crate::db::{Pool, Store};
    use crate::history::{RunFilter, RunRow, list_runs};
    use crate::lease::Claim;
    use crate::registry::{Instance, InstanceRow};
    use crate::schedule::{Clock, TokioClock};
    use crate::scheduler::Job;
    use crate::testing::TestDb;

    const JOBS: [&str; 5] = ["a", "b", "c", "d", "e"];

    fn instant() -> DateTime<Utc> {
        "2030-01-01T00:00:10Z".parse().expect("instant")
    }

    /// A replica's claimer on `db`, reading the test's virtual clock.
    fn claimer(db: &TestDb, clock: &Arc<TokioClock>, instance: &str) -> Claimer {
        let clock: Arc<dyn Clock> = clock.clone();
        let pool = Pool::connect(&db.database_url(), 4, clock.clone()).expect("pool");
        pool.migrate().expect("migrate");
        Claimer::start(
            Store::new(pool),
            instance.to_string(),
            clock,
            Arc::new(|_: &[RunRow]| {}),
        )
    }

    /// The registry's rows of live replicas `ids`, each defining the jobs
    /// `names` alike.
    fn live(ids: &[&str], names: &[String]) -> (String, Vec<Instance>) {
        let digests = names
            .iter()
            .map(|name| format!("{name}=d1"))
            .collect::<Vec<_>>()
            .join("\n");
        let at = instant().naive_utc();
        let rows = ids
            .iter()
            .map(|id| Instance {
                row: InstanceRow {
                    id: (*id).to_string(),
                    host: "host".to_string(),
                    pid: 1,
                    version: "0".to_string(),
                    started_at: at,
                    last_seen: at,
                    job_digests: Some(digests.clone()),
                    clock_offset_us: None,
                    web_url: None,
                    resource_limits: None,
                },
                alive: true,
            })
            .collect();
        (digests, rows)
    }

    fn burst_jobs(count: usize) -> Vec<Job> {
        (0..count)
            .map(|n| {
                Job::new(&format!("burst-{n:03}"), "0 * * * * *")
                    .expect("job")
                    .lock_at_most_for(Duration::from_secs(30))
                    .run(|_| async { Ok::<(), String>(()) })
            })
            .collect()
    }

    /// Of three live replicas that define the same 300 jobs, exactly one
    /// is the first claimant of each job's instant, on every one's view,
    /// and each is first for at least half its fair share of every burst;
    /// a replica alone, or a job no other replica defines alike, is
    /// claimed at once.
    #[test]
    fn the_first_claimant_of_each_instant_is_one_live_replica() {
        let names: Vec<String> = (0..300).map(|n| format!("job-{n:03}")).collect();
        let ids = ["app-1", "app-2", "app-3"];
        let (digests, rows) = live(&ids, &names);
        let views: Vec<Fleet> = ids
            .iter()
            .map(|id| Fleet::of(id, &digests, &rows))
            .collect();
        for second in 0..20 {
            let at = instant() + chrono::TimeDelta::seconds(second * 60);
            let mut firsts = [0usize; 3];
            for name in &names {
                let here: Vec<usize> = (0..3).filter(|&r| views[r].first_here(name, at)).collect();
                assert_eq!(here.len(), 1, "{name} at {at}: {here:?}");
                firsts[here[0]] += 1;
            }
            assert!(firsts.iter().all(|&n| n >= 50), "{at}: {firsts:?}");
        }
        let alone = Fleet::of("app-1", &digests, &rows[..1]);
        assert!(names.iter().all(|name| alone.first_here(name, instant())));
        let mut drifted = rows.clone();
        for row in &mut drifted[1..] {
            row.row.job_digests = Some(digests.replace("job-007=d1", "job-007=d2"));
        }
        let apart = Fleet::of("app-1", &digests, &drifted);
        assert!(apart.first_here("job-007", instant()));
        let mut gone = rows.clone();
        gone[1].alive = false;
        gone[2].alive = false;
        let left = Fleet::of("app-1", &digests, &gone);
        assert!(names.iter().all(|name| left.first_here(name, instant())));
    }

    /// Claimers of `claiming` (some of `ids`, every one live in the
    /// registry, each defining `names` alike), each told of the fleet.
    fn fleet_claimers(
        db: &TestDb,
        clock: &Arc<TokioClock>,
        ids: &[&str],
        claiming: &[&str],
        names: &[String],
    ) -> Vec<Claimer> {
        let (digests, rows) = live(ids, names);
        claiming
            .iter()
            .map(|id| {
                let claimer = claimer(db, clock, id);
                claimer.set_fleet(Fleet::of(id, &digests, &rows));
                claimer
            })
            .collect()
    }

    /// Asserts that each job was won by exactly one of `answers` (each
    /// replica's claims, by job); returns how many each won.
    fn won_once(names: &[String], answers: &[&Vec<Claimed>]) -> Vec<usize> {
        for (n, name) in names.iter().enumerate() {
            let winners = answers
                .iter()
                .filter(|claims| matches!(claims[n], Claimed::Won { .. }))
                .count();
            let all: Vec<&Claimed> = answers.iter().map(|claims| &claims[n]).collect();
            assert_eq!(winners, 1, "{name}: {all:?}");
        }
        answers
            .iter()
            .map(|claims| {
                claims
                    .iter()
                    .filter(|c| matches!(c, Claimed::Won { .. }))
                    .count()
            })
            .collect()
    }

    /// Three replicas claim a burst of 90 jobs due at one instant, all at
    /// once: each job is won once, and each replica wins at least half its
    /// fair share (the jobs it claims first).
    #[tokio::test(start_paused = true)]
    async fn three_replicas_share_a_burst_and_each_job_is_won_once() {
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(instant()));
        let jobs = burst_jobs(90);
        let names: Vec<String> = jobs.iter().map(|j| j.name.to_string()).collect();
        let ids = ["app-1", "app-2", "app-3"];
        let claimers = fleet_claimers(&db, &clock, &ids, &ids, &names);
        let (a, b, c) = tokio::join!(
            claim_all(&claimers[0], &jobs, instant()),
            claim_all(&claimers[1], &jobs, instant()),
            claim_all(&claimers[2], &jobs, instant())
        );
        let won = won_once(&names, &[&a, &b, &c]);
        assert!(won.iter().all(|&n| n >= 15), "shares {won:?}");
        assert_eq!(rows_of(&db).len(), jobs.len());
    }

    /// A replica that the registry still lists as live claims nothing (it
    /// was killed): the two others steal its share of the burst, and each
    /// job is won once.
    #[tokio::test(start_paused = true)]
    async fn a_silent_replicas_share_is_stolen() {
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(instant()));
        let jobs = burst_jobs(60);
        let names: Vec<String> = jobs.iter().map(|j| j.name.to_string()).collect();
        let ids = ["app-1", "app-2", "app-3"];
        let (digests, rows) = live(&ids, &names);
        let silent = Fleet::of("app-3", &digests, &rows);
        let its_share = names
            .iter()
            .filter(|name| silent.first_here(name, instant()))
            .count();
        assert!(its_share > 0, "the silent replica is first for none");
        let claimers = fleet_claimers(&db, &clock, &ids, &ids[..2], &names);
        let (a, b) = tokio::join!(
            claim_all(&claimers[0], &jobs, instant()),
            claim_all(&claimers[1], &jobs, instant())
        );
        won_once(&names, &[&a, &b]);
        assert_eq!(rows_of(&db).len(), jobs.len());
    }

    fn jobs() -> Vec<Job> {
        JOBS.iter()
            .map(|name| {
                Job::new(name, "* * * * * *")
                    .expect("job")
                    .lock_at_most_for(Duration::from_secs(30))
                    .run(|_| async { Ok::<(), String>(()) })
            })
            .collect()
    }

    /// Claims `instant` of every job at once through `claimer`, as the job
    /// loops of one replica do when they wake together.
    async fn claim_all(claimer: &Claimer, jobs: &[Job], instant: DateTime<Utc>) -> Vec<Claimed> {
        let claims: Vec<_> = jobs
            .iter()
            .map(|job| {
                let (claimer, job) = (claimer.clone(), job.clone());
                tokio::spawn(async move { claimer.claim(&job, instant).await })
            })
            .collect();
        let mut answers = Vec::new();
        for claim in claims {
            answers.push(claim.await.expect("task").expect("the database answers"));
        }
        answers
    }

    fn rows_of(db: &TestDb) -> Vec<RunRow> {
        list_runs(
            &mut db.connect(),
            &RunFilter {
                limit: 1_000,
                ..Default::default()
            },
        )
        .expect("runs")
    }

    /// Two replicas' claimers race for five jobs at one instant: each job
    /// is won once, by one of them, with its run's row written in the
    /// batch under the lease's fence; the loser is told who took it.
    #[tokio::test(start_paused = true)]
    async fn two_replicas_split_an_instant_and_each_job_is_won_once() {
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(instant()));
        let (one, two) = (claimer(&db, &clock, "one"), claimer(&db, &clock, "two"));
        let jobs = jobs();
        let (first, second) = tokio::join!(
            claim_all(&one, &jobs, instant()),
            claim_all(&two, &jobs, instant())
        );
        let rows = rows_of(&db);
        assert_eq!(rows.len(), JOBS.len(), "{rows:?}");
        for (job, claims) in JOBS.iter().zip(first.iter().zip(&second)) {
            let won: Vec<_> = [claims.0, claims.1]
                .into_iter()
                .filter_map(|c| match c {
                    Claimed::Won { lease, run, .. } => Some((lease, run)),
                    _ => None,
                })
                .collect();
            assert_eq!(won.len(), 1, "{job}: {claims:?}");
            let (lease, run) = won[0];
            let row = rows.iter().find(|r| Some(r.id) == *run).expect("its row");
            assert_eq!(
                (row.job.as_str(), row.fence, row.instance.as_str()),
                (*job, lease.fence, lease.instance.as_str())
            );
            assert_eq!(row.scheduled_at.and_utc(), instant());
            let lost = [claims.0, claims.1]
                .into_iter()
                .find(|c| !matches!(c, Claimed::Won { .. }));
            assert!(
                matches!(lost, Some(Claimed::NotWon(Claim::Taken | Claim::Held(_)))),
                "{job}: {lost:?}"
            );
        }
    }

    /// A replica started again under the same id claims, as catch-up, the
    /// instant its killed predecessor won: the rows name this id and this
    /// instant, but no statement of this process won them, so it wins
    /// nothing and records no second run.
    #[tokio::test(start_paused = true)]
    async fn a_restarted_replica_does_not_win_its_predecessors_instant() {
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(instant()));
        let jobs = jobs();
        let before = claim_all(&claimer(&db, &clock, "app-1"), &jobs, instant()).await;
        assert!(
            before.iter().all(|c| matches!(c, Claimed::Won { .. })),
            "{before:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = claim_all(&claimer(&db, &clock, "app-1"), &jobs, instant()).await;
        assert!(
            again.iter().all(|c| matches!(c, Claimed::NotWon(_))),
            "won again: {again:?}"
        );
        assert_eq!(rows_of(&db).len(), JOBS.len());
    }

    /// An instant the database's clock has not reached is refused as not
    /// yet, and written nowhere.
    #[tokio::test(start_paused = true)]
    async fn an_instant_still_to_come_is_not_yet() {
        let db = TestDb::sqlite();
        let clock = Arc::new(TokioClock::starting_at(instant()));
        let later = instant() + chrono::TimeDelta::seconds(2);
        let claims = claim_all(&claimer(&db, &clock, "one"), &jobs(), later).await;
        assert!(
            claims
                .iter()
                .all(|c| matches!(c, Claimed::NotWon(Claim::NotYet { .. }))),
            "{claims:?}"
        );
        assert!(rows_of(&db).is_empty());
    }
}
