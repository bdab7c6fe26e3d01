//! Fire precision: how late each per-second instant reaches its callback,
//! for replicron embedded as a library (a `Scheduler` on SQLite: each
//! instant is claimed and recorded before the job's function runs) and, in
//! the same run and process, for tokio-cron-scheduler 0.15 driving the same
//! kind of callback.
//!
//! `cargo bench --bench fire_precision` (60 s, 1 job each). Set
//! `FIRE_SECONDS` and `FIRE_JOBS` to change the window and the job count.
//! With `FIRE_PEER_ONLY=FILE`, only tokio-cron-scheduler runs, and each
//! callback starts the same child a replicron job would (`sh -c` appending
//! `JOB INSTANT START-NS` to FILE), so that `scripts/bench` can compare
//! instant-to-exec lateness with a real replicron daemon in the same run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DurationRound, TimeDelta, Utc};
use tokio_cron_scheduler::{Job, JobScheduler};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Samples = Arc<Mutex<Vec<f64>>>;

fn record(samples: &Samples, late: TimeDelta) {
    let ms = late.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0;
    samples.lock().expect("samples").push(ms);
}

fn summary(name: &str, samples: &Samples, expected: u64) -> String {
    let mut v = samples.lock().expect("samples").clone();
    v.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    format!(
        "| {name} | {}/{expected} | {:.2} | {:.2} | {:.2} | {:.2} |",
        v.len(),
        pick(0.0),
        pick(0.5),
        pick(0.99),
        pick(1.0)
    )
}

/// The child a replicron job would start: it records its own start.
const CHILD: &str = r#"echo "$JOB $INSTANT $(date +%s%N)" >> "$OUT""#;

async fn peer_with_children(
    file: String,
    seconds: u64,
    jobs: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    // Instant to spawn-returned (the child has exec'd), per start: the
    // point at which replicron logs a run's start.
    let spawned: Samples = Arc::default();
    let mut scheduler = JobScheduler::new().await?;
    for n in 0..jobs {
        let (file, spawned) = (file.clone(), spawned.clone());
        scheduler
            .add(Job::new_async("* * * * * *", move |_id, _scheduler| {
                let (file, spawned) = (file.clone(), spawned.clone());
                Box::pin(async move {
                    let now = Utc::now();
                    let instant = now.duration_trunc(TimeDelta::seconds(1)).unwrap_or(now);
                    let child = tokio::process::Command::new("/bin/sh")
                        .args(["-c", CHILD])
                        .env("JOB", format!("peer-{n:02}"))
                        .env(
                            "INSTANT",
                            instant.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                        )
                        .env("OUT", &file)
                        .spawn();
                    record(&spawned, Utc::now() - instant);
                    if let Ok(mut child) = child {
                        let _ = child.wait().await;
                    }
                })
            })?)
            .await?;
    }
    scheduler.start().await?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    scheduler.shutdown().await?;
    let lines: Vec<String> = spawned
        .lock()
        .expect("samples")
        .iter()
        .map(|ms| format!("{ms:.3}"))
        .collect();
    std::fs::write(format!("{file}.spawned"), lines.join("\n") + "\n")?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds = env_or("FIRE_SECONDS", 60);
    let jobs = env_or("FIRE_JOBS", 1);
    if let Ok(file) = std::env::var("FIRE_PEER_ONLY") {
        return peer_with_children(file, seconds, jobs).await;
    }
    let ours: Samples = Arc::default();
    let peer: Samples = Arc::default();

    // Start both on the same second boundary.
    let now = Utc::now();
    let next_second = now.duration_trunc(TimeDelta::seconds(1))? + TimeDelta::seconds(1);
    tokio::time::sleep((next_second - now).to_std()?).await;
    let started = Utc::now();

    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("fire.db").display());
    let mut builder = replicron::Scheduler::builder(url).instance_id("fire");
    for n in 0..jobs {
        let samples = ours.clone();
        builder = builder.job(
            replicron::Job::new(&format!("fire-{n:02}"), "* * * * * *")?.run(move |ctx| {
                record(&samples, Utc::now() - ctx.instant());
                async { Ok::<(), std::convert::Infallible>(()) }
            }),
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ours_task = tokio::spawn(builder.build().await?.run_until(async move {
        let _ = stop_rx.await;
    }));

    let scheduler = JobScheduler::new().await?;
    for _ in 0..jobs {
        let samples = peer.clone();
        scheduler
            .add(Job::new_async("* * * * * *", move |_id, _scheduler| {
                let samples = samples.clone();
                Box::pin(async move {
                    let now = Utc::now();
                    // Its callback is not told the instant: it is the second
                    // the callback falls in, as long as it is under 1 s late.
                    let instant = now.duration_trunc(TimeDelta::seconds(1)).unwrap_or(now);
                    record(&samples, now - instant);
                })
            })?)
            .await?;
    }
    let mut scheduler = scheduler;
    scheduler.start().await?;

    tokio::time::sleep(Duration::from_secs(seconds)).await;
    scheduler.shutdown().await?;
    let _ = stop_tx.send(());
    ours_task.await??;
    let expected = seconds * jobs;
    println!(
        "fire lag over {seconds} s, {jobs} per-second job(s) each, from {}:\n",
        started.to_rfc3339()
    );
    println!("| engine | fires | min ms | median ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|");
    println!("{}", summary("replicron library (SQLite)", &ours, expected));
    println!("{}", summary("tokio-cron-scheduler 0.15", &peer, expected));
    Ok(())
}
