//! A latency histogram whose every observation is two relaxed atomic additions: no lock, no
//! allocation, so the request path can time every phase of every request.
//!
//! The buckets are fixed (docs/operations.md#metrics): 50 µs × 2^k for k = 0..=20 (up to about 52
//! s), then 60 s, then `+Inf`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// The first bucket's upper bound, in nanoseconds.
const FIRST_NANOS: u64 = 50_000;
/// How many buckets double from the first: 50 µs to 50 µs × 2^20.
const DOUBLING: usize = 21;
/// The bucket after the doubling ones: 60 s.
const LAST_NANOS: u64 = 60_000_000_000;
/// Every bucket, `+Inf` included.
pub(crate) const BUCKETS: usize = DOUBLING + 2;

/// The upper bound of each bucket in seconds, `+Inf` last.
pub(crate) fn upper_bounds() -> [f64; BUCKETS] {
    let mut bounds = [f64::INFINITY; BUCKETS];
    for (k, bound) in bounds.iter_mut().take(DOUBLING).enumerate() {
        *bound = 50e-6 * f64::from(1u32 << k);
    }
    bounds[DOUBLING] = 60.0;
    bounds
}

/// The bucket of an observation of `nanos`: the first whose upper bound is at least it.
fn bucket_of(nanos: u64) -> usize {
    if nanos <= FIRST_NANOS {
        return 0;
    }
    // nanos ≤ FIRST × 2^k  ⟺  ceil(nanos / FIRST) ≤ 2^k  ⟺  k ≥ ceil(log2(ceil(nanos / FIRST))).
    let multiple = nanos.div_ceil(FIRST_NANOS);
    let k = (u64::BITS - (multiple - 1).leading_zeros()) as usize;
    if k < DOUBLING {
        k
    } else if nanos <= LAST_NANOS {
        DOUBLING
    } else {
        DOUBLING + 1
    }
}

/// A histogram of durations with the buckets above. Clones share the same counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct LatencyHistogram {
    inner: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Observations per bucket (not cumulative); their sum is the count.
    buckets: [AtomicU64; BUCKETS],
    /// The sum of every observation, in nanoseconds (wraps after some 584 years).
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// Counts one observation of `elapsed`.
    pub(crate) fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.inner.buckets[bucket_of(nanos)].fetch_add(1, Ordering::Relaxed);
        self.inner.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// How many observations there were (the tests' reading; `/metrics` encodes the buckets).
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.inner
            .buckets
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .sum()
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let bounds = upper_bounds();
        let mut buckets = [(0.0, 0u64); BUCKETS];
        for ((slot, bound), count) in buckets.iter_mut().zip(bounds).zip(&self.inner.buckets) {
            *slot = (bound, count.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|(_, count)| count).sum();
        let sum = self.inner.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(
            sum,
            count,
            &buckets,
            None::<&HashMap<usize, Exemplar<NoLabelSet, f64>>>,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_double_from_50_microseconds_to_52_seconds_then_60_seconds() {
        let bounds = upper_bounds();
        assert_eq!(bounds[0], 50e-6);
        assert_eq!(bounds[1], 100e-6);
        assert_eq!(bounds[20], 52.4288);
        assert_eq!(bounds[21], 60.0);
        assert_eq!(bounds[22], f64::INFINITY);
        assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn an_observation_lands_in_the_first_bucket_that_holds_it() {
        let bounds = upper_bounds();
        for nanos in [
            0,
            1,
            49_999,
            50_000,
            50_001,
            99_999,
            100_000,
            100_001,
            150_000,
            1_000_000,
            999_999_999,
            52_428_800_000,
            52_428_800_001,
            60_000_000_000,
            60_000_000_001,
            u64::MAX,
        ] {
            let bucket = bucket_of(nanos);
            let seconds = nanos as f64 / 1e9;
            // Compared in nanoseconds, exactly: the bound of bucket k is 50 µs × 2^k.
            let bound_nanos = |k: usize| match k {
                k if k < DOUBLING => FIRST_NANOS << k,
                k if k == DOUBLING => LAST_NANOS,
                _ => u64::MAX,
            };
            assert!(nanos <= bound_nanos(bucket), "{nanos} ns above bucket {bucket}");
            if bucket > 0 {
                assert!(
                    nanos > bound_nanos(bucket - 1),
                    "{nanos} ns fits bucket {}",
                    bucket - 1
                );
            }
            assert!(seconds <= bounds[bucket] * (1.0 + 1e-12));
        }
    }

    #[test]
    fn observations_are_counted_and_summed() {
        let histogram = LatencyHistogram::default();
        let shared = histogram.clone();
        histogram.observe(Duration::from_micros(30));
        shared.observe(Duration::from_millis(3));
        histogram.observe(Duration::from_secs(3600));
        assert_eq!(histogram.count(), 3);
        assert_eq!(histogram.inner.buckets[0].load(Ordering::Relaxed), 1);
        assert_eq!(
            histogram.inner.buckets[6].load(Ordering::Relaxed),
            1,
            "3 ms ≤ 3.2 ms"
        );
        assert_eq!(histogram.inner.buckets[BUCKETS - 1].load(Ordering::Relaxed), 1);
        assert_eq!(
            histogram.inner.sum_nanos.load(Ordering::Relaxed),
            30_000 + 3_000_000 + 3_600_000_000_000
        );
    }
}
