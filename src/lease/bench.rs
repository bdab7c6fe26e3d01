//! Lease throughput on one connection: claim+release cycles per second
//! through the lease statements, and the same two statements sent as plain
//! SQL through diesel. A benchmark, not a test: `scripts/bench` runs it per
//! backend beside the database's native client and reports the ratios.
//!
//! `REPLICRON_BENCH_URL=URL REPLICRON_BENCH_SECONDS=3 cargo test --release
//! --all-features --lib lease::bench -- --ignored --nocapture` prints one
//! JSON line per measurement.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use diesel::RunQueryDsl;
use diesel::connection::SimpleConnection;

use crate::db::Backend;
use crate::db::{DbConnection, Pool};
use crate::lease;

/// The first instant: in the past, as a claim's instant must be by the
/// database's clock.
fn base() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2020-01-01T00:00:00Z")
        .map_or(DateTime::<Utc>::UNIX_EPOCH, |t| t.with_timezone(&Utc))
}
/// `next` numbers the instants, across calls: each is claimed once.
fn store(conn: &mut DbConnection, seconds: u64, next: &mut u64) -> (u64, Duration) {
    let lease_for = Duration::from_secs(600);
    let started = Instant::now();
    let mut cycles = 0_u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        *next += 1;
        let instant = base() + TimeDelta::milliseconds(*next as i64);
        let held = lease::claim(conn, "bench-store", "bench", instant, lease_for)
            .expect("claim")
            .won()
            .expect("an uncontended claim wins");
        assert!(lease::release(conn, &held, Duration::ZERO).expect("release"));
        cycles += 1;
    }
    (cycles, started.elapsed())
}

/// The two statements of a cycle as SQL text for `backend`, for instant
/// number `n`.
fn plain_sql(backend: Backend, n: u64) -> (String, String) {
    let t = (base() + TimeDelta::milliseconds(n as i64)).format("%Y-%m-%d %H:%M:%S%.3f");
    match backend {
        Backend::Mysql => (
            format!("UPDATE replicron_locks SET lock_until = UTC_TIMESTAMP(3) + INTERVAL 600000000 MICROSECOND, locked_at = UTC_TIMESTAMP(3), locked_by = 'bench', last_scheduled_at = '{t}', fence = fence + 1 WHERE name = 'bench-plain' AND lock_until <= UTC_TIMESTAMP(3) AND (last_scheduled_at IS NULL OR last_scheduled_at < '{t}') AND '{t}' <= UTC_TIMESTAMP(3)"),
            "UPDATE replicron_locks SET lock_until = GREATEST(UTC_TIMESTAMP(3), locked_at) WHERE name = 'bench-plain' AND locked_by = 'bench'".to_string(),
        ),
        Backend::Postgres => (
            format!("UPDATE replicron_locks SET lock_until = date_trunc('milliseconds', clock_timestamp() AT TIME ZONE 'UTC') + INTERVAL '600 seconds', locked_at = date_trunc('milliseconds', clock_timestamp() AT TIME ZONE 'UTC'), locked_by = 'bench', last_scheduled_at = '{t}', fence = fence + 1 WHERE name = 'bench-plain' AND lock_until <= date_trunc('milliseconds', clock_timestamp() AT TIME ZONE 'UTC') AND (last_scheduled_at IS NULL OR last_scheduled_at < '{t}') AND '{t}' <= date_trunc('milliseconds', clock_timestamp() AT TIME ZONE 'UTC')"),
            "UPDATE replicron_locks SET lock_until = GREATEST(date_trunc('milliseconds', clock_timestamp() AT TIME ZONE 'UTC'), locked_at) WHERE name = 'bench-plain' AND locked_by = 'bench'".to_string(),
        ),
        Backend::Sqlite => (
            format!("UPDATE replicron_locks SET lock_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+600 seconds'), locked_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), locked_by = 'bench', last_scheduled_at = '{t}', fence = fence + 1 WHERE name = 'bench-plain' AND lock_until <= strftime('%Y-%m-%d %H:%M:%f', 'now') AND (last_scheduled_at IS NULL OR last_scheduled_at < '{t}') AND '{t}' <= strftime('%Y-%m-%d %H:%M:%f', 'now')"),
            "UPDATE replicron_locks SET lock_until = max(strftime('%Y-%m-%d %H:%M:%f', 'now'), locked_at) WHERE name = 'bench-plain' AND locked_by = 'bench'".to_string(),
        ),
    }
}

fn plain(conn: &mut DbConnection, backend: Backend, seconds: u64) -> (u64, Duration) {
    let started = Instant::now();
    let mut cycles = 0_u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        let (claim, release) = plain_sql(backend, cycles + 1);
        let won = diesel::sql_query(claim).execute(conn).expect("claim");
        assert_eq!(won, 1, "an uncontended claim wins");
        diesel::sql_query(release).execute(conn).expect("release");
        cycles += 1;
    }
    (cycles, started.elapsed())
}

#[test]
#[ignore = "a benchmark: scripts/bench runs it"]
fn lease_throughput() {
    let url = std::env::var("REPLICRON_BENCH_URL").expect("REPLICRON_BENCH_URL");
    let seconds: u64 = std::env::var("REPLICRON_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let pool = Pool::open(&url, 1).expect("connect");
    pool.migrate().expect("migrate");
    let backend = pool.url().backend();
    let mut conn = pool.get().expect("connection");
    conn.batch_execute("DELETE FROM replicron_locks WHERE name IN ('bench-store', 'bench-plain')")
        .expect("clean");
    lease::ensure_rows(&mut conn, &["bench-store", "bench-plain"]).expect("rows");
    // Warm up both paths (connection, statement caches).
    let mut next = 0;
    store(&mut conn, 1, &mut next);
    let (cycles, took) = store(&mut conn, seconds, &mut next);
    println!(
        "{{\"backend\":\"{backend}\",\"path\":\"store\",\"cycles\":{cycles},\"seconds\":{:.3},\"per_second\":{:.1}}}",
        took.as_secs_f64(),
        cycles as f64 / took.as_secs_f64()
    );
    conn.batch_execute("UPDATE replicron_locks SET last_scheduled_at = NULL, lock_until = '1970-01-01 00:00:00' WHERE name = 'bench-plain'")
        .expect("reset");
    let (cycles, took) = plain(&mut conn, backend, seconds);
    println!(
        "{{\"backend\":\"{backend}\",\"path\":\"plain diesel\",\"cycles\":{cycles},\"seconds\":{:.3},\"per_second\":{:.1}}}",
        took.as_secs_f64(),
        cycles as f64 / took.as_secs_f64()
    );
}
