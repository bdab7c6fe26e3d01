//! The library at full speed: one replica of N in-process jobs, each
//! every second, each run an async function that notes when it began.
//!
//! `scripts/bench inprocess` runs three of these processes on one
//! database and counts, per job and instant, the runs all three noted:
//! duplicates, misses, and the start lateness (from the instant to the
//! job's function being entered, on the host's clock).
//!
//! `INPROCESS_URL` (the database), `INPROCESS_JOBS` (N, 1,000),
//! `INPROCESS_SECONDS` (how long to run, 20), `INPROCESS_OUT` (the file
//! each run is appended to as `job instant-seconds lateness-µs`,
//! `inprocess.txt`) and `INPROCESS_INSTANCE` (the replica's id) set it up.

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use replicron::{Job, Scheduler};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

type Noted = Arc<Mutex<Vec<(u32, i64, i64)>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = env_or("INPROCESS_URL", "sqlite://inprocess.db");
    let jobs: u32 = env_or("INPROCESS_JOBS", "1000").parse()?;
    let seconds: u64 = env_or("INPROCESS_SECONDS", "20").parse()?;
    let out = env_or("INPROCESS_OUT", "inprocess.txt");
    let noted: Noted = Arc::new(Mutex::new(Vec::with_capacity(
        jobs as usize * seconds as usize,
    )));
    let mut builder = Scheduler::builder(url.as_str()).pool_size(8);
    if let Ok(id) = std::env::var("INPROCESS_INSTANCE") {
        builder = builder.instance_id(id);
    }
    for n in 0..jobs {
        let noted = noted.clone();
        builder = builder.job(
            Job::new(&format!("job-{n:05}"), "* * * * * *")?.run(move |ctx| {
                let noted = noted.clone();
                async move {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    let instant = ctx.instant();
                    let late = now.as_micros() as i64 - instant.timestamp_micros();
                    if let Ok(mut noted) = noted.lock() {
                        noted.push((n, instant.timestamp(), late));
                    }
                    Ok::<(), std::io::Error>(())
                }
            }),
        );
    }
    let scheduler = builder.build().await?;
    println!("ready");
    std::io::stdout().flush()?;
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(seconds)))
        .await?;
    let noted = std::mem::take(&mut *noted.lock().map_err(|_| "poisoned")?);
    let mut file = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)?,
    );
    for (job, instant, late) in noted {
        writeln!(file, "{job} {instant} {late}")?;
    }
    file.flush()?;
    Ok(())
}
