//! The `/metrics` and `/healthz` endpoints.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Liveness;

/// Serves `/metrics` and `/healthz` on `listener` until the task is dropped.
pub(crate) async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    liveness: Arc<Liveness>,
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let (handle, liveness) = (handle.clone(), liveness.clone());
        tokio::spawn(async move {
            let mut request = Vec::with_capacity(1024);
            let mut buffer = [0_u8; 1024];
            // The request line is all that matters; stop at the header end.
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(n)) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let mut words = line.split_whitespace();
            let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let (status, content_type, body) = match (method, path.split('?').next().unwrap_or(""))
            {
                ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", handle.render()),
                ("GET", "/healthz") => match liveness.problem() {
                    None => (
                        "200 OK",
                        "application/json",
                        "{\"status\":\"ok\"}\n".to_string(),
                    ),
                    Some(reason) => (
                        "503 Service Unavailable",
                        "application/json",
                        format!("{{\"status\":\"unhealthy\",\"reason\":\"{reason}\"}}\n"),
                    ),
                },
                ("GET", _) => (
                    "404 Not Found",
                    "text/plain",
                    "try /metrics or /healthz\n".to_string(),
                ),
                _ => (
                    "405 Method Not Allowed",
                    "text/plain",
                    "GET only\n".to_string(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
