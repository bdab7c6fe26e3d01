//! A run's output: stdout and stderr read in fixed-size chunks, logged
//! line by line with the job's name and run id, and only the last
//! `output_limit` bytes kept, so memory stays bounded whatever a job prints.
//! The kept bytes remember which stream each came from, in runs of bytes of
//! one stream, and are what the run's live view ([`super::live`]) reads
//! while it runs.

use std::collections::VecDeque;
use std::sync::Arc;

/// The most runs of one stream the kept bytes are cut into. A job that
/// switches streams more often within its tail has its later bytes counted
/// in the stream before them, so that neither the tail nor a read of it
/// (one piece per run, on every view of a running run's page) grows past
/// `output_limit` by more than this many entries.
const MAX_STREAM_RUNS: usize = 4096;

/// Which of a run's output streams bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The last bytes of a run's combined stdout and stderr.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    pub(crate) bytes: VecDeque<u8>,
    /// `bytes` cut into runs of one stream each, oldest first: their
    /// lengths add up to `bytes.len()`, and no two neighbours share a
    /// stream.
    pub(crate) streams: VecDeque<(Stream, usize)>,
    pub(crate) limit: usize,
    pub(crate) total: u64,
}

impl Tail {
    /// A tail that keeps the last `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Tail {
            limit,
            ..Tail::default()
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8], stream: Stream) {
        self.total += chunk.len() as u64;
        if self.limit == 0 {
            return;
        }
        let chunk = &chunk[chunk.len().saturating_sub(self.limit)..];
        let mut overflow = (self.bytes.len() + chunk.len()).saturating_sub(self.limit);
        self.bytes.drain(..overflow);
        while overflow > 0 {
            let Some(front) = self.streams.front_mut() else {
                break;
            };
            if front.1 > overflow {
                front.1 -= overflow;
                break;
            }
            overflow -= front.1;
            self.streams.pop_front();
        }
        self.bytes.extend(chunk);
        if chunk.is_empty() {
            return;
        }
        let full = self.streams.len() >= MAX_STREAM_RUNS;
        match self.streams.back_mut() {
            Some(back) if back.0 == stream || full => back.1 += chunk.len(),
            _ => self.streams.push_back((stream, chunk.len())),
        }
    }

    /// The offset, in all the run printed, of the first byte kept.
    pub(crate) fn start(&self) -> u64 {
        self.total - self.bytes.len() as u64
    }

    /// The bytes kept from offset `from` on (from the first one kept if
    /// `from` is older), at most `max` of them, in runs of one stream each.
    pub(crate) fn since(&self, from: u64, max: usize) -> Vec<(Stream, Vec<u8>)> {
        let skip = usize::try_from(from.saturating_sub(self.start())).unwrap_or(usize::MAX);
        let stop = skip.saturating_add(max);
        let mut pieces = Vec::new();
        let mut at = 0_usize;
        for &(stream, len) in &self.streams {
            if at >= stop {
                break;
            }
            let (begin, end) = (at.max(skip), (at + len).min(stop));
            if begin < end {
                pieces.push((stream, self.bytes.range(begin..end).copied().collect()));
            }
            at += len;
        }
        pieces
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

/// A stream's bytes with each of the run's secret values written
/// [`crate::text::REDACTED`], before they are kept, watched or logged. A
/// secret may be cut between two reads: the end of a read that could be
/// the beginning of one is held back until the next read tells (or the
/// stream ends).
#[derive(Debug, Default)]
pub(crate) struct Masker {
    secrets: Arc<[Vec<u8>]>,
    carry: Vec<u8>,
}

impl Masker {
    /// Masks `secrets` ([`crate::text::MIN_MASKED`] bytes or more; shorter
    /// ones are left).
    pub(crate) fn new(secrets: &[String]) -> Masker {
        Masker {
            secrets: secrets
                .iter()
                .filter(|s| s.len() >= crate::text::MIN_MASKED)
                .map(|s| s.as_bytes().to_vec())
                .collect(),
            carry: Vec::new(),
        }
    }

    /// What of `chunk` (and what was held back) can be passed on.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.secrets.is_empty() {
            return chunk.to_vec();
        }
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(chunk);
        for secret in self.secrets.iter() {
            bytes = replace(&bytes, secret, crate::text::REDACTED.as_bytes());
        }
        // The longest end of it that begins a secret.
        let held = self
            .secrets
            .iter()
            .flat_map(|secret| {
                (1..secret.len().min(bytes.len() + 1))
                    .rev()
                    .find(|&n| bytes.ends_with(&secret[..n]))
            })
            .max()
            .unwrap_or(0);
        self.carry = bytes.split_off(bytes.len() - held);
        bytes
    }

    /// What was held back, at the stream's end.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.carry)
    }
}

/// `bytes` with every `what` written `with`.
fn replace(bytes: &[u8], what: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at..].starts_with(what) {
            out.extend_from_slice(with);
            at += what.len();
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_exactly_the_last_bytes() {
        let mut tail = Tail::new(10);
        tail.push(b"0123456", Stream::Stdout);
        tail.push(b"789abc", Stream::Stdout);
        assert_eq!(
            tail.bytes.iter().copied().collect::<Vec<_>>(),
            b"3456789abc"
        );
        tail.push(&[b'x'; 25], Stream::Stdout);
        assert_eq!(tail.bytes.len(), 10);
        assert_eq!(tail.total, 38);
        let mut none = Tail::default();
        none.push(b"abc", Stream::Stderr);
        assert!(none.bytes.is_empty());
        assert!(none.streams.is_empty());
        assert_eq!(none.start(), 3);
    }

    /// A printed secret is masked even when it comes cut in two reads,
    /// and what only began like one is passed on in the end.
    #[test]
    fn secrets_are_masked_across_reads() {
        let mut masker = Masker::new(&["hunter2".to_string(), "no".to_string()]);
        let mut out = masker.feed(b"pw=hun");
        assert_eq!(out, b"pw=", "the start of a secret is held back");
        out.extend(masker.feed(b"ter2 no hunt"));
        out.extend(masker.feed(b"er3 hunter2"));
        out.extend(masker.finish());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "pw=[redacted] no hunter3 [redacted]"
        );
        let mut masker = Masker::new(&[]);
        assert_eq!(masker.feed(b"hun"), b"hun");
        let mut masker = Masker::new(&["abcd".to_string()]);
        assert_eq!(masker.feed(b"xab"), b"x");
        assert_eq!(masker.finish(), b"ab");
    }

    /// Each kept byte stays tagged with its stream as older ones fall off
    /// the front, and the runs never outnumber or outgrow the bytes.
    #[test]
    fn the_tail_tags_each_byte_with_its_stream() {
        let mut tail = Tail::new(8);
        tail.push(b"out1\n", Stream::Stdout);
        tail.push(b"err\n", Stream::Stderr);
        assert_eq!(
            tail.since(0, usize::MAX),
            vec![
                (Stream::Stdout, b"ut1\n".to_vec()),
                (Stream::Stderr, b"err\n".to_vec())
            ]
        );
        assert_eq!(tail.start(), 1);
        // From an offset inside the kept bytes: only what follows it.
        assert_eq!(
            tail.since(7, usize::MAX),
            vec![(Stream::Stderr, b"r\n".to_vec())]
        );
        assert_eq!(tail.since(9, usize::MAX), Vec::new());
        // At most so many bytes.
        assert_eq!(
            tail.since(3, 3),
            vec![
                (Stream::Stdout, b"1\n".to_vec()),
                (Stream::Stderr, b"e".to_vec())
            ]
        );
        tail.push(b"o2", Stream::Stdout);
        tail.push(b"o3", Stream::Stdout);
        assert_eq!(
            tail.since(0, usize::MAX),
            vec![
                (Stream::Stderr, b"err\n".to_vec()),
                (Stream::Stdout, b"o2o3".to_vec())
            ]
        );
        // Alternating one-byte chunks: bounded by the limit all the same.
        for i in 0..1000 {
            let stream = if i % 2 == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            tail.push(b"x", stream);
            assert!(tail.streams.len() <= tail.limit);
            assert_eq!(
                tail.streams.iter().map(|s| s.1).sum::<usize>(),
                tail.bytes.len()
            );
        }
        assert_eq!(tail.total, 1013);
    }

    /// A job that switches streams with every byte of a large tail: the
    /// runs stop at their cap, and every byte is still kept, in the stream
    /// before it.
    #[test]
    fn the_runs_of_one_stream_are_capped() {
        let mut tail = Tail::new(4 * MAX_STREAM_RUNS);
        for i in 0..3 * MAX_STREAM_RUNS {
            let stream = if i % 2 == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            tail.push(b"x", stream);
        }
        assert_eq!(tail.streams.len(), MAX_STREAM_RUNS);
        assert_eq!(tail.since(0, usize::MAX).len(), MAX_STREAM_RUNS);
        assert_eq!(
            tail.since(0, usize::MAX)
                .iter()
                .map(|p| p.1.len())
                .sum::<usize>(),
            3 * MAX_STREAM_RUNS
        );
        // As the front falls off, switches are recorded again.
        for _ in 0..4 * MAX_STREAM_RUNS {
            tail.push(b"o", Stream::Stdout);
        }
        tail.push(b"e", Stream::Stderr);
        assert_eq!(
            tail.since(0, usize::MAX).last(),
            Some(&(Stream::Stderr, b"e".to_vec()))
        );
    }
}
