//! Sending, in a build without the `daemon` feature: only the daemon's job
//! file gives a job a `[notify]` section, so no notice or ping is ever
//! queued here, and none is sent.

use super::{Notice, Notify, Ping, SentLog};

/// Sends nothing: notifications are the daemon's.
pub(super) async fn event(_notify: &Notify, _notice: &Notice, _log: &SentLog) {}

/// Sends nothing: pings are the daemon's.
pub(super) async fn ping(_notify: &Notify, _job: &str, _ping: Ping, _run_id: i64, _log: &SentLog) {}
