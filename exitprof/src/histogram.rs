//! Latency histograms (HdrHistogram, ns, 3 significant digits) and their summaries.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies of one stage (or of the whole exit), with their on/off-CPU split.
#[derive(Clone, Debug)]
pub struct Latency {
    pub hist: Histogram<u64>,
    pub total_ns: u128,
    pub off_cpu_ns: u128,
}

/// The longest latency a histogram tracks exactly; longer ones are recorded as this (an exit
/// that takes an hour is stuck, and the count and mean still say so).
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;

impl Default for Latency {
    fn default() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3)
                .expect("valid bounds and precision"),
            total_ns: 0,
            off_cpu_ns: 0,
        }
    }
}

impl Latency {
    pub fn record(&mut self, ns: u64, off_cpu_ns: u64) {
        self.hist.saturating_record(ns);
        self.total_ns += u128::from(ns);
        self.off_cpu_ns += u128::from(off_cpu_ns.min(ns));
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
        }
    }
}

/// What a histogram says, in numbers. Percentiles are HdrHistogram's (within 0.1%); mean and
/// totals are exact.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub mean_ns: f64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub total_ns: u128,
    pub off_cpu_ns: u128,
}

impl Summary {
    /// Fraction of the time spent off-CPU.
    pub fn off_cpu_share(&self) -> f64 {
        if self.total_ns == 0 { 0.0 } else { self.off_cpu_ns as f64 / self.total_ns as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn empty_summary_is_zero() {
        let s = Latency::default().summary();
        assert_eq!((s.count, s.p50_ns, s.max_ns, s.total_ns), (0, 0, 0, 0));
        assert_eq!(s.off_cpu_share(), 0.0);
    }
}
