//! A run's output: stdout and stderr read in fixed-size chunks, logged
//! line by line with the job's name and run id, and only the last
//! `output_limit` bytes kept, so memory stays bounded whatever a job prints.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest line logged as one event; longer lines are logged in pieces.
const MAX_LOG_LINE: usize = 8 * 1024;

/// The last bytes of a run's combined stdout and stderr.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    pub(crate) bytes: VecDeque<u8>,
    pub(crate) limit: usize,
    pub(crate) total: u64,
}

impl Tail {
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if self.limit == 0 {
            return;
        }
        let chunk = &chunk[chunk.len().saturating_sub(self.limit)..];
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(self.limit);
        self.bytes.drain(..overflow);
        self.bytes.extend(chunk);
    }
}

/// The output a run left: its tail, as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Output {
    /// The last `output_limit` bytes, decoded lossily as UTF-8.
    pub(crate) tail: String,
    /// How many bytes the run printed in all.
    pub(crate) total_bytes: u64,
}

/// Reads one stream of a run into its tail and its log lines.
pub(crate) async fn read_stream(
    mut stream: impl AsyncRead + Unpin,
    name: &'static str,
    job: String,
    run_id: i64,
    tail: Arc<Mutex<Tail>>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buffer[..n];
        if let Ok(mut tail) = tail.lock() {
            tail.push(chunk);
        }
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            line.extend_from_slice(piece);
            if line.ends_with(b"\n") || line.len() >= MAX_LOG_LINE {
                log_line(&job, run_id, name, &line);
                line.clear();
            }
        }
    }
    if !line.is_empty() {
        log_line(&job, run_id, name, &line);
    }
}

fn log_line(job: &str, run_id: i64, stream: &str, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = crate::text::for_log(text.trim_end_matches(['\n', '\r']));
    tracing::info!(target: "replicron::job", job, run_id, stream, "{text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_exactly_the_last_bytes() {
        let mut tail = Tail {
            limit: 10,
            ..Tail::default()
        };
        tail.push(b"0123456");
        tail.push(b"789abc");
        assert_eq!(
            tail.bytes.iter().copied().collect::<Vec<_>>(),
            b"3456789abc"
        );
        tail.push(&[b'x'; 25]);
        assert_eq!(tail.bytes.len(), 10);
        assert_eq!(tail.total, 38);
        let mut none = Tail::default();
        none.push(b"abc");
        assert!(none.bytes.is_empty());
    }
}
