//! A TCP proxy between replicas and the database, which a test can cut and
//! restore: cutting closes every forwarded connection and refuses new ones,
//! as a partition or a database restart does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A running proxy; it stops when dropped.
pub(crate) struct Proxy {
    pub port: u16,
    open: Arc<AtomicBool>,
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
        let open = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (accept_open, accept_connections) = (open.clone(), connections.clone());
        runtime.spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                if !accept_open.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut list = accept_connections.lock().expect("connections");
                list.retain(|c| !c.is_finished());
                list.push(task.abort_handle());
            }
        });
        Proxy {
            port,
            open,
            connections,
            runtime: Some(runtime),
        }
    }

    /// Closes every forwarded connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().expect("connections").drain(..) {
            connection.abort();
        }
    }

    /// Forwards again.
    pub(crate) fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
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
