//! Latencies in fixed buckets, as Prometheus histograms have them: 1-2-5 per decade from 100 ns
//! to 10 s, the same on every kernel and machine so that their series can be aggregated. Filled
//! from an HdrHistogram at once, or one latency at a time where an HdrHistogram per series would
//! cost too much memory (the series of each group of exits).

use hdrhistogram::Histogram;

use crate::analysis::histogram::recorded_buckets;

/// The finite bucket bounds, in ns.
pub fn bounds_ns() -> Vec<u64> {
    let decades = (2..10).map(|exp| 10u64.pow(exp));
    let mut bounds: Vec<u64> = decades.flat_map(|d| [d, 2 * d, 5 * d]).collect();
    bounds.push(10_000_000_000);
    bounds
}

/// A latency histogram in the fixed buckets: cumulative counts per bound of [`bounds_ns`], the
/// count and the exact sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedBuckets {
    cumulative: Vec<u64>,
    count: u64,
    sum_ns: u128,
}

impl Default for FixedBuckets {
    fn default() -> Self {
        Self { cumulative: vec![0; bounds_ns().len()], count: 0, sum_ns: 0 }
    }
}

impl FixedBuckets {
    /// The fixed buckets of an HdrHistogram whose values sum to `sum_ns`, in one pass over its
    /// recorded buckets. (HdrHistogram's bucket holding a bound counts in full, so a value up to
    /// 0.1% above a bound can count under it.)
    pub fn of(hist: &Histogram<u64>, sum_ns: u128) -> Self {
        let recorded = recorded_buckets(hist);
        let mut below = 0;
        let mut next = recorded.iter().peekable();
        let cumulative = bounds_ns()
            .into_iter()
            .map(|bound| {
                while let Some(b) = next.next_if(|b| b.low_ns <= bound) {
                    below += b.count;
                }
                below
            })
            .collect();
        Self { cumulative, count: hist.len(), sum_ns }
    }

    /// Counts one latency, exactly.
    pub fn record(&mut self, ns: u64) {
        let bounds = bounds_ns();
        let first = bounds.partition_point(|&bound| bound < ns);
        for below in &mut self.cumulative[first..] {
            *below += 1;
        }
        self.count += 1;
        self.sum_ns += u128::from(ns);
    }

    /// The count at or below each bound of [`bounds_ns`].
    pub fn cumulative(&self) -> &[u64] {
        &self.cumulative
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One latency at a time counts as the HdrHistogram of the same latencies, away from the
    /// bounds (where HdrHistogram's buckets may count a value just above a bound under it).
    #[test]
    fn recorded_one_at_a_time_as_from_a_histogram() {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        let mut fixed = FixedBuckets::default();
        let latencies = [1u64, 150, 999, 1_500, 7_000, 42_000, 3_000_000, 20_000_000_000];
        for ns in latencies {
            hist.record(ns).unwrap();
            fixed.record(ns);
        }
        let sum = latencies.iter().map(|&ns| u128::from(ns)).sum();
        assert_eq!(fixed, FixedBuckets::of(&hist, sum));
        // A bound itself counts under it; beyond the last bound only in the count.
        let mut at_bound = FixedBuckets::default();
        at_bound.record(100);
        assert_eq!(at_bound.cumulative()[0], 1);
        assert_eq!(*fixed.cumulative().last().unwrap(), 7);
        assert_eq!(fixed.count(), 8);
    }
}
