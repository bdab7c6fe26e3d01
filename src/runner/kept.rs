//! A run's whole output kept in a file (`output_store = "files"`), beside
//! the tail its history row holds: `OUTPUT_DIR/JOB/RUN_ID.gz`, written as
//! the run prints and flushed at least once a second, so that a replica
//! that dies loses at most its last second.
//!
//! The file is gzip (RFC 1952, one member) holding a line that names the
//! format, `replicron output 1`, then records: one byte for the stream
//! (`o` stdout, `e` stderr), the length of the bytes as 4 bytes big-endian,
//! and the bytes, as the run printed them (its secrets masked). A flush is
//! a deflate sync flush: what came before it decodes even from a file cut
//! there, as a dead replica leaves it. A file grows to `output_max` at
//! most: the rest of the run's output is not kept, and the file says so in
//! a last stderr record.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use flate2::Compression;
use flate2::bufread::GzDecoder;
use flate2::write::GzEncoder;

use super::output::Stream;

/// The first line of every file, inside its compression.
const MAGIC: &[u8] = b"replicron output 1\n";

/// What a kept file is, for errors.
pub(crate) const FORMAT: &str = "a file of replicron's output (replicron output 1, gzip)";

/// The longest a kept record's bytes wait for a flush.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The most bytes one record holds: a chunk read is at most 16 KiB.
const MAX_RECORD: usize = 1 << 20;

/// Where a job's runs' files are kept under `dir`: a folder named after
/// the job, a name that begins with a dot prefixed with `%` (a job may be
/// named `..`).
pub(crate) fn folder_of(dir: &Path, job: &str) -> PathBuf {
    if job.starts_with('.') {
        dir.join(format!("%{job}"))
    } else {
        dir.join(job)
    }
}

/// The file of run `run_id` of `job` under `dir`.
pub(crate) fn path_of(dir: &Path, job: &str, run_id: i64) -> PathBuf {
    folder_of(dir, job).join(format!("{run_id}.gz"))
}

/// Counts what is written through it.
struct Counted {
    file: File,
    written: u64,
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// A run's output being kept.
pub(crate) struct Kept {
    path: PathBuf,
    max: u64,
    writer: Mutex<Writer>,
}

struct Writer {
    encoder: Option<GzEncoder<Counted>>,
    dirty: bool,
    flushed: Instant,
    /// Why the rest is not kept, once it is not.
    stopped: Option<String>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").field("path", &self.path).finish()
    }
}

impl Kept {
    /// Starts the file of run `run_id` of `job` under `dir` (its folders
    /// made, mode 0750; the file 0640, one left by an earlier run of that
    /// id, from a database since emptied, written over), to hold at most
    /// `max` bytes.
    pub(crate) fn create(dir: &Path, job: &str, run_id: i64, max: u64) -> io::Result<Arc<Kept>> {
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        let folder = folder_of(dir, job);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&folder)?;
        let path = path_of(dir, job, run_id);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o640)
            .open(&path)?;
        let mut encoder = GzEncoder::new(Counted { file, written: 0 }, Compression::fast());
        encoder.write_all(MAGIC)?;
        encoder.flush()?;
        Ok(Arc::new(Kept {
            path,
            max,
            writer: Mutex::new(Writer {
                encoder: Some(encoder),
                dirty: false,
                flushed: Instant::now(),
                stopped: None,
            }),
        }))
    }

    /// Where it is kept.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `chunk`, read from `stream`; flushes if the last flush is
    /// [`FLUSH_EVERY`] old.
    pub(crate) fn push(&self, chunk: &[u8], stream: Stream) {
        let mut guard = self.writer();
        let writer = &mut *guard;
        if writer.stopped.is_some() {
            return;
        }
        let Some(encoder) = writer.encoder.as_mut() else {
            return;
        };
        writer.dirty = true;
        if encoder.get_ref().written >= self.max {
            let why = format!(
                "replicron: the rest of the output is not kept: its file reached output_max ({} bytes)\n",
                self.max
            );
            writer.stopped = Some(match record(encoder, Stream::Stderr, why.as_bytes()) {
                Ok(()) => why.trim_start_matches("replicron: ").trim_end().to_string(),
                Err(e) => format!("writing {}: {e}", self.path.display()),
            });
            return;
        }
        let result = chunk
            .chunks(MAX_RECORD)
            .try_for_each(|piece| record(encoder, stream, piece));
        if let Err(e) = result {
            writer.stopped = Some(format!("writing {}: {e}", self.path.display()));
        } else if writer.flushed.elapsed() >= FLUSH_EVERY {
            flush(writer);
        }
    }

    /// Flushes what was kept since the last flush, if anything.
    pub(crate) fn flush(&self) {
        flush(&mut self.writer());
    }

    /// Ends the file. Returns why part of the output was not kept, if any
    /// was not.
    pub(crate) fn finish(&self) -> Option<String> {
        let mut writer = self.writer();
        let stopped = writer.stopped.take();
        let Some(encoder) = writer.encoder.take() else {
            return stopped;
        };
        match encoder.finish() {
            Ok(_) => stopped,
            Err(e) => Some(stopped.unwrap_or(format!("ending {}: {e}", self.path.display()))),
        }
    }
}

fn record(encoder: &mut GzEncoder<Counted>, stream: Stream, bytes: &[u8]) -> io::Result<()> {
    let tag = match stream {
        Stream::Stdout => b'o',
        Stream::Stderr => b'e',
    };
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    encoder.write_all(&[tag])?;
    encoder.write_all(&len.to_be_bytes())?;
    encoder.write_all(&bytes[..len as usize])
}

fn flush(writer: &mut Writer) {
    if !writer.dirty {
        return;
    }
    if let Some(encoder) = writer.encoder.as_mut()
        && let Err(e) = encoder.flush()
        && writer.stopped.is_none()
    {
        writer.stopped = Some(format!("flushing the output's file: {e}"));
    }
    writer.dirty = false;
    writer.flushed = Instant::now();
}

/// How much of a kept file could be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// All of it, to its end.
    Whole,
    /// Up to a cut: its replica died (or is still writing it) there.
    Cut,
}

/// Reads the kept file at `path`, handing each record's stream and bytes
/// to `each` in order, until `each` says to stop (`false`). A file cut
/// short is read up to its cut.
pub(crate) fn read(path: &Path, each: impl FnMut(Stream, &[u8]) -> bool) -> io::Result<Extent> {
    read_from(File::open(path)?, &path.display().to_string(), each)
}

/// [`read`] of a kept file's bytes from `reader` (a file, or a replica's
/// answer), named `name` in errors.
pub(crate) fn read_from(
    reader: impl Read,
    name: &str,
    mut each: impl FnMut(Stream, &[u8]) -> bool,
) -> io::Result<Extent> {
    let mut decoder = GzDecoder::new(BufReader::new(reader));
    let not_kept = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{name} is not a file of replicron's output"),
        )
    };
    let mut magic = vec![0_u8; MAGIC.len()];
    match read_all(&mut decoder, &mut magic) {
        Ok(n) if n == MAGIC.len() && magic == MAGIC => {}
        Ok(n) if MAGIC.starts_with(&magic[..n]) && n > 0 => return Ok(Extent::Cut),
        Ok(_) => return Err(not_kept()),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput || cut(&e) => return Err(not_kept()),
        Err(e) => return Err(e),
    }
    let mut bytes = Vec::new();
    loop {
        let mut head = [0_u8; 5];
        match read_all(&mut decoder, &mut head) {
            Ok(0) => return Ok(Extent::Whole),
            Ok(5) => {}
            Ok(_) => return Ok(Extent::Cut),
            Err(e) if cut(&e) => return Ok(Extent::Cut),
            Err(e) => return Err(e),
        }
        let stream = match head[0] {
            b'o' => Stream::Stdout,
            b'e' => Stream::Stderr,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{name}: no stream is tagged {other}"),
                ));
            }
        };
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        bytes.resize(len.min(MAX_RECORD), 0);
        match read_all(&mut decoder, &mut bytes) {
            Ok(n) if n == bytes.len() => {
                if !each(stream, &bytes) {
                    return Ok(Extent::Whole);
                }
            }
            Ok(n) => {
                each(stream, &bytes[..n]);
                return Ok(Extent::Cut);
            }
            Err(e) if cut(&e) => return Ok(Extent::Cut),
            Err(e) => return Err(e),
        }
    }
}

/// Reads into `buf` until it is full or the stream ends; how many bytes.
fn read_all(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match reader.read(&mut buf[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if at > 0 && cut(&e) {
                    return Ok(at);
                }
                return Err(e);
            }
        }
    }
    Ok(at)
}

/// Whether reading failed only because the file ends before its
/// compression does: a file being written, or left by a dead replica.
fn cut(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::UnexpectedEof
}

/// What [`sweep`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Files deleted, because their run's row is gone.
    pub(crate) gone: usize,
    /// Files deleted for `output_retention`.
    pub(crate) old: usize,
    /// Files deleted for `output_max`.
    pub(crate) over: usize,
}

impl Swept {
    /// How many in all.
    pub(crate) fn total(self) -> usize {
        self.gone + self.old + self.over
    }
}

/// A job's bounds on its kept files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Files older than this are deleted.
    pub(crate) retention: Duration,
    /// The job's files together, at most: the oldest go first.
    pub(crate) max: u64,
}

/// One kept file, as [`sweep`] finds it.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    pub(crate) run_id: i64,
    pub(crate) modified: SystemTime,
    pub(crate) len: u64,
}

/// The kept files under `dir`, by the folder (job) they are in.
pub(crate) fn list(dir: &Path) -> io::Result<Vec<(String, Vec<Found>)>> {
    let mut folders = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(folders),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let job = name.strip_prefix('%').unwrap_or(&name).to_string();
        let mut files = Vec::new();
        for file in std::fs::read_dir(entry.path())?.flatten() {
            let path = file.path();
            let Some(run_id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".gz"))
                .and_then(|n| n.parse::<i64>().ok())
            else {
                continue;
            };
            let Ok(meta) = file.metadata() else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            files.push(Found {
                path,
                run_id,
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                len: meta.len(),
            });
        }
        folders.push((job, files));
    }
    Ok(folders)
}

/// A file whose run has no row is deleted once it is this old.
const GONE_AFTER: Duration = Duration::from_secs(600);

/// Deletes, of `files` (one job's, under `bounds`), those of runs whose
/// row is gone (`rows` says which of their ids still have one, and
/// whether each is `running`) and that are [`GONE_AFTER`] old, those
/// older than the job's `output_retention`, and then, oldest first, as
/// many as bring the rest under its `output_max`, never one whose run is
/// `running` (its file is still written).
pub(crate) fn sweep(
    mut files: Vec<Found>,
    bounds: Bounds,
    now: SystemTime,
    rows: &std::collections::HashMap<i64, bool>,
) -> Swept {
    let mut swept = Swept::default();
    files.sort_by_key(|f| (f.modified, f.run_id));
    let mut kept = Vec::new();
    for file in files {
        let running = rows.get(&file.run_id).copied();
        let age = now.duration_since(file.modified).unwrap_or_default();
        let delete = match running {
            // Not a run that has only just begun, whose row a lagging
            // read may not show yet.
            None if age >= GONE_AFTER => Some(&mut swept.gone),
            None => None,
            Some(false) if age > bounds.retention => Some(&mut swept.old),
            _ => None,
        };
        match delete {
            Some(count) => {
                if std::fs::remove_file(&file.path).is_ok() {
                    *count += 1;
                }
            }
            None => kept.push((file, running == Some(true))),
        }
    }
    let mut total: u64 = kept.iter().map(|(f, _)| f.len).sum();
    for (file, running) in &kept {
        if total <= bounds.max {
            break;
        }
        if *running {
            continue;
        }
        if std::fs::remove_file(&file.path).is_ok() {
            total = total.saturating_sub(file.len);
            swept.over += 1;
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(path: &Path) -> (Vec<(Stream, Vec<u8>)>, Extent) {
        let mut records: Vec<(Stream, Vec<u8>)> = Vec::new();
        let read = read(path, |stream, bytes| {
            match records.last_mut() {
                Some(last) if last.0 == stream => last.1.extend_from_slice(bytes),
                _ => records.push((stream, bytes.to_vec())),
            }
            true
        })
        .expect("read");
        (records, read)
    }

    /// What a run printed comes back whole and in order, each byte with
    /// its stream; a file cut anywhere reads up to its last flush.
    #[test]
    fn a_kept_file_reads_back_whole_and_up_to_a_cut() {
        let dir = tempfile::tempdir().expect("dir");
        let kept = Kept::create(dir.path(), "nightly", 42, u64::MAX).expect("create");
        assert_eq!(kept.path(), dir.path().join("nightly/42.gz"));
        let big: Vec<u8> = (0..200_000_u32).flat_map(|i| i.to_le_bytes()).collect();
        kept.push(b"out 1\n", Stream::Stdout);
        kept.push(b"err 1\n", Stream::Stderr);
        kept.push(&big, Stream::Stdout);
        kept.flush();
        let flushed = std::fs::metadata(kept.path()).expect("meta").len();
        kept.push(b"after the flush\n", Stream::Stdout);
        // As a dead replica leaves it: the bytes up to its last flush.
        let cut = dir.path().join("cut.gz");
        let bytes = std::fs::read(kept.path()).expect("bytes");
        std::fs::write(&cut, &bytes[..flushed as usize]).expect("write");
        assert_eq!(kept.finish(), None);
        let (records, whole) = read_back(kept.path());
        assert_eq!(whole, Extent::Whole);
        let mut expected_out = big.clone();
        expected_out.extend_from_slice(b"after the flush\n");
        assert_eq!(
            records,
            vec![
                (Stream::Stdout, b"out 1\n".to_vec()),
                (Stream::Stderr, b"err 1\n".to_vec()),
                (Stream::Stdout, expected_out),
            ]
        );
        let (records, read) = read_back(&cut);
        assert_eq!(read, Extent::Cut);
        assert_eq!(records.len(), 3);
        assert_eq!(records[2].1, big, "everything up to the flush");
        // Cut in the middle of a record: what came before it.
        std::fs::write(&cut, &bytes[..(flushed / 2) as usize]).expect("write");
        let (records, read) = read_back(&cut);
        assert_eq!(read, Extent::Cut);
        assert!(records.len() <= 3);
        // Not a kept file: not gzip, or gzip of something else.
        std::fs::write(&cut, b"this is not a gzip file at all").expect("write");
        assert!(super::read(&cut, |_, _| true).is_err());
        let mut other = GzEncoder::new(Vec::new(), Compression::fast());
        other
            .write_all(b"some other text, long enough")
            .expect("gzip");
        std::fs::write(&cut, other.finish().expect("gzip")).expect("write");
        assert!(super::read(&cut, |_, _| true).is_err());
    }

    /// A file stops growing at its output_max, and says so.
    #[test]
    fn a_kept_file_stops_at_its_max() {
        let dir = tempfile::tempdir().expect("dir");
        let kept = Kept::create(dir.path(), "..", 7, 10_000).expect("create");
        assert_eq!(kept.path(), dir.path().join("%../7.gz"));
        // Bytes that do not compress (xorshift).
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..100_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        for piece in noise.chunks(4096) {
            kept.push(piece, Stream::Stdout);
            kept.flush();
        }
        let why = kept.finish().expect("cut");
        assert!(why.contains("output_max"), "{why}");
        let (records, read) = read_back(kept.path());
        assert_eq!(read, Extent::Whole);
        let last = records.last().expect("records");
        assert_eq!(last.0, Stream::Stderr);
        assert!(String::from_utf8_lossy(&last.1).contains("output_max"));
        assert!(std::fs::metadata(kept.path()).expect("meta").len() < 20_000);
    }

    /// The sweep deletes the files of gone rows, then old ones, then the
    /// oldest until the job's files fit, never a running run's.
    #[test]
    fn the_sweep_keeps_a_job_within_its_bounds() {
        let dir = tempfile::tempdir().expect("dir");
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        let mut files = Vec::new();
        for (id, age_days, len) in [
            (1, 30, 100),
            (2, 3, 100),
            (3, 2, 100),
            (4, 1, 100),
            (5, 0, 500),
        ] {
            let path = dir.path().join(format!("{id}.gz"));
            std::fs::write(&path, vec![0_u8; len]).expect("write");
            files.push(Found {
                path,
                run_id: id,
                modified: now - day * age_days,
                len: len as u64,
            });
        }
        let rows: std::collections::HashMap<i64, bool> =
            [(1, false), (3, false), (4, false), (5, true)].into();
        let swept = sweep(
            files,
            Bounds {
                retention: 14 * day,
                max: 550,
            },
            now,
            &rows,
        );
        // 2: its row is gone; 1: older than 14 days; then 3 and 4, the
        // oldest left, for the 700 bytes of 3, 4 and 5 to fit 550; 5 is
        // running.
        assert_eq!(
            swept,
            Swept {
                gone: 1,
                old: 1,
                over: 2
            }
        );
        let left: Vec<bool> = (1..=5)
            .map(|id| dir.path().join(format!("{id}.gz")).exists())
            .collect();
        assert_eq!(left, [false, false, false, false, true]);
    }
}
