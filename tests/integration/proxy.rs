//! A TCP proxy between replicas and the database, which a test can cut and
//! restore. Cutting resets every forwarded connection and refuses new ones,
//! as a database restart or a firewall's reject does; a black hole keeps
//! the connections open but carries nothing either way until it is lifted,
//! as a partition that drops packets does (what was sent meanwhile arrives
//! afterwards, as TCP's retransmissions would bring it); a slow link
//! carries everything, each chunk late by a fixed delay either way, as a
//! congested or distant link does.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Forwards.
    Open,
    /// Resets every connection and refuses new ones.
    Reset,
    /// Holds every connection, new ones included, carrying nothing.
    Blackhole,
    /// Forwards each chunk this late.
    Slow(std::time::Duration),
}

/// A running proxy; it stops when dropped.
pub(crate) struct Proxy {
    pub port: u16,
    link: watch::Sender<Link>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    /// Forwards a new local port to `target`.
    pub(crate) fn start(target: SocketAddr) -> Proxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("proxy runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (link, _) = watch::channel(Link::Open);
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (accept_link, accept_connections) = (link.subscribe(), connections.clone());
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if *accept_link.borrow() == Link::Reset {
                    reset(client);
                    continue;
                }
                let task = tokio::spawn(forward(client, target, accept_link.clone()));
                let mut list = accept_connections.lock().expect("connections");
                list.retain(|c| !c.is_finished());
                list.push(task.abort_handle());
            }
        });
        Proxy {
            port,
            link,
            connections,
            runtime: Some(runtime),
        }
    }

    /// Resets every forwarded connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.link.send_replace(Link::Reset);
        for connection in self.connections.lock().expect("connections").drain(..) {
            connection.abort();
        }
    }

    /// Carries nothing, either way, on any connection until [`restore`]:
    /// statements sent meanwhile wait, and arrive once it is lifted.
    ///
    /// [`restore`]: Proxy::restore
    pub(crate) fn blackhole(&self) {
        self.link.send_replace(Link::Blackhole);
    }

    /// Carries everything, each chunk `delay` late, either way, until
    /// [`restore`].
    ///
    /// [`restore`]: Proxy::restore
    pub(crate) fn slow(&self, delay: std::time::Duration) {
        self.link.send_replace(Link::Slow(delay));
    }

    /// Forwards again.
    pub(crate) fn restore(&self) {
        self.link.send_replace(Link::Open);
    }
}

/// Closes `stream` with a reset rather than an orderly close.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Waits until the link carries traffic, as long as a slow link delays
/// it; `false` once it is reset.
async fn open(link: &mut watch::Receiver<Link>) -> bool {
    loop {
        let now = *link.borrow_and_update();
        match now {
            Link::Open => return true,
            Link::Slow(delay) => {
                tokio::time::sleep(delay).await;
                return true;
            }
            Link::Reset => return false,
            Link::Blackhole => {}
        }
        if link.changed().await.is_err() {
            return false;
        }
    }
}

/// Copies one direction, each chunk only while the link is open.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !open(&mut link).await || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

async fn forward(client: TcpStream, target: SocketAddr, mut link: watch::Receiver<Link>) {
    // A connection opened into a black hole waits, as a SYN that is dropped
    // does, until its client gives up.
    if !open(&mut link).await {
        reset(client);
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        reset(client);
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut up = tokio::spawn(pump(client_read, server_write, link.clone()));
    let mut down = tokio::spawn(pump(server_read, client_write, link.clone()));
    // When one side closes, the other is closed too; a task aborted by
    // `cut` drops both halves (the abort reaches the pumps through Drop).
    struct Both(AbortHandle, AbortHandle);
    impl Drop for Both {
        fn drop(&mut self) {
            self.0.abort();
            self.1.abort();
        }
    }
    let _both = Both(up.abort_handle(), down.abort_handle());
    tokio::select! {
        _ = &mut up => {}
        _ = &mut down => {}
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
