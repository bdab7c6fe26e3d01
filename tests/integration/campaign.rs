//! A randomized fault campaign: replicas as real processes, each reaching a
//! private database through a proxy of its own, under faults drawn from a
//! seeded schedule that overlap at times — a replica killed and restarted
//! (under its own id, a new one, or with its clock skewed; under its own
//! id often at once, as systemd restarts it, and then met by a slow link
//! as its first claims go out), frozen
//! (SIGSTOP, often past its lease), partitioned (connections reset, or a
//! black hole that delivers late), the database stalled or crashed — then
//! a quiet spell. The jobs record their own start, ticks and end; the
//! checker holds those records against the history and against
//! `replicron verify`, and counts what must never happen: an instant run
//! twice, two bodies of one job at once, a start before its instant, a row
//! left `running`, an instant neither run nor accounted for, and a miss
//! that no fault explains. With the feature jobs (one per overlap policy,
//! a limit shared by three jobs, a fan-in and a dependent run on failures
//! too) it also counts more bodies at once than a policy or a limit
//! allows, a waiting instant lost, an instant recorded missed while its
//! job's run waited or ran, and a dependent run for an instant its parents
//! did not end as its `on` says, or not run for one that they did.
//!
//! The seed and the fault timeline are printed, so a failure can be
//! replayed: `scripts/torture --seed S` runs the same schedule.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use diesel::RunQueryDsl;
use diesel::connection::SimpleConnection;
use nix::sys::signal::Signal;

use crate::cluster::{Galera, PgServer, Server};
use crate::databases::{RawConnection, raw_connect, raw_try_connect};
use crate::proxy::Proxy;
use crate::support::{Replica, binary, libfaketime};

/// A small deterministic generator (splitmix64): the same seed draws the
/// same schedule on every build and platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// A number in `[0, n)`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration in `[low, high]` milliseconds.
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Which database the campaign runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// A private MariaDB server.
    Mariadb,
    /// A private PostgreSQL server.
    Postgres,
    /// A private 3-node MariaDB Galera cluster: each replica's URL lists
    /// every node, its own first; a crash or a stall hits one node.
    Galera,
}

/// One fault, as drawn.
#[derive(Clone, Debug)]
enum Kind {
    /// SIGKILL the replica; start it again after `down` (under a new id, or
    /// with its clock skewed by `skew_ms`).
    Kill {
        down: Duration,
        new_id: bool,
        skew_ms: Option<i64>,
    },
    /// SIGKILL the replica; start it again under the same id after
    /// `down`; `lag` later, as its first claims (catch-up's) go out, slow
    /// its links (each chunk `delay_ms` late either way) until the fault's
    /// end: a restart met by congestion, whose claims take long round
    /// trips.
    SlowRestart {
        down: Duration,
        lag: Duration,
        delay_ms: u64,
    },
    /// SIGKILL the replica while the history table takes no write (a
    /// backup's or a purge's table lock) for the fault's span; start it
    /// again under the same id after `down`, inside that span: its
    /// catch-up claims are answered, their start records wait, and other
    /// replicas claim the next instants meanwhile.
    LockedRestart { down: Duration },
    /// SIGSTOP the replica for the fault's span.
    Freeze,
    /// Its proxy resets every connection for the span (`blackhole`: holds
    /// them, carrying nothing, and delivers what was sent once healed).
    Partition { blackhole: bool },
    /// The database takes no write for the span (MariaDB: `FLUSH TABLES
    /// WITH READ LOCK`; PostgreSQL: the tables locked in EXCLUSIVE mode).
    Stall,
    /// SIGKILL the database server, start it again after the span.
    Crash,
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Kill {
                skew_ms: Some(_), ..
            } => "skewed restart",
            Kind::Kill { new_id: true, .. } => "kill, new id",
            Kind::Kill { .. } => "kill, same id",
            Kind::SlowRestart { .. } => "slow restart",
            Kind::LockedRestart { .. } => "locked restart",
            Kind::Freeze => "freeze",
            Kind::Partition { blackhole: true } => "black hole",
            Kind::Partition { blackhole: false } => "partition",
            Kind::Stall => "stall",
            Kind::Crash => "crash",
        }
    }

    /// Whether it acts on the database rather than on one replica.
    fn on_server(&self) -> bool {
        matches!(self, Kind::Stall | Kind::Crash)
    }

    /// How long after its end a fault may still hold instants back: the
    /// longest lease a replica it touched may hold, the replicas'
    /// reconnection backoff after a crash, a replica's start.
    fn aftermath(&self) -> Duration {
        let lease = Duration::from_secs(MAX_LEASE_S);
        match self {
            Kind::Crash => lease + Duration::from_secs(20),
            Kind::Kill { .. } | Kind::SlowRestart { .. } | Kind::LockedRestart { .. } => {
                lease + Duration::from_secs(6)
            }
            _ => lease + Duration::from_secs(4),
        }
    }
}

/// A fault on the timeline, in milliseconds from the campaign's start.
#[derive(Clone, Debug)]
struct Fault {
    at: Duration,
    span: Duration,
    target: Option<usize>,
    /// The database node a crash or a stall hits.
    node: usize,
    kind: Kind,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>7.2}s +{:>5.2}s  {:<14} {}",
            self.at.as_secs_f64(),
            self.span.as_secs_f64(),
            self.kind.name(),
            match self.target {
                Some(i) => format!("replica r{}", i + 1),
                None => format!("database node {}", self.node + 1),
            }
        )?;
        if let Kind::Kill {
            skew_ms: Some(skew),
            ..
        } = self.kind
        {
            write!(f, " (clock {skew:+} ms)")?;
        }
        if let Kind::SlowRestart {
            down,
            lag,
            delay_ms,
        } = self.kind
        {
            write!(
                f,
                " (up after {:.2}s, links {delay_ms} ms late {:.2}s later)",
                down.as_secs_f64(),
                lag.as_secs_f64()
            )?;
        }
        Ok(())
    }
}

/// The longest lease of the campaign's jobs, in seconds.
const MAX_LEASE_S: u64 = 4;

/// Draws the faults of `length` for `replicas` replicas from `seed`: a new
/// fault every 1.5–5 s, each on a replica that has none going or on the
/// database when it has none, so that faults of different targets overlap.
fn draw(seed: u64, replicas: usize, nodes: usize, length: Duration) -> Vec<Fault> {
    let mut rng = Rng(seed);
    let mut faults = Vec::new();
    let mut busy_until = vec![Duration::ZERO; replicas];
    let mut server_busy_until = Duration::ZERO;
    let mut at = rng.millis(1_000, 3_000);
    while at < length {
        let roll = rng.below(100);
        let kind = match roll {
            0..=4 => Kind::LockedRestart {
                down: rng.millis(50, 150),
            },
            5..=9 => Kind::SlowRestart {
                down: rng.millis(50, 150),
                lag: rng.millis(40, 100),
                delay_ms: 60 + rng.below(120),
            },
            10..=19 => {
                let new_id = rng.chance(40);
                // Under the same id, often at once, as systemd's
                // `Restart=` does after its default 100 ms: the new
                // process then claims, as catch-up, the very instant its
                // killed predecessor had won.
                let down = if !new_id && rng.chance(50) {
                    rng.millis(50, 150)
                } else {
                    rng.millis(0, 3_000)
                };
                Kind::Kill {
                    down,
                    new_id,
                    skew_ms: None,
                }
            }
            20..=29 => Kind::Kill {
                down: rng.millis(0, 2_000),
                new_id: rng.chance(30),
                skew_ms: Some(if rng.chance(50) { 2_000 } else { -2_000 }),
            },
            30..=49 => Kind::Freeze,
            50..=59 => Kind::Partition { blackhole: false },
            60..=71 => Kind::Partition { blackhole: true },
            72..=89 => Kind::Stall,
            _ => Kind::Crash,
        };
        let span = match &kind {
            Kind::Kill { down, .. } => *down,
            // The links stay slow for a while after the restart.
            Kind::SlowRestart { down, lag, .. } => *down + *lag + rng.millis(2_000, 6_000),
            Kind::LockedRestart { down } => *down + rng.millis(800, 2_500),
            // Often past the lease (3–4 s), sometimes far past it.
            Kind::Freeze => rng.millis(500, 9_000),
            Kind::Partition { .. } => rng.millis(1_000, 9_000),
            // Sometimes past the replicas' 10 s wait for an answer.
            Kind::Stall => rng.millis(1_000, 12_000),
            Kind::Crash => rng.millis(1_000, 6_000),
        };
        let span = span.min(length.saturating_sub(at));
        let target = if kind.on_server() {
            (server_busy_until <= at).then_some(None)
        } else {
            let free: Vec<usize> = (0..replicas).filter(|i| busy_until[*i] <= at).collect();
            (!free.is_empty()).then(|| Some(free[rng.below(free.len() as u64) as usize]))
        };
        if let Some(target) = target {
            let node = match target {
                Some(i) => {
                    busy_until[i] = at + span + Duration::from_millis(200);
                    0
                }
                None => {
                    // A node that crashed rejoins by state transfer: its
                    // next fault waits for that.
                    server_busy_until = at + span + Duration::from_millis(500);
                    if nodes > 1 {
                        server_busy_until += Duration::from_secs(15);
                    }
                    rng.below(nodes as u64) as usize
                }
            };
            faults.push(Fault {
                at,
                span,
                target,
                node,
                kind,
            });
        }
        at += rng.millis(1_500, 5_000);
    }
    faults
}

/// The database under the replicas, with what a fault does to it.
enum Database {
    Mariadb(Server),
    Postgres(PgServer),
    Galera(Galera),
}

impl Database {
    fn start(backend: Backend) -> Option<Database> {
        match backend {
            Backend::Mariadb => Server::start(&[]).map(Database::Mariadb),
            Backend::Postgres => PgServer::start().map(Database::Postgres),
            Backend::Galera => Galera::start().map(Database::Galera),
        }
    }

    /// Each node's address.
    fn addresses(&self) -> Vec<std::net::SocketAddr> {
        match self {
            Database::Mariadb(server) => vec![server.node.address()],
            Database::Postgres(server) => vec![server.address()],
            Database::Galera(cluster) => cluster.nodes.iter().map(|n| n.address()).collect(),
        }
    }

    /// The URL of database `name` through `ports` (every node, in order),
    /// or straight to the first node.
    fn url(&self, name: &str, ports: Option<&[u16]>) -> String {
        let direct = vec![self.addresses()[0].port()];
        let hosts: Vec<String> = ports
            .unwrap_or(&direct)
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        match self {
            Database::Postgres(_) => format!("postgres://postgres@{}/{name}", hosts[0]),
            _ => format!("mysql://root@{}/{name}", hosts.join(",")),
        }
    }

    /// A URL straight to node `node`.
    fn node_url(&self, name: &str, node: usize) -> String {
        let port = self.addresses()[node].port();
        self.url(name, Some(&[port]))
    }

    fn create(&self, name: &str) {
        let admin = match self {
            Database::Postgres(_) => self.url("postgres", None),
            _ => self.url("mysql", None),
        };
        raw_connect(&admin)
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the campaign's database");
    }

    fn crash(&mut self, node: usize) {
        match self {
            Database::Mariadb(server) => server.node.kill(),
            Database::Postgres(server) => server.kill(),
            Database::Galera(cluster) => cluster.nodes[node].kill(),
        }
    }

    fn recover(&mut self, node: usize) {
        match self {
            Database::Mariadb(server) => server.node.restart(Duration::from_secs(60)),
            Database::Postgres(server) => server.restart(Duration::from_secs(60)),
            Database::Galera(cluster) => cluster.nodes[node].rejoin(Duration::from_secs(120)),
        }
    }

    /// Holds every write to the history table (on the first node) off for
    /// `span`, on a thread of its own; reads, and the lease table, go on.
    fn lock_history(&self, name: &str, span: Duration) -> std::thread::JoinHandle<()> {
        let (sql, release) = match self {
            Database::Postgres(_) => (
                "BEGIN; LOCK TABLE replicron_runs IN EXCLUSIVE MODE",
                "COMMIT",
            ),
            _ => ("LOCK TABLES replicron_runs READ", "UNLOCK TABLES"),
        };
        hold(self.node_url(name, 0), sql, release, span)
    }

    /// Holds every write of node `node` off for `span`, on a thread of its
    /// own.
    fn stall(&self, name: &str, node: usize, span: Duration) -> std::thread::JoinHandle<()> {
        let url = self.node_url(name, node);
        let (sql, release) = match self {
            Database::Postgres(_) => (
                "BEGIN; LOCK TABLE replicron_locks, replicron_runs IN EXCLUSIVE MODE",
                "COMMIT",
            ),
            _ => ("FLUSH TABLES WITH READ LOCK", "UNLOCK TABLES"),
        };
        hold(url, sql, release, span)
    }
}

/// On a thread of its own, connects to `url`, runs `sql`, and `release`
/// once `span` has passed since it began.
fn hold(
    url: String,
    sql: &'static str,
    release: &'static str,
    span: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let Ok(mut conn) = raw_try_connect(&url) else {
            return;
        };
        if conn.batch_execute(sql).is_ok() {
            std::thread::sleep(span.saturating_sub(started.elapsed()));
            let _ = conn.batch_execute(release);
        }
    })
}

/// What a campaign is given.
pub(crate) struct Plan {
    pub backend: Backend,
    pub seed: u64,
    pub replicas: usize,
    pub faults_for: Duration,
    pub quiet_for: Duration,
    /// Whether the jobs that exercise the features (each overlap policy, a
    /// limit shared by three jobs, a fan-in and a dependent on failures
    /// too) run beside the plain ones.
    pub features: bool,
    /// Another build of replicron to run the replicas (an older one, to
    /// show what the campaign finds in it); its `verify`, if it has one, is
    /// asked.
    pub binary: Option<PathBuf>,
}

/// A job of the campaign: its schedule (every `period` seconds, at
/// `offset`), its lease, how long its body runs and whether its first
/// attempt fails.
struct CampaignJob {
    name: String,
    period: i64,
    offset: i64,
    lease_s: u64,
    ticks: u32,
    fails_first: bool,
    /// How late an instant missed at a replica's start, or in an outage,
    /// may still be caught up.
    catch_up: Option<&'static str>,
    /// Its `overlap` (`skip` when `None`).
    overlap: Option<&'static str>,
    /// Its `max_concurrent`, with `overlap = "allow"`.
    max_concurrent: Option<usize>,
    /// The [`LIMIT`] it takes.
    limited: bool,
    /// Fails (every attempt) at the instants whose Unix second is a
    /// multiple of this.
    fails_every: Option<i64>,
    /// `on_abandon = "rerun"`: an instant whose holder died mid-run runs
    /// again, under a later lease.
    reruns: bool,
}

impl CampaignJob {
    /// How many of its bodies may run at once, by its policy.
    fn at_once(&self) -> usize {
        self.max_concurrent.unwrap_or(1)
    }

    /// Whether an instant of it may wait for a run of it, or for a limit's
    /// slot: from its instant to its end, such a run holds the job, and
    /// instants meanwhile are overruns.
    fn waits(&self) -> bool {
        self.overlap.is_some() || self.limited
    }
}

/// A per-second job `tick-N` whose body runs about 0.3 s, with a 3 s lease.
fn tick(n: usize, catch_up: Option<&'static str>) -> CampaignJob {
    CampaignJob {
        name: format!("tick-{n}"),
        period: 1,
        offset: 0,
        lease_s: 3,
        ticks: 1,
        fails_first: false,
        catch_up,
        overlap: None,
        max_concurrent: None,
        limited: false,
        fails_every: None,
        reruns: false,
    }
}

/// A job of `period` seconds whose body ticks `ticks` times, 250 ms apart.
fn every(name: &str, period: i64, offset: i64, ticks: u32) -> CampaignJob {
    CampaignJob {
        name: name.to_string(),
        period,
        offset,
        lease_s: 3,
        ticks,
        ..tick(0, None)
    }
}

/// The limit the feature jobs `limit-a`, `limit-b` and `limit-c` share,
/// and how many of them it lets run at once.
const LIMIT: (&str, usize) = ("campaign-limit", 2);

fn campaign_jobs(features: bool) -> Vec<CampaignJob> {
    let mut jobs: Vec<CampaignJob> = (0..8).map(|n| tick(n, (n >= 4).then_some("5s"))).collect();
    jobs.push(CampaignJob {
        lease_s: MAX_LEASE_S,
        ..every("slow-a", 5, 0, 8)
    });
    jobs.push(CampaignJob {
        lease_s: MAX_LEASE_S,
        catch_up: Some("10s"),
        ..every("slow-b", 5, 2, 12)
    });
    jobs.push(CampaignJob {
        fails_first: true,
        ..every("flaky", 3, 0, 1)
    });
    if features {
        jobs.extend(feature_jobs());
    }
    jobs
}

/// The jobs that exercise the features under the faults: one per overlap
/// policy, each of whose runs outlasts its period, so that instants wait
/// (`queue`, `replace`) or run beside each other (`allow`, two at most);
/// three jobs that want a limit of two at the same instants; two parents
/// of the dependent jobs, one of which fails every third instant; and
/// one that reruns an instant whose holder died (`on_abandon = "rerun"`),
/// whose short runs leave its lease free for the rerun between instants.
fn feature_jobs() -> Vec<CampaignJob> {
    let mut jobs = vec![
        CampaignJob {
            overlap: Some("queue"),
            lease_s: MAX_LEASE_S,
            ..every("queue", 2, 0, 10)
        },
        CampaignJob {
            overlap: Some("replace"),
            ..every("replace", 2, 1, 10)
        },
        CampaignJob {
            overlap: Some("allow"),
            max_concurrent: Some(2),
            ..every("allow", 1, 0, 6)
        },
    ];
    for name in ["limit-a", "limit-b", "limit-c"] {
        jobs.push(CampaignJob {
            limited: true,
            ..every(name, 2, 0, 4)
        });
    }
    jobs.push(every("parent-a", 3, 0, 1));
    jobs.push(CampaignJob {
        fails_every: Some(9),
        ..every("parent-b", 3, 0, 1)
    });
    jobs.push(CampaignJob {
        reruns: true,
        ..every("rerun", 5, 1, 2)
    });
    jobs
}

/// A job that runs after others (`after`): its parents, and the endings
/// of theirs that start it (`on`).
struct Dependent {
    child: &'static str,
    parents: &'static [&'static str],
    on: &'static [&'static str],
}

impl Dependent {
    /// Whether `ending` is one that starts it.
    fn starts_on(&self, ending: &str) -> bool {
        self.on.contains(&ending)
    }
}

/// The dependent jobs: one after a plain job; with the features, a fan-in
/// of two parents, and one that runs after its parent's failures too.
fn dependents(features: bool) -> Vec<Dependent> {
    let mut list = vec![Dependent {
        child: "after-tick-1",
        parents: &["tick-1"],
        on: &["succeeded"],
    }];
    if features {
        list.push(Dependent {
            child: "fan-in",
            parents: &["parent-a", "parent-b"],
            on: &["succeeded"],
        });
        list.push(Dependent {
            child: "after-either",
            parents: &["parent-b"],
            on: &["succeeded", "failed"],
        });
    }
    list
}

/// A body that records its start, a tick every 250 ms (`ticks` of them)
/// and its end, as `EVENT JOB INSTANT INSTANCE RUN_ID FENCE ATTEMPT PID
/// NS` lines, its clock read without any skew (libfaketime is not
/// preloaded into it); `fail` runs before its end.
fn body(ticks: u32, fail: &str, out: &Path) -> String {
    format!(
        "command = '''r() {{ echo \"$1 $REPLICRON_JOB $REPLICRON_SCHEDULED_AT $REPLICRON_INSTANCE $REPLICRON_RUN_ID $REPLICRON_FENCE $REPLICRON_ATTEMPT $$ $(date +%s%N)\" >> \"$OUT\"; }}; \
         r start; i=0; while [ $i -lt {ticks} ]; do sleep 0.25; r tick; i=$((i+1)); done; {fail}r end'''\n\
         env = {{ OUT = {out:?}, LD_PRELOAD = \"\" }}\n\n"
    )
}

/// The job file, every job's body recording itself into `out`.
fn job_file(jobs: &[CampaignJob], dependents: &[Dependent], out: &Path) -> String {
    let mut text = String::from(
        "[daemon]\nshutdown_grace = \"10s\"\n\n[defaults]\nmissed_after = \"10s\"\ntimeout = \"30s\"\n\n",
    );
    if jobs.iter().any(|job| job.limited) {
        text.push_str(&format!(
            "[[limit]]\nname = \"{}\"\nmax_running = {}\n\n",
            LIMIT.0, LIMIT.1
        ));
    }
    for job in jobs {
        let seconds = if job.period == 1 {
            "*".to_string()
        } else {
            format!("{}-59/{}", job.offset, job.period)
        };
        let fail = match (job.fails_first, job.fails_every) {
            (true, _) => "if [ \"$REPLICRON_ATTEMPT\" = 1 ]; then r end; exit 1; fi; ".to_string(),
            (false, Some(n)) => format!(
                "if [ $(( $(date -d \"$REPLICRON_SCHEDULED_AT\" +%s) % {n} )) = 0 ]; then r end; exit 1; fi; "
            ),
            (false, None) => String::new(),
        };
        let mut keys = match (job.fails_first, job.catch_up) {
            (true, _) => "retries = 1\nretry_backoff = \"500ms\"\n".to_string(),
            (false, Some(window)) => format!("catch_up = \"{window}\"\n"),
            (false, None) => String::new(),
        };
        if let Some(overlap) = job.overlap {
            keys.push_str(&format!("overlap = \"{overlap}\"\n"));
        }
        if let Some(n) = job.max_concurrent {
            keys.push_str(&format!("max_concurrent = {n}\n"));
        }
        if job.limited {
            keys.push_str(&format!("limits = [\"{}\"]\n", LIMIT.0));
        }
        if job.reruns {
            keys.push_str("on_abandon = \"rerun\"\n");
        }
        text.push_str(&format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"{seconds} * * * * *\"\n\
             lock_at_most_for = \"{lease}s\"\n{keys}{body}",
            name = job.name,
            lease = job.lease_s,
            body = body(job.ticks, &fail, out),
        ));
    }
    for dependent in dependents {
        let quoted = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        text.push_str(&format!(
            "[[job]]\nname = \"{child}\"\nafter = {{ jobs = [{parents}], on = [{on}] }}\n\
             lock_at_most_for = \"3s\"\n{body}",
            child = dependent.child,
            parents = quoted(dependent.parents),
            on = quoted(dependent.on),
            body = body(1, "", out),
        ));
    }
    text
}

/// One body, as its records tell.
#[derive(Clone, Debug)]
struct Body {
    job: String,
    instant: DateTime<Utc>,
    instance: String,
    run_id: i64,
    fence: i64,
    attempt: i32,
    start_ns: i64,
    last_ns: i64,
    ended: bool,
}

fn read_bodies(out: &Path) -> Vec<Body> {
    let mut bodies: Vec<Body> = Vec::new();
    // A body is one shell: its job and pid, from its start on (a pid used
    // again later is another body).
    let mut by_pid: BTreeMap<(String, i64), Vec<usize>> = BTreeMap::new();
    for line in std::fs::read_to_string(out).unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 9 {
            continue;
        }
        let (Ok(instant), Ok(run_id), Ok(fence), Ok(attempt), Ok(pid), Ok(ns)) = (
            DateTime::parse_from_rfc3339(f[2]),
            f[4].parse::<i64>(),
            f[5].parse::<i64>(),
            f[6].parse::<i32>(),
            f[7].parse::<i64>(),
            f[8].parse::<i64>(),
        ) else {
            continue;
        };
        let key = (f[1].to_string(), pid);
        if f[0] == "start" {
            by_pid.entry(key).or_default().push(bodies.len());
            bodies.push(Body {
                job: f[1].to_string(),
                instant: instant.with_timezone(&Utc),
                instance: f[3].to_string(),
                run_id,
                fence,
                attempt,
                start_ns: ns,
                last_ns: ns,
                ended: false,
            });
        } else if let Some(&index) = by_pid
            .get(&key)
            .and_then(|list| list.iter().rev().find(|i| bodies[**i].start_ns <= ns))
        {
            let body = &mut bodies[index];
            body.last_ns = body.last_ns.max(ns);
            body.ended |= f[0] == "end";
        }
    }
    bodies
}

/// A history row, as the checker reads it.
#[derive(diesel::QueryableByName, Clone, Debug)]
struct Row {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    id: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    job: String,
    #[diesel(sql_type = diesel::sql_types::Timestamp)]
    scheduled_at: NaiveDateTime,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    attempt: i32,
    #[diesel(sql_type = diesel::sql_types::Text)]
    instance: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    fence: i64,
    #[diesel(sql_type = diesel::sql_types::Timestamp)]
    started_at: NaiveDateTime,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamp>)]
    finished_at: Option<NaiveDateTime>,
    #[diesel(sql_type = diesel::sql_types::Text)]
    status: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamp>)]
    confirmed_at: Option<NaiveDateTime>,
}

fn read_history(conn: &mut RawConnection) -> Vec<Row> {
    diesel::sql_query(
        "SELECT id, job, scheduled_at, attempt, instance, fence, started_at, finished_at, \
         status, confirmed_at FROM replicron_runs ORDER BY id",
    )
    .load(conn)
    .expect("read the history")
}

/// What the campaign found: each property that must hold, and the job and
/// instant at which it broke.
#[derive(Default, Debug)]
pub(crate) struct Findings {
    pub instants: usize,
    pub bodies: usize,
    /// An instant (one attempt) whose body started more than once, or that
    /// ran under two leases.
    pub duplicates: Vec<String>,
    /// More bodies running at once, by their own records, than the job's
    /// overlap policy or a limit allows (one, `max_concurrent`, or the
    /// limit's `max_running` across its jobs).
    pub too_many_at_once: Vec<String>,
    /// A body started before its instant, or a dependent job's before its
    /// parents' runs of the instant ended.
    pub early: Vec<String>,
    /// A row still `running` after every replica stopped.
    pub left_running: Vec<String>,
    /// A body without its history row.
    pub unrecorded: Vec<String>,
    /// An instant neither run nor recorded, with no run of its job going.
    pub silent: Vec<String>,
    /// An instant not run outside every fault's window.
    pub unexplained: Vec<String>,
    /// An instant recorded `missed` while a run of its job waited (behind
    /// its run or for a limit's slot) or ran, outside every fault's window:
    /// an overrun, not a miss.
    pub missed_while_busy: Vec<String>,
    /// An instant that came while a `queue` or `replace` job ran, outside
    /// every fault's window, and was neither run nor recorded: the instant
    /// that should have waited, lost.
    pub lost_waiters: Vec<String>,
    /// A dependent job run at an instant at which its parents did not all
    /// end as its `on` says.
    pub unwarranted: Vec<String>,
    /// An instant at which every parent ended as the dependent's `on`
    /// says, outside every fault's window, without the dependent's run.
    pub children_missing: Vec<String>,
    /// Instants not run inside fault windows, and how they are accounted.
    pub accounted: BTreeMap<String, usize>,
    /// `replicron verify`'s exit code and summary, when asked.
    pub verify: Option<(i32, String)>,
}

impl Findings {
    /// Each property, by name, with what broke it.
    fn properties(&self) -> [(&'static str, &[String]); 11] {
        [
            ("instants started twice", &self.duplicates),
            (
                "more bodies at once than the policy or limit allows",
                &self.too_many_at_once,
            ),
            ("early starts", &self.early),
            ("rows left running", &self.left_running),
            ("bodies without their row", &self.unrecorded),
            (
                "silent misses (neither run nor accounted for)",
                &self.silent,
            ),
            ("misses no fault window explains", &self.unexplained),
            (
                "instants recorded missed while their job's run waited or ran",
                &self.missed_while_busy,
            ),
            (
                "waiting instants lost (neither run nor recorded)",
                &self.lost_waiters,
            ),
            (
                "dependent runs whose parents did not end as `on` says",
                &self.unwarranted,
            ),
            (
                "parent instants, outside fault windows, without their dependent's run",
                &self.children_missing,
            ),
        ]
    }

    fn violations(&self) -> usize {
        self.properties()
            .iter()
            .map(|(_, items)| items.len())
            .sum::<usize>()
            + usize::from(self.verify.as_ref().is_some_and(|(code, _)| *code != 0))
    }

    /// The properties that broke, each with how often, in one line.
    pub(crate) fn verdict(&self) -> String {
        let broken: Vec<String> = self
            .properties()
            .iter()
            .filter(|(_, items)| !items.is_empty())
            .map(|(name, items)| format!("{name}: {}", items.len()))
            .chain(
                self.verify
                    .as_ref()
                    .filter(|(code, _)| *code != 0)
                    .map(|(code, _)| format!("replicron verify exited {code}")),
            )
            .collect();
        if broken.is_empty() {
            "clean".to_string()
        } else {
            broken.join("; ")
        }
    }

    fn summary(&self) -> String {
        let list = |name: &str, items: &[String]| {
            let mut text = format!("{name}: {}", items.len());
            for item in items.iter().take(12) {
                text.push_str(&format!("\n    {item}"));
            }
            if items.len() > 12 {
                text.push_str(&format!("\n    … and {} more", items.len() - 12));
            }
            text
        };
        let mut text = format!("{} instants due, {} bodies ran", self.instants, self.bodies);
        for (name, items) in self.properties() {
            text.push('\n');
            text.push_str(&list(name, items));
        }
        text.push_str(&format!(
            "\nnot run inside fault windows, accounted: {:?}",
            self.accounted
        ));
        if let Some((code, out)) = &self.verify {
            text.push_str(&format!("\nreplicron verify exited {code}:\n{out}"));
        }
        text
    }
}

fn ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The bodies of `members` that started while `at_most` others of them
/// were still heard from (a body is heard from its start to the last line
/// it wrote), each named with those it ran beside; `bound` names the job
/// or the limit.
fn too_many_at_once(bound: &str, members: &[&str], at_most: usize, bodies: &[Body]) -> Vec<String> {
    let mut list: Vec<&Body> = bodies
        .iter()
        .filter(|b| members.contains(&b.job.as_str()))
        .collect();
    list.sort_by_key(|b| b.start_ns);
    let name = |b: &Body| {
        format!(
            "{} {} (attempt {}, {} fence {})",
            b.job,
            ms(b.instant),
            b.attempt,
            b.instance,
            b.fence
        )
    };
    let mut found = Vec::new();
    let mut heard: Vec<&Body> = Vec::new();
    for body in list {
        heard.retain(|before| before.last_ns > body.start_ns);
        if heard.len() >= at_most {
            found.push(format!(
                "{bound} (at most {at_most}): {} started while {} ran on",
                name(body),
                heard
                    .iter()
                    .map(|before| format!(
                        "{} for {} ms",
                        name(before),
                        (before.last_ns - body.start_ns) / 1_000_000
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        heard.push(body);
    }
    found
}

/// When the checker looks: the instants from `from` to `to` are judged,
/// `stop` is when the replicas were told to stop, and `windows` are the
/// faults' spans with their aftermath.
#[derive(Clone, Copy)]
struct Timeline<'w> {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    stop: DateTime<Utc>,
    windows: &'w [(DateTime<Utc>, DateTime<Utc>)],
}

/// Holds the bodies and the history against each other and the schedule.
fn check(
    jobs: &[CampaignJob],
    dependents: &[Dependent],
    bodies: &[Body],
    rows: &[Row],
    timeline: Timeline,
) -> Findings {
    let Timeline {
        from,
        to,
        stop,
        windows,
    } = timeline;
    let mut found = Findings {
        bodies: bodies.len(),
        ..Findings::default()
    };
    let ns = |t: DateTime<Utc>| t.timestamp_nanos_opt().unwrap_or(0);
    let at_ns = |n: i64| DateTime::from_timestamp_nanos(n);
    // Duplicates: one attempt of one instant started twice, or an instant
    // run under two leases.
    let mut by_attempt: BTreeMap<(&str, DateTime<Utc>, i32), Vec<&Body>> = BTreeMap::new();
    // The leases (fence and replica) each instant ran under.
    type Leases<'b> = BTreeSet<(i64, &'b str)>;
    let mut fences: BTreeMap<(&str, DateTime<Utc>), Leases> = BTreeMap::new();
    for body in bodies {
        by_attempt
            .entry((&body.job, body.instant, body.attempt))
            .or_default()
            .push(body);
        fences
            .entry((&body.job, body.instant))
            .or_default()
            .insert((body.fence, &body.instance));
    }
    for ((job, instant, attempt), started) in &by_attempt {
        if started.len() > 1 {
            found.duplicates.push(format!(
                "{job} {} attempt {attempt} started {} times: {:?}",
                ms(*instant),
                started.len(),
                started
                    .iter()
                    .map(|b| format!(
                        "{} run {} fence {} at {}",
                        b.instance,
                        b.run_id,
                        b.fence,
                        ms(at_ns(b.start_ns))
                    ))
                    .collect::<Vec<_>>()
            ));
        }
    }
    let reruns: BTreeSet<&str> = jobs
        .iter()
        .filter(|job| job.reruns)
        .map(|job| job.name.as_str())
        .collect();
    for ((job, instant), leases) in &fences {
        if leases.len() > 1 {
            if reruns.contains(job)
                && let Err(why) = reran(job, *instant, leases, bodies, rows)
            {
                found.duplicates.push(why);
            } else if !reruns.contains(job) {
                found.duplicates.push(format!(
                    "{job} {} ran under {} leases: {leases:?}",
                    ms(*instant),
                    leases.len()
                ));
            }
        }
    }
    // Early starts, by the real clock the database also reads.
    for body in bodies {
        if body.start_ns < ns(body.instant) {
            found.early.push(format!(
                "{} {} started {} ms early on {}",
                body.job,
                ms(body.instant),
                (ns(body.instant) - body.start_ns) / 1_000_000,
                body.instance
            ));
        }
    }
    // At once: by the bodies' own records (from a body's start to the last
    // line it wrote), no more of a job's bodies than its policy allows,
    // nor of a limit's jobs than the limit's slots.
    let mut bounds: Vec<(String, Vec<&str>, usize)> = jobs
        .iter()
        .map(|job| (job.name.clone(), vec![job.name.as_str()], job.at_once()))
        .chain(
            dependents
                .iter()
                .map(|d| (d.child.to_string(), vec![d.child], 1)),
        )
        .collect();
    let limited: Vec<&str> = jobs
        .iter()
        .filter(|job| job.limited)
        .map(|job| job.name.as_str())
        .collect();
    if !limited.is_empty() {
        bounds.push((format!("limit {}", LIMIT.0), limited, LIMIT.1));
    }
    for (bound, members, at_most) in &bounds {
        found
            .too_many_at_once
            .extend(too_many_at_once(bound, members, *at_most, bodies));
    }
    // Every row ended, and every body has its row.
    for row in rows {
        if row.status == "running" {
            found.left_running.push(format!(
                "{} {} attempt {} run {} on {}",
                row.job,
                ms(row.scheduled_at.and_utc()),
                row.attempt,
                row.id,
                row.instance
            ));
        }
    }
    let by_id: BTreeMap<i64, &Row> = rows.iter().map(|r| (r.id, r)).collect();
    for body in bodies {
        let matches = by_id.get(&body.run_id).is_some_and(|row| {
            row.job == body.job
                && row.scheduled_at.and_utc() == body.instant
                && row.attempt == body.attempt
                && row.fence == body.fence
        });
        if !matches {
            found.unrecorded.push(format!(
                "{} {} attempt {} run {} fence {} on {}: {:?}",
                body.job,
                ms(body.instant),
                body.attempt,
                body.run_id,
                body.fence,
                body.instance,
                by_id.get(&body.run_id)
            ));
        }
    }
    // Each instant due: run, or accounted for.
    for job in jobs {
        let lease = TimeDelta::seconds(job.lease_s as i64);
        let ran: BTreeSet<DateTime<Utc>> = bodies
            .iter()
            .filter(|b| b.job == job.name)
            .map(|b| b.instant)
            .collect();
        let recorded: BTreeMap<DateTime<Utc>, Vec<&str>> = rows
            .iter()
            .filter(|r| r.job == job.name)
            .fold(BTreeMap::new(), |mut map, r| {
                map.entry(r.scheduled_at.and_utc())
                    .or_insert_with(Vec::new)
                    .push(r.status.as_str());
                map
            });
        // What held the job's lease, by its history: a run from its first
        // attempt's start to its last attempt's end (a retry's backoff
        // included); an attempt whose end is not known (abandoned) until its
        // lease could have ended.
        let spans: Vec<(DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)> = rows
            .iter()
            .filter(|r| r.job == job.name && r.attempt > 0)
            .fold(
                BTreeMap::<DateTime<Utc>, (DateTime<Utc>, DateTime<Utc>)>::new(),
                |mut runs, r| {
                    let start = r.started_at.and_utc();
                    let end = match r.finished_at {
                        Some(end) => end.and_utc(),
                        None => r.confirmed_at.unwrap_or(r.started_at).and_utc().max(start) + lease,
                    };
                    let span = runs.entry(r.scheduled_at.and_utc()).or_insert((start, end));
                    span.0 = span.0.min(start);
                    span.1 = span.1.max(end);
                    runs
                },
            )
            .into_iter()
            .map(|(instant, (start, end))| (instant, start, end))
            .chain(bodies.iter().filter(|b| b.job == job.name).map(|b| {
                (
                    b.instant,
                    at_ns(b.start_ns),
                    at_ns(b.last_ns) + TimeDelta::milliseconds(300),
                )
            }))
            // A run that may wait holds the job from its instant on.
            .map(|(instant, start, end)| {
                let start = if job.waits() {
                    start.min(instant)
                } else {
                    start
                };
                (instant, start, end)
            })
            .collect();
        let in_window = |t: DateTime<Utc>| windows.iter().any(|(a, b)| *a <= t && t <= *b);
        let going_at = |t: DateTime<Utc>| {
            spans
                .iter()
                .filter(move |(_, start, end)| *start <= t && t <= *end)
                .map(|(instant, _, _)| *instant)
        };
        // The runs a fault pushed late: its instant fell in a fault window,
        // or it started late while a run the fault pushed held the job (a
        // slow job's backlog after a stall drains a run at a time, past the
        // window). An instant such a run overran is the fault's doing.
        let mut by_instant: Vec<(DateTime<Utc>, DateTime<Utc>)> = spans
            .iter()
            .map(|(instant, start, _)| (*instant, *start))
            .collect();
        by_instant.sort();
        let mut pushed: BTreeSet<DateTime<Utc>> = BTreeSet::new();
        for (instant, start) in by_instant {
            if in_window(instant)
                || (start > instant + TimeDelta::seconds(1)
                    && going_at(instant).any(|held| held < instant && pushed.contains(&held)))
            {
                pushed.insert(instant);
            }
        }
        let first = from.timestamp() + (job.offset - from.timestamp()).rem_euclid(job.period);
        let mut t = first;
        while t <= to.timestamp() {
            let instant = DateTime::from_timestamp(t, 0).expect("instant");
            t += job.period;
            found.instants += 1;
            if ran.contains(&instant) {
                continue;
            }
            // Every run it may have beside it held the job: an overrun.
            let busy = job.waits()
                && going_at(instant)
                    .filter(|held| *held < instant)
                    .collect::<BTreeSet<_>>()
                    .len()
                    >= job.at_once();
            let explained = in_window(instant)
                || busy
                || going_at(instant).any(|held| held < instant && pushed.contains(&held));
            if busy
                && !in_window(instant)
                && recorded
                    .get(&instant)
                    .is_some_and(|statuses| statuses.contains(&"missed"))
            {
                found.missed_while_busy.push(format!(
                    "{} {} recorded missed while its runs of {} held it",
                    job.name,
                    ms(instant),
                    going_at(instant)
                        .filter(|held| *held < instant)
                        .map(ms)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                continue;
            }
            let how = match recorded.get(&instant) {
                Some(statuses) => statuses.join("+"),
                None if going_at(instant).next().is_some() => "overrun".to_string(),
                None => {
                    found.silent.push(format!("{} {}", job.name, ms(instant)));
                    "nothing".to_string()
                }
            };
            if explained {
                *found.accounted.entry(how).or_default() += 1;
            } else {
                found
                    .unexplained
                    .push(format!("{} {} ({how})", job.name, ms(instant)));
            }
        }
    }
    found
        .lost_waiters
        .extend(lost_waiters(jobs, bodies, rows, from, stop, windows));
    check_dependents(&mut found, dependents, bodies, rows, from, to, windows);
    found
}

/// Whether the bodies of `job`'s `instant`, run under `leases`, were each
/// an abandoned run followed by its rerun (`on_abandon = "rerun"`): by
/// fence, each lease's last attempt ended (it was marked `abandoned`, and
/// a holder that was cut off, not dead, may have recorded its end over
/// the mark since), the next lease's first attempt is the one after it,
/// and its first body started only after every body of the lease before
/// it was last heard from: never two bodies at once. `Err` says what
/// broke.
fn reran(
    job: &str,
    instant: DateTime<Utc>,
    leases: &BTreeSet<(i64, &str)>,
    bodies: &[Body],
    rows: &[Row],
) -> Result<(), String> {
    let fences: BTreeSet<i64> = leases.iter().map(|(fence, _)| *fence).collect();
    let of = |fence: i64| -> Vec<&Row> {
        rows.iter()
            .filter(|r| r.job == job && r.scheduled_at.and_utc() == instant && r.fence == fence)
            .collect()
    };
    let bodies_of = |fence: i64| -> Vec<&Body> {
        bodies
            .iter()
            .filter(|b| b.job == job && b.instant == instant && b.fence == fence)
            .collect()
    };
    let fences: Vec<i64> = fences.into_iter().collect();
    for pair in fences.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        let said = |what: &str| {
            format!(
                "{job} {} ran under {} leases, fences {before} then {after}: {what}; leases {leases:?}",
                ms(instant),
                leases.len()
            )
        };
        let last = of(before).into_iter().max_by_key(|r| r.attempt);
        let Some(last) = last.filter(|r| r.status != "running") else {
            return Err(said(&format!(
                "its last attempt under fence {before} was not abandoned: {last:?}"
            )));
        };
        let first = of(after).into_iter().min_by_key(|r| r.attempt);
        if first.is_none_or(|r| r.attempt != last.attempt + 1) {
            return Err(said(&format!(
                "the rerun's first attempt is not {}: {first:?}",
                last.attempt + 1
            )));
        }
        let heard = bodies_of(before).iter().map(|b| b.last_ns).max();
        let started = bodies_of(after).iter().map(|b| b.start_ns).min();
        if let (Some(heard), Some(started)) = (heard, started)
            && started <= heard
        {
            return Err(said(&format!(
                "the rerun started {} ms before the abandoned body was last heard from",
                (heard - started) / 1_000_000
            )));
        }
    }
    Ok(())
}

/// For a `queue` or `replace` job: the instants that came while one of its
/// runs ran, outside every fault's window and before the replicas were
/// told to stop, that should have waited for it (the first after its
/// start, unless an instant between the run's own and that one, due while
/// the run started late, ran or was recorded: it took the place) and were
/// neither run nor recorded.
fn lost_waiters(
    jobs: &[CampaignJob],
    bodies: &[Body],
    rows: &[Row],
    from: DateTime<Utc>,
    stop: DateTime<Utc>,
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Vec<String> {
    let mut found = Vec::new();
    for job in jobs
        .iter()
        .filter(|j| matches!(j.overlap, Some("queue" | "replace")))
    {
        let ran: BTreeSet<DateTime<Utc>> = bodies
            .iter()
            .filter(|b| b.job == job.name)
            .map(|b| b.instant)
            .collect();
        let recorded: BTreeSet<DateTime<Utc>> = rows
            .iter()
            .filter(|r| r.job == job.name)
            .map(|r| r.scheduled_at.and_utc())
            .collect();
        for run in bodies.iter().filter(|b| b.job == job.name) {
            let start = DateTime::from_timestamp_nanos(run.start_ns).max(run.instant);
            let end = DateTime::from_timestamp_nanos(run.last_ns);
            let quiet = !windows
                .iter()
                .any(|(a, b)| *a <= end + TimeDelta::seconds(1) && run.instant <= *b);
            // The first instant of the job after the run's start.
            let offset = (job.offset - start.timestamp() - 1).rem_euclid(job.period);
            let Some(next) = DateTime::from_timestamp(start.timestamp() + 1 + offset, 0) else {
                continue;
            };
            // A run that started late (an overloaded host) found a backlog
            // of its job's instants already due: one of those took the
            // single place to wait, and the instants after it are overruns.
            let since = run.instant + TimeDelta::milliseconds(1);
            if !quiet
                || next < from
                || next > end
                || next >= stop - TimeDelta::milliseconds(500)
                || ran.range(since..=next).next().is_some()
                || recorded.range(since..=next).next().is_some()
            {
                continue;
            }
            found.push(format!(
                "{} {} came while {} ran ({} from {} to {}), and was neither run nor recorded",
                job.name,
                ms(next),
                ms(run.instant),
                run.instance,
                ms(start),
                ms(end)
            ));
        }
    }
    found
}

/// Each dependent job against its parents: it ran at most once for each
/// instant at which every parent's last attempt ended as its `on` says,
/// never for another instant, and never before its parents' bodies of that
/// instant ended; outside every fault's window, it ran for each such
/// instant.
fn check_dependents(
    found: &mut Findings,
    dependents: &[Dependent],
    bodies: &[Body],
    rows: &[Row],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    windows: &[(DateTime<Utc>, DateTime<Utc>)],
) {
    let in_window = |t: DateTime<Utc>| windows.iter().any(|(a, b)| *a <= t && t <= *b);
    for dependent in dependents {
        let child = dependent.child;
        // Each parent's endings: instant → its last attempt's status and end.
        type Ending<'r> = (i32, &'r str, Option<DateTime<Utc>>);
        let endings: Vec<BTreeMap<DateTime<Utc>, Ending>> = dependent
            .parents
            .iter()
            .map(|parent| {
                rows.iter().filter(|r| r.job == *parent).fold(
                    BTreeMap::new(),
                    |mut map: BTreeMap<DateTime<Utc>, Ending>, r| {
                        let ending = (
                            r.attempt,
                            r.status.as_str(),
                            r.finished_at.map(|t| t.and_utc()),
                        );
                        let last = map.entry(r.scheduled_at.and_utc()).or_insert(ending);
                        if r.attempt >= last.0 {
                            *last = ending;
                        }
                        map
                    },
                )
            })
            .collect();
        let how_ended = |instant: &DateTime<Utc>| {
            dependent
                .parents
                .iter()
                .zip(&endings)
                .map(|(parent, ending)| {
                    let status = ending.get(instant).map_or("nothing", |(_, s, _)| *s);
                    format!("{parent} {status}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        // The instants it is due at: instant → when its last parent ended.
        let due: BTreeMap<DateTime<Utc>, DateTime<Utc>> = endings[0]
            .keys()
            .filter_map(|instant| {
                let mut ended = *instant;
                for ending in &endings {
                    let (_, status, end) = ending.get(instant)?;
                    if !dependent.starts_on(status) {
                        return None;
                    }
                    ended = ended.max((*end)?);
                }
                Some((*instant, ended))
            })
            .collect();
        let parent_ends: BTreeMap<DateTime<Utc>, i64> = bodies
            .iter()
            .filter(|b| dependent.parents.contains(&b.job.as_str()))
            .fold(BTreeMap::new(), |mut ends, b| {
                let end = ends.entry(b.instant).or_insert(b.last_ns);
                *end = (*end).max(b.last_ns);
                ends
            });
        let children: Vec<&Body> = bodies.iter().filter(|b| b.job == child).collect();
        for body in &children {
            if !due.contains_key(&body.instant) {
                found.unwarranted.push(format!(
                    "{child} {} ran ({} run {}), though its parents ended: {} (it runs on {:?})",
                    ms(body.instant),
                    body.instance,
                    body.run_id,
                    how_ended(&body.instant),
                    dependent.on
                ));
            }
            if let Some(end) = parent_ends.get(&body.instant)
                && body.start_ns < *end
            {
                found.early.push(format!(
                    "{child} {} started {} ms before its parents' runs of it ended",
                    ms(body.instant),
                    (end - body.start_ns) / 1_000_000
                ));
            }
        }
        let ran: BTreeSet<DateTime<Utc>> = children.iter().map(|b| b.instant).collect();
        let recorded: BTreeMap<DateTime<Utc>, Vec<&str>> = rows
            .iter()
            .filter(|r| r.job == child)
            .fold(BTreeMap::new(), |mut map, r| {
                map.entry(r.scheduled_at.and_utc())
                    .or_insert_with(Vec::new)
                    .push(r.status.as_str());
                map
            });
        // What held the child's lease: its runs, from start to end.
        let spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = rows
            .iter()
            .filter(|r| r.job == child && r.attempt > 0)
            .map(|r| {
                let start = r.started_at.and_utc();
                let end = r.finished_at.map_or_else(
                    || {
                        r.confirmed_at.unwrap_or(r.started_at).and_utc().max(start)
                            + TimeDelta::seconds(3)
                    },
                    |end| end.and_utc(),
                );
                (start, end)
            })
            .collect();
        for (instant, ended) in &due {
            if *instant < from || *instant > to {
                continue;
            }
            found.instants += 1;
            if ran.contains(instant) {
                continue;
            }
            let overrun = spans
                .iter()
                .any(|(start, end)| start <= ended && ended <= end);
            let how = match recorded.get(instant) {
                Some(statuses) => statuses.join("+"),
                None if overrun => "overrun".to_string(),
                None => "nothing".to_string(),
            };
            if in_window(*instant) || in_window(*ended) || overrun {
                if how == "nothing" {
                    found.silent.push(format!("{child} {}", ms(*instant)));
                }
                *found.accounted.entry(how).or_default() += 1;
            } else {
                found.children_missing.push(format!(
                    "{child} {} not run ({how}), though its parents ended: {}",
                    ms(*instant),
                    how_ended(instant)
                ));
            }
        }
    }
}

/// One replica's place: its proxy, config and current process.
struct Slot {
    base: String,
    generation: u32,
    config: PathBuf,
    /// One per database node: the replica reaches the database only
    /// through them.
    proxies: Vec<Proxy>,
    replica: Option<Replica>,
    frozen: bool,
}

impl Slot {
    fn id(&self) -> String {
        if self.generation == 0 {
            self.base.clone()
        } else {
            format!("{}-{}", self.base, self.generation)
        }
    }

    fn start(&mut self, binary: &Path, skew_ms: Option<i64>) {
        let skew = skew_ms.map(|ms| format!("{:+.3}", ms as f64 / 1000.0));
        if skew.is_some() {
            libfaketime().expect("libfaketime is installed");
        }
        self.replica = Some(Replica::start_binary(
            binary,
            &self.config,
            &self.id(),
            skew.as_deref(),
            &[("RUST_LOG", "info")],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut replica) = self.replica.take() {
            replica.signal(Signal::SIGKILL);
            let _ = replica.wait_exit(Duration::from_secs(10));
        }
        self.frozen = false;
    }
}

/// Runs one campaign and returns what it found; panics only if the
/// campaign itself cannot run.
pub(crate) fn run(plan: &Plan) -> Option<Findings> {
    let mut database = Database::start(plan.backend)?;
    let dir = tempfile::tempdir().expect("temp dir");
    let name = "campaign";
    database.create(name);
    let out = dir.path().join("bodies.txt");
    let jobs = campaign_jobs(plan.features);
    let dependents = dependents(plan.features);
    let file = job_file(&jobs, &dependents, &out);
    let binary = plan.binary.clone().unwrap_or_else(binary);
    let nodes = database.addresses();
    let faults = draw(plan.seed, plan.replicas, nodes.len(), plan.faults_for);
    eprintln!(
        "campaign on {:?}: seed {}, {} replicas, {:?} of faults then {:?} quiet, {} faults:",
        plan.backend,
        plan.seed,
        plan.replicas,
        plan.faults_for,
        plan.quiet_for,
        faults.len()
    );
    for fault in &faults {
        eprintln!("  {fault}");
    }
    let direct = dir.path().join("direct.toml");
    std::fs::write(
        &direct,
        format!("[database]\nurl = {:?}\n\n{file}", database.url(name, None)),
    )
    .expect("write config");
    let mut slots: Vec<Slot> = (0..plan.replicas)
        .map(|i| {
            // Its own node first (replicas spread over the nodes).
            let proxies: Vec<Proxy> = (0..nodes.len())
                .map(|k| Proxy::start(nodes[(i + k) % nodes.len()]))
                .collect();
            let ports: Vec<u16> = proxies.iter().map(|p| p.port).collect();
            let config = dir.path().join(format!("r{}.toml", i + 1));
            std::fs::write(
                &config,
                format!(
                    "[database]\nurl = {:?}\n\n{file}",
                    database.url(name, Some(&ports))
                ),
            )
            .expect("write config");
            Slot {
                base: format!("r{}", i + 1),
                generation: 0,
                config,
                proxies,
                replica: None,
                frozen: false,
            }
        })
        .collect();
    for slot in &mut slots {
        slot.start(&binary, None);
    }
    for slot in &slots {
        if let Some(replica) = &slot.replica {
            replica.wait_for_log("replicron started", Duration::from_secs(60));
        }
    }
    std::thread::sleep(Duration::from_secs(2));

    // The timeline: every fault's start and end, in order.
    enum Step {
        Begin(usize),
        /// A slow restart's start of the replica, within the fault.
        Restart(usize),
        /// A slow restart's links turning slow.
        Slow(usize),
        End(usize),
    }
    let mut steps: Vec<(Duration, Step)> = Vec::new();
    for (i, fault) in faults.iter().enumerate() {
        steps.push((fault.at, Step::Begin(i)));
        match fault.kind {
            Kind::SlowRestart { down, lag, .. } => {
                steps.push((fault.at + down, Step::Restart(i)));
                steps.push((fault.at + down + lag, Step::Slow(i)));
            }
            Kind::LockedRestart { down } => steps.push((fault.at + down, Step::Restart(i))),
            _ => {}
        }
        steps.push((fault.at + fault.span, Step::End(i)));
    }
    steps.sort_by_key(|(at, step)| (*at, matches!(step, Step::Begin(_))));
    let started = Instant::now();
    let started_utc = Utc::now();
    let mut windows: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let mut stalls = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (at, step) in steps {
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        match step {
            Step::Begin(i) => {
                let fault = &faults[i];
                *counts.entry(fault.kind.name()).or_default() += 1;
                let begin = Utc::now();
                let end =
                    begin + TimeDelta::from_std(fault.span + fault.kind.aftermath()).expect("span");
                windows.push((begin - TimeDelta::seconds(1), end));
                match (&fault.kind, fault.target) {
                    (Kind::Kill { .. }, Some(r)) => slots[r].kill(),
                    (Kind::SlowRestart { .. }, Some(r)) => slots[r].kill(),
                    (Kind::LockedRestart { .. }, Some(r)) => {
                        slots[r].kill();
                        stalls.push(database.lock_history(name, fault.span));
                    }
                    (Kind::Freeze, Some(r)) => {
                        if let Some(replica) = &slots[r].replica {
                            replica.signal(Signal::SIGSTOP);
                            slots[r].frozen = true;
                        }
                    }
                    (Kind::Partition { blackhole: false }, Some(r)) => {
                        slots[r].proxies.iter().for_each(Proxy::cut);
                    }
                    (Kind::Partition { blackhole: true }, Some(r)) => {
                        slots[r].proxies.iter().for_each(Proxy::blackhole);
                    }
                    (Kind::Stall, None) => {
                        stalls.push(database.stall(name, fault.node, fault.span));
                    }
                    (Kind::Crash, None) => database.crash(fault.node),
                    _ => unreachable!("drawn with its target"),
                }
            }
            Step::Restart(i) => {
                if let Some(r) = faults[i].target {
                    slots[r].start(&binary, None);
                }
            }
            Step::Slow(i) => {
                if let (Kind::SlowRestart { delay_ms, .. }, Some(r)) =
                    (&faults[i].kind, faults[i].target)
                {
                    let delay = Duration::from_millis(*delay_ms);
                    slots[r].proxies.iter().for_each(|p| p.slow(delay));
                }
            }
            Step::End(i) => {
                let fault = &faults[i];
                match (&fault.kind, fault.target) {
                    (
                        Kind::Kill {
                            new_id, skew_ms, ..
                        },
                        Some(r),
                    ) => {
                        if *new_id {
                            slots[r].generation += 1;
                        }
                        slots[r].start(&binary, *skew_ms);
                    }
                    (Kind::Freeze, Some(r)) => {
                        if let Some(replica) = &slots[r].replica {
                            replica.signal(Signal::SIGCONT);
                        }
                        slots[r].frozen = false;
                    }
                    (Kind::Partition { .. } | Kind::SlowRestart { .. }, Some(r)) => {
                        slots[r].proxies.iter().for_each(Proxy::restore);
                    }
                    // Its lock ends by itself.
                    (Kind::LockedRestart { .. }, Some(_)) => {}
                    (Kind::Stall, None) => {}
                    (Kind::Crash, None) => database.recover(fault.node),
                    _ => unreachable!("drawn with its target"),
                }
            }
        }
    }
    for stall in stalls {
        let _ = stall.join();
    }
    let faults_ended = Utc::now();
    std::thread::sleep(plan.quiet_for);
    let stopped_at = Utc::now();

    // Every replica stops in good order.
    let mut logs = String::new();
    let mut bad_exits = Vec::new();
    for slot in &mut slots {
        if let Some(replica) = &slot.replica {
            replica.signal(Signal::SIGTERM);
        }
    }
    for slot in &mut slots {
        let id = slot.id();
        if let Some(mut replica) = slot.replica.take() {
            match replica.wait_exit(Duration::from_secs(40)) {
                Some(status) if status.success() => {}
                other => bad_exits.push(format!("{id}: {other:?}")),
            }
        }
    }
    // Every incarnation's log, not only the last ones': a replica killed
    // and started under a new id logs to a file of its own.
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("replica-") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    for file in files {
        let id = file
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .trim_start_matches("replica-")
            .to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        logs.push_str(&format!("--- log of {id}\n{text}"));
    }
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "target/campaign-{:?}-{}{}.log",
        plan.backend,
        plan.seed,
        if plan.features { "-features" } else { "" }
    ));
    let _ = std::fs::write(&saved, &logs);
    let panics = logs.lines().filter(|l| l.contains("panicked")).count();
    let errors = logs.lines().filter(|l| l.contains("\"ERROR\"")).count();

    let mut conn = raw_connect(&database.url(name, None));
    let rows = read_history(&mut conn);
    // The history beside the logs, one row a line, to read a failure by.
    let history: String = rows.iter().map(|row| format!("{row:?}\n")).collect();
    let _ = std::fs::write(saved.with_extension("history"), history);
    let bodies = read_bodies(&out);
    let from = crate::database_time::second(started_utc) + TimeDelta::seconds(1);
    // The check for missed instants records an instant 10 s (its
    // missed_after) after it, every 5 s.
    let to = crate::database_time::second(stopped_at) - TimeDelta::seconds(20);
    let mut found = check(
        &jobs,
        &dependents,
        &bodies,
        &rows,
        Timeline {
            from,
            to,
            stop: stopped_at,
            windows: &windows,
        },
    );
    // An older build may have no `verify`: then only the checker judges.
    let has_verify = std::process::Command::new(&binary)
        .args(["verify", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_verify {
        let output = std::process::Command::new(&binary)
            .args(["verify", "--config"])
            .arg(&direct)
            .args(["--from", &ms(from), "--to", &ms(to)])
            .env_remove("REPLICRON_DATABASE_URL")
            .output()
            .expect("run replicron verify");
        let (stdout, stderr) = crate::support::text(&output);
        found.verify = Some((
            output.status.code().unwrap_or(-1),
            format!("{stdout}{stderr}"),
        ));
    }
    let by_kind: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    if panics > 0 {
        found
            .duplicates
            .push(format!("{panics} panics in the logs"));
    }
    if !bad_exits.is_empty() {
        found.left_running.push(format!(
            "replicas that did not stop in good order: {bad_exits:?}"
        ));
    }
    let report = format!(
        "campaign on {:?}{}, seed {}: faults from {} to {} ({}), checked {} to {}; {} rows; {} ERROR lines, {} panics; graceful stops that failed: {:?}\n{}\n(replica logs in {})\nverdict: {}\n",
        plan.backend,
        if plan.features {
            " with the feature jobs"
        } else {
            ""
        },
        plan.seed,
        ms(started_utc),
        ms(faults_ended),
        by_kind.join(", "),
        ms(from),
        ms(to),
        rows.len(),
        errors,
        panics,
        bad_exits,
        found.summary(),
        saved.display(),
        found.verdict()
    );
    eprintln!("{report}");
    // Beside the logs, for scripts/test to print (a test's own output is
    // shown only when it fails).
    let _ = std::fs::write(saved.with_extension("txt"), &report);
    drop(slots);
    Some(found)
}

/// Runs `plan` and fails on any violation.
pub(crate) fn assert_clean(plan: &Plan) {
    let Some(found) = run(plan) else {
        return;
    };
    assert_eq!(
        found.violations(),
        0,
        "the campaign (seed {}) found violations:\n{}",
        plan.seed,
        found.summary()
    );
}

/// The campaign of the suite: 4 replicas on a private MariaDB, about 100 s
/// of faults and 35 s of quiet, with a fixed seed.
#[test]
#[cfg_attr(
    replicron_no_private_mariadb,
    ignore = "needs Debian's mariadb-server and rsync"
)]
#[cfg_attr(replicron_no_faketime, ignore = "needs Debian's faketime")]
fn a_randomized_fault_campaign_runs_every_instant_once() {
    let _heavy = crate::support::heavy();
    assert_clean(&Plan {
        backend: Backend::Mariadb,
        seed: 20_261_125,
        replicas: 4,
        faults_for: Duration::from_secs(100),
        quiet_for: Duration::from_secs(35),
        features: false,
        binary: None,
    });
}

/// A longer campaign, run by `scripts/torture`: its backend, length and
/// seed come from `REPLICRON_TORTURE_BACKEND` (`mariadb`, `postgres`),
/// `REPLICRON_TORTURE_MINUTES`, `REPLICRON_TORTURE_SEED` and
/// `REPLICRON_TORTURE_REPLICAS`; `REPLICRON_TORTURE_FEATURES=1` adds the
/// feature jobs; `REPLICRON_TORTURE_BINARY` runs another build's replicas.
#[test]
#[ignore = "long: run by scripts/torture"]
fn torture() {
    let var = |name: &str| std::env::var(name).ok();
    let backend = match var("REPLICRON_TORTURE_BACKEND").as_deref() {
        None | Some("mariadb") => Backend::Mariadb,
        Some("postgres") => Backend::Postgres,
        Some("galera") => Backend::Galera,
        Some(other) => {
            panic!("REPLICRON_TORTURE_BACKEND={other}: expected mariadb, postgres or galera")
        }
    };
    let minutes: f64 = var("REPLICRON_TORTURE_MINUTES").map_or(3.0, |m| {
        m.parse().expect("REPLICRON_TORTURE_MINUTES is a number")
    });
    let seed: u64 = var("REPLICRON_TORTURE_SEED").map_or(20_261_125, |s| {
        s.parse().expect("REPLICRON_TORTURE_SEED is a number")
    });
    let total = Duration::from_secs_f64(minutes * 60.0);
    let quiet = Duration::from_secs(40);
    let replicas: usize = var("REPLICRON_TORTURE_REPLICAS").map_or(4, |n| {
        n.parse().expect("REPLICRON_TORTURE_REPLICAS is a number")
    });
    let plan = Plan {
        backend,
        seed,
        replicas,
        faults_for: total.saturating_sub(quiet).max(Duration::from_secs(20)),
        quiet_for: quiet,
        features: var("REPLICRON_TORTURE_FEATURES").is_some_and(|v| v == "1"),
        binary: var("REPLICRON_TORTURE_BINARY").map(PathBuf::from),
    };
    assert_clean(&plan);
}

/// F2's sequence, played on purpose, `rounds` times, by `binary`'s
/// replicas "a" and "b" on a private MariaDB: "a" runs some jobs' instant
/// S and ends them; it is killed and started again under its own id at
/// once, while the history table takes no write (a backup's lock) until
/// after S + 1. Its catch-up claims S, whose rows still name "a" and S;
/// its start record waits; "b" claims S + 1 meanwhile. Returns the
/// instants whose bodies started more than once, and the rounds in which
/// "a" had won an instant at S (those that could go wrong).
pub(crate) fn restart_into_a_locked_history(
    binary: &Path,
    rounds: usize,
) -> Option<(Vec<String>, usize)> {
    let server = Server::start(&[])?;
    let database = Database::Mariadb(server);
    let dir = tempfile::tempdir().expect("temp dir");
    let name = "locked";
    database.create(name);
    let out = dir.path().join("bodies.txt");
    let jobs: Vec<CampaignJob> = (0..4).map(|n| tick(n, Some("5s"))).collect();
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {:?}\n\n{}",
            database.url(name, None),
            job_file(&jobs, &[], &out)
        ),
    )
    .expect("write config");
    let start =
        |id: &str| Replica::start_binary(binary, &config, id, None, &[("RUST_LOG", "info")]);
    let mut a = start("a");
    let b = start("b");
    a.wait_for_log("replicron started", Duration::from_secs(60));
    b.wait_for_log("replicron started", Duration::from_secs(60));
    let ends_of_a = |second: i64| {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .filter(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 3
                    && f[0] == "end"
                    && f[3] == "a"
                    && DateTime::parse_from_rfc3339(f[2]).is_ok_and(|t| t.timestamp() == second)
            })
            .count()
    };
    let mut armed = 0;
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_secs(2));
        // 450 ms into a second: "a"'s runs of that second have ended.
        let now = Utc::now();
        let second = now.timestamp() + 1;
        let at = DateTime::from_timestamp(second, 450_000_000).expect("time");
        std::thread::sleep((at - now).to_std().unwrap_or_default());
        a.signal(Signal::SIGKILL);
        let _ = a.wait_exit(Duration::from_secs(10));
        if ends_of_a(second) > 0 {
            armed += 1;
        }
        let lock = database.lock_history(name, Duration::from_millis(1_200));
        std::thread::sleep(Duration::from_millis(50));
        a = start("a");
        let _ = lock.join();
    }
    std::thread::sleep(Duration::from_secs(3));
    for replica in [&a, &b] {
        replica.signal(Signal::SIGTERM);
    }
    for mut replica in [a, b] {
        let _ = replica.wait_exit(Duration::from_secs(30));
    }
    // Each start's replica, run id and fence, by job and instant.
    let mut starts: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(&out).unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 5 && f[0] == "start" {
            starts
                .entry((f[1].to_string(), f[2].to_string()))
                .or_default()
                .push(format!("{} run {} fence {}", f[3], f[4], f[5]));
        }
    }
    let twice = starts
        .into_iter()
        .filter(|(_, by)| by.len() > 1)
        .map(|((job, instant), by)| format!("{job} {instant} started by {}", by.join(", ")))
        .collect();
    Some((twice, armed))
}

/// A replica restarted under its own id into a locked history table runs
/// no instant twice: its catch-up claim of the instant its predecessor
/// won is not won by the row naming it (F2). `REPLICRON_TORTURE_BINARY`
/// plays it on another build.
#[test]
#[cfg_attr(
    replicron_no_private_mariadb,
    ignore = "needs Debian's mariadb-server and rsync"
)]
fn a_restart_into_a_locked_history_runs_nothing_twice() {
    let _heavy = crate::support::heavy();
    let binary = std::env::var("REPLICRON_TORTURE_BINARY").map_or_else(|_| binary(), PathBuf::from);
    let Some((twice, armed)) = restart_into_a_locked_history(&binary, 5) else {
        return;
    };
    eprintln!(
        "restarts into a locked history: 5, with an instant of the killed replica's: {armed}; \
         instants run twice: {}: {twice:?}",
        twice.len()
    );
    assert!(twice.is_empty(), "instants run twice: {twice:?}");
}

#[test]
fn the_schedule_is_the_seeds() {
    let a = draw(7, 4, 1, Duration::from_secs(120));
    let b = draw(7, 4, 1, Duration::from_secs(120));
    assert_eq!(
        a.iter().map(ToString::to_string).collect::<Vec<_>>(),
        b.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    assert_ne!(
        draw(8, 4, 1, Duration::from_secs(120))
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        a.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    // Every kind is drawn, targets overlap in time, and no fault outlives
    // the faults' span.
    let kinds: BTreeSet<&str> = a.iter().map(|f| f.kind.name()).collect();
    assert!(kinds.len() >= 7, "{kinds:?}");
    assert!(a.iter().all(|f| f.at + f.span <= Duration::from_secs(120)));
    let overlapping = a
        .windows(2)
        .filter(|w| w[1].at < w[0].at + w[0].span)
        .count();
    assert!(overlapping > 0);
}
