//! Exponential backoff with jitter, for every loop that waits and tries
//! again: reconnecting to the database, waiting for a lock, retrying a
//! write. Jitter keeps replicas that failed together from retrying in step.

use std::time::Duration;

/// The pauses of one waiting loop: `first`, then doubling up to `max`, each
/// spread by ±`jitter` (a fraction).
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
    jitter: f64,
}

impl Backoff {
    /// Pauses from `first` to `max`, without jitter.
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            next: first,
            max,
            jitter: 0.0,
        }
    }

    /// Each pause spread by ±`fraction` of itself.
    pub(crate) fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = fraction.clamp(0.0, 1.0);
        self
    }

    /// The next pause; the one after it is twice as long, up to the most.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter == 0.0 {
            pause
        } else {
            pause.mul_f64(1.0 - self.jitter + 2.0 * self.jitter * rand::random::<f64>())
        }
    }

    /// Waits for the next pause.
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// Back to the first pause (the thing waited for answered).
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_most_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(50));
        let pauses: Vec<u128> = (0..5).map(|_| backoff.next_pause().as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 50, 50]);
        backoff.reset();
        assert_eq!(backoff.next_pause(), Duration::from_millis(10));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let mut backoff =
            Backoff::new(Duration::from_millis(100), Duration::from_millis(100)).jitter(0.25);
        for _ in 0..200 {
            let pause = backoff.next_pause();
            assert!(pause >= Duration::from_millis(75) && pause <= Duration::from_millis(125));
        }
    }
}
