//! The HTTP listener's limits: no client, and no number of clients, can
//! take what the scheduler needs. Each connection is served by hyper with a
//! deadline for its request head (also between requests on a kept-alive
//! connection) and a lifetime; connections past a cap, set from the
//! process's descriptor limit so that the scheduler keeps a reserve for its
//! runs' pipes, its database connections and its logs, get a 503 and are
//! closed.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_service::Service as _;
use tracing::{info, warn};

/// How long a client has to send a request's head, from when the
/// connection opens or its previous response was sent.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection is served at most; it is then closed once its
/// request in progress has been answered.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// The largest request head (and read buffer) of a connection.
const MAX_HEAD: usize = 16 * 1024;
/// The most connections served at once, whatever the descriptor limit.
const MAX_CONNECTIONS: usize = 512;
/// Descriptors kept for the scheduler, never given to HTTP clients.
const RESERVE: u64 = 512;

/// Raises the process's soft limit of open descriptors to its hard limit,
/// and returns the (possibly raised) soft limit.
pub(crate) fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        info!(from = soft, to = hard, "raised the limit of open files");
        return hard;
    }
    soft
}

/// How many HTTP connections may be open at once with `limit` descriptors:
/// half of what the scheduler's reserve leaves, at most
/// [`MAX_CONNECTIONS`], at least 8.
pub(crate) fn connection_cap(limit: u64) -> usize {
    let spare = limit.saturating_sub(RESERVE) / 2;
    (spare as usize).clamp(8, MAX_CONNECTIONS)
}

/// Serves `app` on `listener`, at most `cap` connections at once.
pub(crate) async fn serve(listener: TcpListener, app: Router, cap: usize) {
    let permits = Arc::new(Semaphore::new(cap));
    let mut told_full = false;
    let mut told_error = false;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, most likely: wait for some to close
                // rather than spin.
                if !told_error {
                    warn!("the HTTP listener cannot accept a connection: {e}");
                    told_error = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        told_error = false;
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            if !told_full {
                warn!(
                    cap,
                    "the HTTP listener is full: answering 503 until connections close"
                );
                told_full = true;
            }
            refuse(&stream);
            continue;
        };
        let io = TokioIo::new(stream);
        told_full = false;
        let app = app.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    // A router is always ready: no poll_ready needed.
                    app.clone().call(request)
                });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD.max(8192))
                .serve_connection(io, service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = tokio::time::sleep(CONNECTION_LIFETIME) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(HEAD_TIMEOUT, connection).await;
                }
            }
            drop(permit);
        });
    }
}

/// Answers a connection past the cap with a 503 at once, without reading
/// its request, and closes it: it holds a descriptor for no longer than
/// that.
fn refuse(stream: &tokio::net::TcpStream) {
    const FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
        content-type: application/json\r\ncache-control: no-store\r\nretry-after: 1\r\nconnection: close\r\n\
        content-length: 52\r\n\r\n{\"error\":\"too many connections; try again shortly\"}\n";
    let _ = stream.try_write(FULL);
}

#[cfg(test)]
mod tests {
    use super::connection_cap;

    #[test]
    fn the_scheduler_keeps_its_reserve() {
        assert_eq!(connection_cap(1024), 256);
        assert_eq!(connection_cap(65_536), 512);
        assert_eq!(connection_cap(256), 8);
    }
}
