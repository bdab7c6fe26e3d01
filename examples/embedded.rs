//! A small web service that embeds replicron: run it as several replicas
//! against one database and each job runs once per instant between them.
//!
//! ```sh
//! cargo run --example embedded                      # SQLite: ./embedded.db
//! DATABASE_URL=postgres://… cargo run --example embedded --features postgres
//! ```
//!
//! It serves `GET /` on 127.0.0.1:3000 (`PORT` changes it) with what its
//! jobs did, and runs two jobs: `purge-sessions` every 10 seconds and
//! `daily-report` at 06:00 Berlin time. Ctrl-C stops both the server and
//! the scheduler; a run in progress may finish within the grace.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use replicron::{Job, RunContext, Scheduler};
use tokio::sync::watch;

/// What the service shares between its handlers and its jobs.
#[derive(Default)]
struct App {
    purged: AtomicU64,
    reports: AtomicU64,
}

/// A job's work: here, pretend to delete expired sessions.
async fn purge_sessions(app: Arc<App>, ctx: RunContext) -> Result<(), std::io::Error> {
    // `ctx.fence()` would guard the writes of a job that may outlive its
    // lease: `UPDATE … WHERE fence < ?`. A long job should also stop when
    // told to.
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(200)) => {}
        () = ctx.cancelled() => return Err(std::io::Error::other("stopped before the end")),
    }
    let total = app.purged.fetch_add(1, Ordering::SeqCst) + 1;
    println!(
        "purge for {} (attempt {}, fence {}) on {}: {total} so far",
        ctx.instant(),
        ctx.attempt(),
        ctx.fence(),
        ctx.instance()
    );
    Ok(())
}

async fn status(State(app): State<Arc<App>>) -> String {
    format!(
        "sessions purged by this replica: {}\nreports sent by this replica: {}\n",
        app.purged.load(Ordering::SeqCst),
        app.reports.load(Ordering::SeqCst)
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://embedded.db".into());
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let app = Arc::new(App::default());

    let purge = {
        let app = app.clone();
        Job::new("purge-sessions", "*/10 * * * * *")?
            .lock_at_most_for(Duration::from_secs(60))
            .timeout(Duration::from_secs(30))
            .run(move |ctx| purge_sessions(app.clone(), ctx))
    };
    let report = {
        let app = app.clone();
        Job::new("daily-report", "0 6 * * *")?
            .timezone("Europe/Berlin")?
            .retries(3, Duration::from_secs(60))
            .run(move |ctx| {
                let app = app.clone();
                async move {
                    app.reports.fetch_add(1, Ordering::SeqCst);
                    println!("daily report for {}", ctx.instant());
                    Ok::<(), std::io::Error>(())
                }
            })
    };
    let scheduler = Scheduler::builder(url.as_str())
        .job(purge)
        .job(report)
        .shutdown_grace(Duration::from_secs(10))
        .build()
        .await?;
    println!("replica {} scheduling on {url}", scheduler.instance_id());

    // One shutdown signal for both halves of the service.
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("serving http://127.0.0.1:{port}/");
    let router = Router::new().route("/", get(status)).with_state(app);
    let server = axum::serve(listener, router).with_graceful_shutdown(stopped(stop.clone()));
    let (served, scheduled) =
        tokio::join!(async { server.await }, scheduler.run_until(stopped(stop)));
    served?;
    scheduled?;
    Ok(())
}
