//! Latency histograms (HdrHistogram, ns, 3 significant digits) and their summaries.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latencies of one stage (or of the whole exit), with their on/off-CPU split.
#[derive(Clone, Debug)]
pub struct Latency {
    pub hist: Histogram<u64>,
    pub total_ns: u128,
    pub off_cpu_ns: u128,
    /// The part of `off_cpu_ns` spent runnable, waiting for a CPU.
    pub runq_ns: u128,
}

/// The longest latency a histogram tracks exactly; longer ones are recorded as this (an exit
/// that takes an hour is stuck, and the count and mean still say so).
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;

impl Default for Latency {
    fn default() -> Self {
        Self::with_digits(3)
    }
}

impl Latency {
    /// Percentiles within 1 % rather than 0.1 %, in an eighth of the memory (some 37 KB instead
    /// of 270 KB): for what is kept many times over, as each group of exits.
    pub fn coarse() -> Self {
        Self::with_digits(2)
    }

    fn with_digits(significant: u8) -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, significant)
                .expect("valid bounds and precision"),
            total_ns: 0,
            off_cpu_ns: 0,
            runq_ns: 0,
        }
    }
}

impl Latency {
    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn record(&mut self, ns: u64, off_cpu_ns: u64) {
        self.record_waits(ns, off_cpu_ns, 0);
    }

    /// Records one latency with its off-CPU time and the part of that spent runnable.
    pub fn record_waits(&mut self, ns: u64, off_cpu_ns: u64, runq_ns: u64) {
        self.runq_ns += u128::from(runq_ns.min(off_cpu_ns).min(ns));
        self.hist.saturating_record(ns);
        self.total_ns += u128::from(ns);
        self.off_cpu_ns += u128::from(off_cpu_ns.min(ns));
    }

    /// The `quantile` of the latencies recorded since `earlier`, a copy of this one's
    /// histogram then (`None` when none were).
    pub fn quantile_since(&self, earlier: &Histogram<u64>, quantile: f64) -> Option<u64> {
        let mut since = self.hist.clone();
        since.subtract(earlier).ok()?;
        (!since.is_empty()).then(|| since.value_at_quantile(quantile))
    }

    pub fn summary(&self) -> Summary {
        let h = &self.hist;
        let q = |q: f64| if h.is_empty() { 0 } else { h.value_at_quantile(q) };
        Summary {
            count: h.len(),
            mean_ns: if h.is_empty() { 0.0 } else { self.total_ns as f64 / h.len() as f64 },
            min_ns: if h.is_empty() { 0 } else { h.min() },
            p50_ns: q(0.50),
            p90_ns: q(0.90),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: if h.is_empty() { 0 } else { h.max() },
            total_ns: self.total_ns,
            off_cpu_ns: self.off_cpu_ns,
            runq_ns: self.runq_ns,
        }
    }

    pub fn buckets(&self) -> Vec<Bucket> {
        recorded_buckets(&self.hist)
    }
}

/// One non-empty HdrHistogram bucket: `count` values from `low_ns` to `high_ns` inclusive, values
/// the histogram does not tell apart (3 significant digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub low_ns: u64,
    pub high_ns: u64,
    pub count: u64,
}

/// Every non-empty bucket, lowest first. Recording each bucket's `high_ns` `count` times rebuilds
/// the histogram exactly.
pub fn recorded_buckets(h: &Histogram<u64>) -> Vec<Bucket> {
    h.iter_recorded()
        .map(|v| Bucket {
            low_ns: h.lowest_equivalent(v.value_iterated_to()),
            high_ns: v.value_iterated_to(),
            count: v.count_at_value(),
        })
        .collect()
}

/// One line of HdrHistogram's percentile distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PercentilePoint {
    /// The quantile level reached, 0 to 1.
    pub quantile: f64,
    /// The highest value at that level (the top of its bucket).
    pub value_ns: u64,
    /// Values at or below `value_ns`.
    pub count_at_or_below: u64,
}

/// HdrHistogram's percentile distribution (`outputPercentileDistribution`): levels that close
/// half the remaining distance to 100% in `ticks_per_half_distance` steps, so the tail gets as
/// many points as the body; the last point is level 1 at the maximum. Empty for an empty
/// histogram.
pub fn percentile_distribution(
    h: &Histogram<u64>,
    ticks_per_half_distance: u32,
) -> Vec<PercentilePoint> {
    let mut count_at_or_below = 0;
    h.iter_quantiles(ticks_per_half_distance)
        .map(|v| {
            count_at_or_below += v.count_since_last_iteration();
            PercentilePoint {
                quantile: v.quantile_iterated_to(),
                value_ns: v.value_iterated_to(),
                count_at_or_below,
            }
        })
        .collect()
}

/// What a histogram says, in numbers. Percentiles are HdrHistogram's (within 0.1%); mean and
/// totals are exact. A stage's row of the run document embeds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: u64,
    pub mean_ns: f64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    #[serde(deserialize_with = "u128_read")]
    pub total_ns: u128,
    /// Stages' rows of documents before schema 1 have only the shares: 0 there.
    #[serde(default, deserialize_with = "u128_read")]
    pub off_cpu_ns: u128,
    #[serde(default, deserialize_with = "u128_read")]
    pub runq_ns: u128,
}

/// Reads a total of ns written as a u128. serde cannot read a u128 through a flattened struct
/// (a stage's row embeds its summary), and a total beyond u64 (584 years) is not a run's.
fn u128_read<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
    u64::deserialize(d).map(u128::from)
}

impl Summary {
    /// Fraction of the off-CPU time spent runnable (preempted, waiting for a CPU) rather than
    /// blocked.
    pub fn runq_share(&self) -> f64 {
        if self.off_cpu_ns == 0 { 0.0 } else { self.runq_ns as f64 / self.off_cpu_ns as f64 }
    }

    /// Fraction of the time spent off-CPU.
    pub fn off_cpu_share(&self) -> f64 {
        if self.total_ns == 0 { 0.0 } else { self.off_cpu_ns as f64 / self.total_ns as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_of_what_came_since_a_copy() {
        let mut l = Latency::default();
        for _ in 0..100 {
            l.record(50_000, 0);
        }
        let earlier = l.hist.clone();
        assert_eq!(l.quantile_since(&earlier, 0.5), None, "nothing since");
        for v in [1_000, 2_000, 3_000] {
            l.record(v, 0);
        }
        assert_eq!(l.quantile_since(&earlier, 0.5), Some(2_000));
        assert_eq!(l.quantile_since(&earlier, 0.1), Some(1_000));
    }

    #[test]
    fn summary_of_known_values() {
        let mut l = Latency::default();
        for v in 1..=1000u64 {
            l.record(v * 1000, if v % 2 == 0 { 500 } else { 0 });
        }
        let s = l.summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.total_ns, 500_500_000);
        assert!((s.mean_ns - 500_500.0).abs() < 1e-6);
        assert_eq!(s.min_ns, 1000);
        // Within HdrHistogram's 3 significant digits.
        let close = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 1e-3;
        assert!(close(s.p50_ns, 500_000), "p50 {}", s.p50_ns);
        assert!(close(s.p90_ns, 900_000), "p90 {}", s.p90_ns);
        assert!(close(s.p99_ns, 990_000), "p99 {}", s.p99_ns);
        assert!(close(s.max_ns, 1_000_000), "max {}", s.max_ns);
        assert_eq!(s.off_cpu_ns, 250_000);
    }

    #[test]
    fn buckets_rebuild_the_histogram() {
        let mut l = Latency::default();
        for v in [1, 7, 7, 1_000, 2_049, 123_456, 123_457, 9_999_999] {
            l.record(v, 0);
        }
        let buckets = l.buckets();
        assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), 8);
        // 123456 and 123457 share a bucket at 3 significant digits; 7 was recorded twice.
        assert_eq!(buckets.len(), 6, "{buckets:?}");
        assert!(buckets.windows(2).all(|w| w[0].high_ns < w[1].low_ns), "{buckets:?}");
        assert_eq!(buckets[1], Bucket { low_ns: 7, high_ns: 7, count: 2 });
        let mut rebuilt = Latency::default().hist;
        for b in &buckets {
            assert!(b.low_ns <= b.high_ns);
            rebuilt.record_n(b.high_ns, b.count).unwrap();
        }
        assert_eq!(rebuilt, l.hist);
    }

    #[test]
    fn percentile_distribution_ends_at_the_maximum() {
        let mut l = Latency::default();
        for v in 1..=10_000u64 {
            l.record(v * 100, 0);
        }
        let points = percentile_distribution(&l.hist, 5);
        let last = points.last().unwrap();
        assert_eq!(
            (last.quantile, last.value_ns, last.count_at_or_below),
            (1.0, l.hist.max(), 10_000)
        );
        assert_eq!(points[0].quantile, 0.0);
        assert!(points.windows(2).all(|w| w[0].quantile < w[1].quantile
            && w[0].value_ns <= w[1].value_ns
            && w[0].count_at_or_below <= w[1].count_at_or_below));
        // As many points between 99% and 99.9% as between 90% and 99%.
        let between = |lo: f64, hi: f64| {
            points.iter().filter(|p| p.quantile >= lo && p.quantile < hi).count()
        };
        assert!(between(0.90, 0.99).abs_diff(between(0.99, 0.999)) <= 1, "{points:?}");
        assert!(percentile_distribution(&Latency::default().hist, 5).is_empty());
    }

    #[test]
    fn empty_summary_is_zero() {
        let s = Latency::default().summary();
        assert_eq!((s.count, s.p50_ns, s.max_ns, s.total_ns), (0, 0, 0, 0));
        assert_eq!(s.off_cpu_share(), 0.0);
    }
}
