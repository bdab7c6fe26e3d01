//! systemd: readiness, reload and stop notifications, and the watchdog
//! beat while the runtime is alive. Nothing is sent unless systemd started
//! the process (`NOTIFY_SOCKET`).

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::{Liveness, Unhealthy};

/// Beats every second while the runtime runs tasks, and passes the beat on
/// to systemd's watchdog when one is configured.
pub(crate) async fn heartbeat(liveness: Arc<Liveness>) {
    let watchdog = sd_notify::watchdog_enabled();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        liveness.tick();
        if watchdog.is_some() && liveness.problem() != Some(Unhealthy::TickLoopStopped) {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        }
    }
}

/// What the daemon tells systemd it is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SystemdState {
    /// Its loops run (again, after a reload).
    Ready,
    /// It reads its job file again.
    Reloading,
    /// Shutdown has begun.
    Stopping,
}

/// Tells systemd (if it started us) what the daemon is doing.
pub(crate) fn notify_systemd(state: SystemdState) {
    let state = match state {
        SystemdState::Ready => sd_notify::NotifyState::Ready,
        SystemdState::Reloading => sd_notify::NotifyState::Reloading,
        SystemdState::Stopping => sd_notify::NotifyState::Stopping,
    };
    if let Err(e) = sd_notify::notify(&[state]) {
        warn!("cannot notify systemd: {e}");
    }
}
