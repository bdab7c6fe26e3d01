//! The runs of this process that are running now, whose output can be
//! watched as it is written: a process-wide table from (instance, run id)
//! to the run's [`Live`] output, filled by the readers of its stdout and
//! stderr and left when the run ends.
//!
//! Its cost when nobody watches is the run's output tail, which is kept
//! anyway, one entry in the table per run, and a notification (an atomic
//! counter bumped, no allocation) per chunk read. Memory stays bounded by
//! the job's `output_limit`: watchers read the tail itself, a piece of at
//! most [`MAX_READ`] bytes at a time, and one that falls behind by more
//! than the tail is told which bytes it missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use super::kept::Kept;
use super::output::{Masker, Output, Stream, Tail};

/// The longest line logged as one event; longer lines are logged in pieces.
const MAX_LOG_LINE: usize = 8 * 1024;

/// How far a run's output has come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Bytes printed so far, both streams.
    pub(crate) total: u64,
    /// The output is closed: the run has ended.
    pub(crate) ended: bool,
}

/// A running run's output.
#[derive(Debug)]
pub(crate) struct Live {
    tail: Mutex<Tail>,
    progress: watch::Sender<Progress>,
    /// Its whole output's file, if the job keeps one.
    kept: Option<Arc<Kept>>,
}

/// The most bytes one read of a run's output copies, whatever its
/// `output_limit`: what a watcher holds at once.
pub(crate) const MAX_READ: usize = 64 * 1024;

/// What a watcher reads: the kept bytes from an offset on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Read {
    /// The offset of the first byte of `pieces` in all the run printed.
    pub(crate) from: u64,
    /// Bytes printed so far.
    pub(crate) total: u64,
    /// How many bytes are kept at most (`output_limit`).
    pub(crate) limit: u64,
    /// The bytes, in runs of one stream each.
    pub(crate) pieces: Vec<(Stream, Vec<u8>)>,
}

impl Live {
    /// A run's output that keeps its last `limit` bytes.
    #[cfg(test)]
    pub(crate) fn new(limit: usize) -> Arc<Live> {
        Live::keeping(limit, None)
    }

    /// A run's output that keeps its last `limit` bytes, and all of it in
    /// `kept` if given.
    pub(crate) fn keeping(limit: usize, kept: Option<Arc<Kept>>) -> Arc<Live> {
        Arc::new(Live {
            tail: Mutex::new(Tail::new(limit)),
            progress: watch::Sender::new(Progress::default()),
            kept,
        })
    }

    /// The file its whole output is kept in, if any.
    pub(crate) fn kept(&self) -> Option<&Arc<Kept>> {
        self.kept.as_ref()
    }

    /// `chunk` was read from `stream`.
    pub(crate) fn push(&self, chunk: &[u8], stream: Stream) {
        if let Some(kept) = &self.kept {
            kept.push(chunk, stream);
        }
        let total = match self.tail.lock() {
            Ok(mut tail) => {
                tail.push(chunk, stream);
                tail.total
            }
            Err(_) => return,
        };
        self.progress.send_modify(|p| p.total = total);
    }

    /// The run's output is closed.
    pub(crate) fn end(&self) {
        self.progress.send_modify(|p| p.ended = true);
    }

    /// Tells of every change from now on.
    pub(crate) fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// The kept bytes from offset `from` on, at most `max` of them.
    pub(crate) fn read(&self, from: u64, max: usize) -> Read {
        let Ok(tail) = self.tail.lock() else {
            return Read::default();
        };
        Read {
            from: from.max(tail.start()).min(tail.total),
            total: tail.total,
            limit: tail.limit as u64,
            pieces: tail.since(from, max),
        }
    }

    /// The output as the run leaves it.
    pub(crate) fn output(&self) -> Output {
        let Ok(tail) = self.tail.lock() else {
            return Output::default();
        };
        let (first, second) = tail.bytes.as_slices();
        let bytes = [first, second].concat();
        Output {
            tail: String::from_utf8_lossy(&bytes).into_owned(),
            total_bytes: tail.total,
        }
    }
}

type Table = HashMap<i64, Vec<(Arc<str>, Arc<Live>)>>;

fn table() -> &'static Mutex<Table> {
    static RUNS: OnceLock<Mutex<Table>> = OnceLock::new();
    RUNS.get_or_init(Mutex::default)
}

/// The output of run `run_id` of `instance`, if it is running in this
/// process.
pub(crate) fn find(instance: &str, run_id: i64) -> Option<Arc<Live>> {
    let table = table().lock().ok()?;
    table
        .get(&run_id)?
        .iter()
        .find(|(of, _)| &**of == instance)
        .map(|(_, live)| live.clone())
}

/// A run's place in the table: it is left, and its output marked ended,
/// when this is dropped.
#[derive(Debug)]
pub(crate) struct Registered {
    instance: Arc<str>,
    run_id: i64,
    live: Arc<Live>,
}

/// Enters run `run_id` of `instance` in the table.
pub(crate) fn register(instance: Arc<str>, run_id: i64, live: Arc<Live>) -> Registered {
    if let Ok(mut table) = table().lock() {
        table
            .entry(run_id)
            .or_default()
            .push((instance.clone(), live.clone()));
    }
    Registered {
        instance,
        run_id,
        live,
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut table) = table().lock()
            && let Some(entries) = table.get_mut(&self.run_id)
        {
            entries.retain(|(of, live)| !(of == &self.instance && Arc::ptr_eq(live, &self.live)));
            if entries.is_empty() {
                table.remove(&self.run_id);
            }
        }
        self.live.end();
    }
}

/// Reads one stream of a run into its tail and its log lines, its
/// `secrets` masked.
pub(crate) async fn read_stream(
    mut stream: impl AsyncRead + Unpin,
    name: Stream,
    job: String,
    run_id: i64,
    live: Arc<Live>,
    secrets: Arc<[String]>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let mut masker = Masker::new(&secrets);
    loop {
        let (chunk, ended) = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => (masker.finish(), true),
            Ok(n) => (masker.feed(&buffer[..n]), false),
        };
        if !chunk.is_empty() {
            live.push(&chunk, name);
        }
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            line.extend_from_slice(piece);
            if line.ends_with(b"\n") || line.len() >= MAX_LOG_LINE {
                log_line(&job, run_id, name.as_str(), &line);
                line.clear();
            }
        }
        if ended {
            break;
        }
    }
    if !line.is_empty() {
        log_line(&job, run_id, name.as_str(), &line);
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

    /// A watcher is told of each chunk and of the end; the run is found
    /// while registered and only under its own instance.
    #[tokio::test]
    async fn watchers_hear_each_chunk_and_the_end() {
        let live = Live::new(16);
        let registered = register(Arc::from("live-test-a"), -42, live.clone());
        let found = find("live-test-a", -42).expect("registered");
        assert!(find("live-test-b", -42).is_none());
        let mut progress = found.watch();
        live.push(b"hello\n", Stream::Stdout);
        progress.changed().await.expect("changed");
        assert_eq!(progress.borrow_and_update().total, 6);
        live.push(b"oops\n", Stream::Stderr);
        let read = found.read(3, MAX_READ);
        assert_eq!(read.from, 3);
        assert_eq!(read.total, 11);
        assert_eq!(
            read.pieces,
            vec![
                (Stream::Stdout, b"lo\n".to_vec()),
                (Stream::Stderr, b"oops\n".to_vec())
            ]
        );
        // Past the limit: the read starts at the first byte still kept.
        live.push(&[b'z'; 20], Stream::Stdout);
        assert_eq!(found.read(0, MAX_READ).from, 15);
        drop(registered);
        assert!(find("live-test-a", -42).is_none());
        assert!(progress.wait_for(|p| p.ended).await.is_ok());
        assert_eq!(live.output().total_bytes, 31);
        assert_eq!(live.output().tail, "z".repeat(16));
    }
}
