//! Robust statistics over repeated runs: medians and spreads, as the noisy machines these
//! comparisons run on require.

use serde::Serialize;

/// The median and quartiles of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// Quartiles by linear interpolation between order statistics (type 7, as R and NumPy).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let h = (v.len() - 1) as f64 * p;
            let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
            v[lo] + (h - lo as f64) * (v[hi] - v[lo])
        };
        Self {
            median: q(0.5),
            q1: q(0.25),
            q3: q(0.75),
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        }
    }

    /// Interquartile range.
    pub fn iqr(&self) -> f64 {
        self.q3 - self.q1
    }
}

/// `(yes - no) / no * 100`, the overhead formula of the 2006 and 2012 LKML threads; 0 when `no`
/// is 0.
pub fn overhead_pct(yes: f64, no: f64) -> f64 {
    if no == 0.0 { 0.0 } else { (yes - no) / no * 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.median, s.q1, s.q3), (2.5, 1.75, 3.25));
        assert_eq!((s.min, s.max, s.n), (1.0, 4.0, 4));
        assert_eq!(s.iqr(), 1.5);
        let odd = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!(odd.median, 3.0);
        assert_eq!(Spread::of(&[]), Spread::default());
    }

    #[test]
    fn overhead_is_relative_to_the_baseline() {
        assert!((overhead_pct(1.61, 1.54) - 4.545).abs() < 1e-3);
        assert_eq!(overhead_pct(1.0, 0.0), 0.0);
    }
}
