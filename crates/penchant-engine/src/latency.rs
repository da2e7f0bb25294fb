//! A latency histogram with fixed buckets, updated without locks, for `/metrics`: the engine
//! observes, the server encodes a snapshot (Prometheus buckets) at each scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Finite buckets: 0.5 ms, doubling up to about 4 s; then one for the rest.
const BUCKETS: usize = 14;
const FIRST_MICROS: u64 = 500;

/// Observations by bucket, and their sum.
#[derive(Debug, Default)]
pub struct Latencies {
    counts: [AtomicU64; BUCKETS + 1],
    sum_micros: AtomicU64,
}

/// A histogram as of one moment: each bucket's upper bound (seconds; the last infinite) with
/// the observations in it alone (not cumulated), their sum in seconds and their count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl Latencies {
    pub fn observe(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let bucket = (0..BUCKETS)
            .find(|&i| micros <= FIRST_MICROS << i)
            .unwrap_or(BUCKETS);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        let buckets: Vec<(f64, u64)> = (0..=BUCKETS)
            .map(|i| {
                let upper = if i < BUCKETS {
                    (FIRST_MICROS << i) as f64 / 1e6
                } else {
                    f64::INFINITY
                };
                (upper, self.counts[i].load(Ordering::Relaxed))
            })
            .collect();
        LatencySnapshot {
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let l = Latencies::default();
        l.observe(Duration::from_micros(500));
        l.observe(Duration::from_micros(501));
        l.observe(Duration::from_secs(60));
        let s = l.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.0005, 1));
        assert_eq!(s.buckets[1], (0.001, 1));
        assert_eq!(s.buckets.last(), Some(&(f64::INFINITY, 1)));
        assert!((s.sum_seconds - 60.001001).abs() < 1e-9);
    }
}
