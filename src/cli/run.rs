//! `replicron run`: the daemon. It builds a [`Scheduler`] from the job
//! file, with the parts only the daemon wants: child processes and their
//! guard, the HTTP listener (dashboard, API, `/metrics`, `/healthz`),
//! systemd notifications,
//! SIGTERM/SIGINT for shutdown and SIGHUP for reload.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use super::{ConfigArg, ExitCode, load};
use crate::config::Config;
use crate::scheduler::{Database, Job, Phase, Scheduler};
use crate::telemetry::{self, Liveness};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The job file.
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// This replica's id in leases and history; unique per process.
    /// Default: `<hostname>:<pid>:<random>`.
    #[arg(long, value_name = "ID")]
    pub(crate) instance_id: Option<String>,
}

pub(super) fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    crate::runner::users::check_host(&config)?;
    super::refuse_past_instants(&config)?;
    let tokens = config.web.tokens(&config.path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("replicron")
        .build()
        .context("starting the async runtime")?;
    // Before anything opens a descriptor: the HTTP listener's share of the
    // limit is set from it, and the rest is the scheduler's.
    let descriptors = crate::web::listener::raise_descriptor_limit();
    runtime.block_on(async {
        let handle = telemetry::install();
        // How runs are held to their resource limits, said once.
        crate::runner::resources::init(&config);
        let liveness = Arc::new(Liveness::new());
        tokio::spawn(telemetry::heartbeat(liveness.clone()));
        tokio::spawn(telemetry::upkeep(handle.clone()));
        let mut builder = Scheduler::builder(Database::parsed(config.database.url.clone()))
            .pool_size(config.database.pool_size)
            .shutdown_grace(config.daemon.shutdown_grace)
            .history_retention(config.daemon.history_retention)
            .max_starts_per_second(config.daemon.max_starts_per_second)
            .process_guard(true)
            .notify_systemd(true)
            .liveness(liveness.clone());
        let (trigger_tx, triggers) = mpsc::channel(16);
        builder = builder.triggers(triggers);
        if let Some(id) = &args.instance_id {
            builder = builder.instance_id(id.clone());
        }
        held(&config);
        for job in config.runnable_jobs() {
            builder = builder.job(Job::from_config(job));
        }
        let scheduler = builder.build().await?;
        let shared = Arc::new(std::sync::RwLock::new(Arc::new(config.clone())));
        if let Some(listen) = config.daemon.metrics_listen {
            let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| {
                format!("listening on {listen} for the dashboard, the API and /metrics")
            })?;
            info!(%listen, actions = !tokens.is_empty(), "serving the dashboard at /, the API at /api/v1/, /metrics and /healthz");
            // Where the other replicas read this one's runs' live output.
            let bound = listener.local_addr().unwrap_or(listen);
            let advertised =
                crate::web::live::advertised(config.web.advertise_url.as_deref(), bound);
            if config.web.advertise_url.is_none() && bound.ip().is_loopback() {
                warn!(url = %advertised, "this replica's dashboard listens on a loopback address, which replicas on other hosts cannot reach: they cannot show its runs' live output; set [web] advertise_url to an address they reach");
            }
            if let Err(e) = scheduler.publish_web_url(advertised.clone()).await {
                warn!(url = %advertised, "the dashboard's address could not be recorded; other replicas cannot show this one's live output: {e}");
            }
            let web = crate::web::Web {
                store: scheduler.store().clone(),
                config: shared.clone(),
                instance: scheduler.instance_id().to_string(),
                auth: crate::web::Auth::new(tokens),
                metrics: handle,
                liveness: liveness.clone(),
                triggers: trigger_tx,
                loopback: listen.ip().is_loopback(),
                public: config.web.public_url.clone(),
                cookie: crate::web::CookieSettings::of(&config.web),
                throttle: Default::default(),
                trusted_proxies: config.web.trusted_proxies.clone(),
                notifications: scheduler.notifications(),
            };
            let cap = crate::web::listener::connection_cap(descriptors);
            tokio::spawn(crate::web::serve(listener, Arc::new(web), cap));
        }
        let (phase_tx, phase) = watch::channel(Phase::Running);
        tokio::spawn(drive_shutdown(phase_tx, config.daemon.shutdown_grace));
        // Once start-up (migrations, lease rows, the first claims) is over.
        tokio::spawn(async {
            tokio::time::sleep(SHED_AFTER).await;
            let _ = tokio::task::spawn_blocking(crate::runner::memory::shed_startup_pages).await;
        });
        // Each replica keeps its own runs' output files within bounds.
        tokio::spawn(crate::ops::output::sweep_forever(
            scheduler.store().clone(),
            shared.clone(),
        ));
        let (reload_tx, reloads) = mpsc::channel(4);
        tokio::spawn(watch_reloads(
            args.config.to_path_buf(),
            config,
            (shared, scheduler.store().clone()),
            reload_tx,
        ));
        scheduler.run(phase, reloads).await?;
        anyhow::Ok(())
    })?;
    // The last runs' spans, if traces are on.
    telemetry::traces::shutdown();
    Ok(ExitCode::SUCCESS)
}

/// Says which jobs are held (a calendar of theirs could not be read: they
/// are not run, and the rest are), in the log and in
/// `replicron_job_held`; a job no longer held is released.
fn held(config: &Config) {
    for job in config.enabled_jobs() {
        let why = job.held();
        if let Some(why) = &why {
            error!(job = %job.name, "held, not run: {why}");
        }
        telemetry::job_held(&job.name, why.is_some());
    }
}

/// How long after its start a replica gives back the memory start-up
/// touched (`runner::memory`).
const SHED_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Drives the phase from SIGTERM/SIGINT: the first signal drains, and after
/// `grace` stops what is still running; a second signal stops at once. The
/// signals are listened for from the call on, not from when the future is
/// first polled: a SIGTERM that comes as the daemon starts is a shutdown
/// too, not the default action's sudden death.
pub(super) fn drive_shutdown(
    phase: watch::Sender<Phase>,
    grace: Duration,
) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(term), Ok(int)) = signals else {
            error!("cannot listen for SIGTERM/SIGINT");
            return;
        };
        shut_down_on(term, int, phase, grace).await;
    }
}

/// [`drive_shutdown`]'s work, once its signals are listened for.
async fn shut_down_on(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    phase: watch::Sender<Phase>,
    grace: Duration,
) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    info!(grace = %humantime::format_duration(grace), "shutting down: no new runs; running jobs may finish");
    let _ = phase.send(Phase::Draining);
    let grace_over = tokio::time::sleep(grace);
    tokio::pin!(grace_over);
    loop {
        tokio::select! {
            () = &mut grace_over, if *phase.borrow() == Phase::Draining => {
                let _ = phase.send(Phase::Stopping { immediate: false });
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    warn!("second signal: stopping running jobs now");
    let _ = phase.send(Phase::Stopping { immediate: true });
}

/// On SIGHUP, re-reads `path`: the jobs of a valid config are sent to the
/// scheduler; an invalid one is reported with all its errors, and the old
/// one stays, and is recorded in the audit log as a refused reload. What
/// only a restart applies (`[database]`, `[daemon]`) is said so.
///
/// SIGHUP is listened for from the call on: one that comes as the daemon
/// starts is a reload, not the default action's sudden death.
fn watch_reloads(
    path: std::path::PathBuf,
    current: Config,
    shared: (Arc<std::sync::RwLock<Arc<Config>>>, crate::db::Store),
    reloads: mpsc::Sender<Vec<Job>>,
) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let hangups = signal(SignalKind::hangup());
    async move {
        let Ok(hangups) = hangups else {
            error!("cannot listen for SIGHUP: reloading is off");
            return;
        };
        reload_on(hangups, path, current, shared, reloads).await;
    }
}

/// [`watch_reloads`]'s work, once SIGHUP is listened for.
async fn reload_on(
    mut hangups: tokio::signal::unix::Signal,
    path: std::path::PathBuf,
    mut current: Config,
    (shared, store): (Arc<std::sync::RwLock<Arc<Config>>>, crate::db::Store),
    reloads: mpsc::Sender<Vec<Job>>,
) {
    while hangups.recv().await.is_some() {
        telemetry::notify_systemd(telemetry::SystemdState::Reloading);
        info!(config = %path.display(), "SIGHUP: reloading the config");
        let loaded = Config::load(&path, &crate::config::Environment::from_process())
            .and_then(|new| crate::runner::users::check_host(&new).map(|()| new));
        let loaded = match loaded {
            Ok(new) => past_instants_known(&store, new).await,
            Err(e) => Err(e),
        };
        match loaded {
            Ok(new) => {
                super::warn_of(&new);
                crate::runner::resources::warn_unenforced(&new);
                held(&new);
                if current.database.url != new.database.url
                    || current.database.pool_size != new.database.pool_size
                {
                    warn!("[database] changed: it takes effect at the next restart");
                }
                if current.daemon != new.daemon || current.web != new.web {
                    warn!("[daemon] or [web] changed: it takes effect at the next restart");
                }
                let jobs = new.runnable_jobs().map(Job::from_config).collect();
                if let Ok(mut shown) = shared.write() {
                    *shown = Arc::new(new.clone());
                }
                current = new;
                if reloads.send(jobs).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                for line in e.to_string().lines() {
                    error!("{line}");
                }
                error!("the new config is invalid; the old one keeps running");
                use crate::db::audit;
                let entry = audit::Entry::fleet(audit::Action::Reload).arg("signal", "SIGHUP");
                // The reasons, without the quoted lines of the file a
                // syntax error shows (which may hold a secret default).
                let text = e.to_string();
                let reasons: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|line| {
                        !line.is_empty()
                            && !line
                                .trim_start_matches(|c: char| c.is_ascii_digit())
                                .trim_start()
                                .starts_with('|')
                    })
                    .collect();
                let why = format!(
                    "the new config is invalid, the old one keeps running: {}",
                    reasons.join("; ")
                );
                store
                    .audit(&audit::Actor::daemon(), entry, audit::Outcome::Refused(why))
                    .await;
                telemetry::notify_systemd(telemetry::SystemdState::Ready);
            }
        }
    }
}

/// `new`, unless a job of it is written `at` an instant already past by
/// more than its `catch_up` that the fleet did not have before
/// ([`Config::refuse_past_instants`]), as the database tells.
async fn past_instants_known(
    store: &crate::db::Store,
    new: Config,
) -> Result<Config, crate::config::ConfigError> {
    let mut known = Vec::new();
    for past in &new.past_instants {
        let (job, instant) = (past.job.clone(), past.instant);
        let knew = store
            .call("reading whether the fleet had the job", move |conn| {
                crate::lease::knew_before(conn, &job, instant)
            })
            .await
            .unwrap_or(false);
        if knew {
            known.push((past.job.clone(), past.instant));
        }
    }
    new.refuse_past_instants(|job, instant| known.iter().any(|k| k.0 == job && k.1 == instant))?;
    Ok(new)
}

/// The engine of a command that runs one job now (`trigger`, `exec`): the
/// daemon's, with the process guard on, and SIGTERM/SIGINT handled as the
/// daemon handles them (runs may finish for `grace`, then are stopped).
pub(super) fn one_off_engine(
    pool: crate::db::Pool,
    grace: std::time::Duration,
) -> Result<std::sync::Arc<crate::scheduler::engine::Engine>, crate::Error> {
    let (phase_tx, phase) = tokio::sync::watch::channel(crate::scheduler::Phase::Running);
    tokio::spawn(drive_shutdown(phase_tx, grace));
    let guard = std::sync::Arc::new(crate::runner::Guard::start().map_err(crate::Error::Guard)?);
    Ok(crate::scheduler::engine::Engine::start(
        crate::db::Store::new(pool),
        crate::scheduler::default_instance_id(),
        std::sync::Arc::new(crate::schedule::SystemClock),
        phase,
        (
            std::sync::Arc::new(crate::telemetry::Liveness::new()),
            crate::notify::SentLog::default(),
        ),
        Some(guard),
    ))
}
