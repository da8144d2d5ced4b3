//! Telling a change from run-to-run noise. The run is the unit of noise: runs of the same
//! workload differ by more than the spread of their exits suggests (what else the machine runs,
//! where memory lands, which CPUs the storm gets), so each figure is taken once per run and the
//! runs' figures are what varies.
//!
//! With at least [`RUNS_FOR_AN_INTERVAL`] runs a side, a change has Welch's t interval over the
//! runs (the sides' runs may spread differently), at a level that holds for all the rows of a
//! table together (Bonferroni): a diff of runs of the same workload then flags any row of a
//! column in about 5% of diffs. With fewer runs no interval can be had, and a change counts as
//! beyond noise only when its figure more than doubles or halves ([`FEW_RUNS_FACTOR`]) and moves
//! by a tenth of the whole exit's or more ([`FEW_RUNS_FLOOR`]), and only for the figures that vary
//! less than that between runs. Runs whose figures do not differ at all give no interval either:
//! nothing in them tells how far runs of a workload differ, and a zero-width interval would call
//! any change, however small, beyond noise.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF as _, StudentsT};

/// The confidence of a table's intervals, all rows together.
pub const CONFIDENCE: f64 = 0.95;
/// Runs a side needed for an interval: with two, one run's spread is all there is to go by.
pub const RUNS_FOR_AN_INTERVAL: usize = 3;
/// With fewer runs, how many times larger or smaller a figure must be to count as beyond noise.
/// Between two runs of the same storm on a 2-CPU VM, stages where exits compute varied by up to
/// 1.5x in time per exit, mean and median (a stage of a handful of exits by up to 2x); the
/// factor leaves room above that.
pub const FEW_RUNS_FACTOR: f64 = 2.0;

/// With fewer runs, the least part of the whole exit's figure (on side A) a stage's figure must
/// move by to count as beyond noise: a stage of a few exits and some 20 µs doubled or halved
/// between two runs of one program whose exits take 2 ms, within the whole exit's own spread.
pub const FEW_RUNS_FLOOR: f64 = 0.1;

/// How a figure varies between runs, which decides whether one run a side can judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// Time on a CPU, a mean, a median: varies by less than [`FEW_RUNS_FACTOR`] between runs.
    Steady,
    /// A tail percentile or time off a CPU: follows what else the machine did, by up to 5x
    /// (p99 of a stage) and 200x (time blocked) between two runs of the same storm.
    Volatile,
}

/// A figure of side A against the same figure of side B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// Side A's figure: the mean of its runs' figures. B's likewise.
    pub a: f64,
    pub b: f64,
    /// `b - a`.
    pub delta: f64,
    /// `delta / a`; `null` when A's figure is 0.
    pub relative: Option<f64>,
    /// The interval of `delta` from the runs; `null` with fewer than 3 runs a side, or where
    /// the runs of each side do not differ at all (`no_spread`).
    pub interval: Option<Interval>,
    /// Each side's runs have exactly the same figure: their spread says nothing of the noise.
    pub no_spread: bool,
    /// The interval leaves out 0, or (fewer runs) the figure changed more than 2x either way and
    /// by a tenth of the whole exit's or more;
    /// `null` where fewer runs cannot tell (a tail percentile, time off a CPU), or where the runs
    /// did not vary at all and the figure moved.
    pub beyond_noise: Option<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Change {
    /// The change of a figure from each side's runs' values; `None` when a side has none.
    /// `whole` is the whole exit's same figure on side A, the scale of [`FEW_RUNS_FLOOR`].
    pub fn of(a: &[f64], b: &[f64], level: f64, figure: Figure, whole: f64) -> Option<Self> {
        let (mean_a, mean_b) = (mean(a)?, mean(b)?);
        let delta = mean_b - mean_a;
        let enough = a.len().min(b.len()) >= RUNS_FOR_AN_INTERVAL;
        let interval = if enough { welch(a, b, level) } else { None };
        let no_spread = enough && interval.is_none();
        let beyond_noise = match (interval, figure) {
            (Some(i), _) => Some(i.low > 0.0 || i.high < 0.0),
            // Nothing moved: no noise is needed to say so.
            (None, _) if no_spread && delta == 0.0 => Some(false),
            (None, _) if no_spread => None,
            (None, Figure::Steady) => {
                Some(beyond_factor(mean_a, mean_b) && delta.abs() >= FEW_RUNS_FLOOR * whole)
            }
            (None, Figure::Volatile) => None,
        };
        Some(Self {
            a: mean_a,
            b: mean_b,
            delta,
            relative: (mean_a != 0.0).then(|| delta / mean_a),
            interval,
            no_spread,
            beyond_noise,
        })
    }

    pub fn is_beyond_noise(&self) -> bool {
        self.beyond_noise == Some(true)
    }
}

/// The level of each row's interval for `rows` rows to hold together at [`CONFIDENCE`].
pub fn row_level(rows: usize) -> f64 {
    1.0 - (1.0 - CONFIDENCE) / rows.max(1) as f64
}

/// Welch's t interval of `mean(b) - mean(a)` at `level`, for 2 or more values a side; `None`
/// when neither side's values vary (the standard error is 0).
pub fn welch(a: &[f64], b: &[f64], level: f64) -> Option<Interval> {
    let (ma, va) = mean_and_variance(a);
    let (mb, vb) = mean_and_variance(b);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (sa, sb) = (va / na, vb / nb);
    let delta = mb - ma;
    let se = (sa + sb).sqrt();
    if se == 0.0 {
        return None;
    }
    // Welch-Satterthwaite degrees of freedom.
    let df = (sa + sb).powi(2) / (sa.powi(2) / (na - 1.0) + sb.powi(2) / (nb - 1.0));
    let t = StudentsT::new(0.0, 1.0, df)
        .map_or(f64::INFINITY, |t| t.inverse_cdf(1.0 - (1.0 - level) / 2.0));
    Some(Interval { low: delta - t * se, high: delta + t * se })
}

/// More than [`FEW_RUNS_FACTOR`] times larger or smaller (from or to 0 counts as beyond).
fn beyond_factor(a: f64, b: f64) -> bool {
    let (low, high) = (a.abs().min(b.abs()), a.abs().max(b.abs()));
    high > 0.0 && high > low * FEW_RUNS_FACTOR
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The mean and the sample variance (n - 1).
fn mean_and_variance(values: &[f64]) -> (f64, f64) {
    let m = mean(values).unwrap_or_default();
    let n = values.len() as f64;
    let ss: f64 = values.iter().map(|v| (v - m).powi(2)).sum();
    (m, if n > 1.0 { ss / (n - 1.0) } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(x: f64, y: f64, tolerance: f64) -> bool {
        (x - y).abs() <= tolerance
    }

    #[test]
    fn welch_matches_the_textbook() {
        // Equal spreads, 3 runs a side: df = 4, t(0.975, 4) = 2.776445.
        let i = welch(&[10.0, 12.0, 14.0], &[20.0, 22.0, 24.0], 0.95).unwrap();
        let se = (4.0f64 / 3.0 + 4.0 / 3.0).sqrt();
        assert!(close(i.low, 10.0 - 2.776445 * se, 1e-4), "{i:?}");
        assert!(close(i.high, 10.0 + 2.776445 * se, 1e-4), "{i:?}");
        // Unequal spreads and sizes: df = 5.9305 (Welch-Satterthwaite), so t lies between
        // t(0.975, 6) = 2.446912 and t(0.975, 5) = 2.570582.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 9.0, 12.0, 15.0, 18.0, 21.0];
        let i = welch(&a, &b, 0.95).unwrap();
        let (sa, sb) = (2.5 / 5.0, 31.5 / 6.0);
        let df = (sa + sb) * (sa + sb) / (sa * sa / 4.0 + sb * sb / 5.0);
        assert!(close(df, 5.9305, 1e-4), "df {df}");
        let t = (i.high - 10.5) / (sa + sb).sqrt();
        assert!(close(i.low, 10.5 - t * (sa + sb).sqrt(), 1e-9), "{i:?}");
        assert!(t > 2.446912 && t < 2.470, "t {t}");
        // Runs that agree exactly: no spread, no interval.
        assert_eq!(welch(&[5.0; 3], &[7.0; 3], 0.95), None);
        assert!(welch(&[5.0; 3], &[7.0, 7.0, 7.5], 0.95).is_some());
    }

    #[test]
    fn rows_together_hold_at_95_percent() {
        assert!(close(row_level(1), 0.95, 1e-12));
        assert!(close(row_level(5), 0.99, 1e-12));
        let one = welch(&[10.0, 12.0, 14.0], &[20.0, 22.0, 24.0], row_level(1)).unwrap();
        let five = welch(&[10.0, 12.0, 14.0], &[20.0, 22.0, 24.0], row_level(5)).unwrap();
        assert!(five.low < one.low && five.high > one.high, "{one:?} {five:?}");
    }

    #[test]
    fn three_runs_a_side_judge_by_the_interval() {
        let level = row_level(1);
        let within =
            Change::of(&[100.0, 110.0, 90.0], &[105.0, 95.0, 115.0], level, Figure::Steady, 100.0);
        let within = within.unwrap();
        assert_eq!((within.delta, within.beyond_noise), (5.0, Some(false)));
        assert!(within.interval.unwrap().low < 0.0);
        let beyond = Change::of(
            &[100.0, 102.0, 98.0],
            &[120.0, 118.0, 122.0],
            level,
            Figure::Volatile,
            100.0,
        );
        let beyond = beyond.unwrap();
        assert_eq!(beyond.beyond_noise, Some(true));
        assert!(close(beyond.relative.unwrap(), 0.2, 1e-12));
        assert!(Change::of(&[], &[1.0], level, Figure::Steady, 1.0).is_none());
    }

    #[test]
    fn runs_that_do_not_vary_claim_no_interval() {
        let level = row_level(1);
        // Identical figures a side (3 copies of one run each): +4 ns is not beyond noise.
        let moved = Change::of(&[100.0; 3], &[104.0; 3], level, Figure::Steady, 100.0).unwrap();
        assert_eq!((moved.interval, moved.no_spread, moved.beyond_noise), (None, true, None));
        assert!(!moved.is_beyond_noise());
        let still = Change::of(&[0.0; 3], &[0.0; 4], level, Figure::Steady, 100.0).unwrap();
        assert_eq!((still.no_spread, still.beyond_noise), (true, Some(false)));
        // One side spreads: the interval is that side's.
        let spread = Change::of(&[100.0; 3], &[150.0, 151.0, 152.0], level, Figure::Steady, 1.0);
        let spread = spread.unwrap();
        assert!(!spread.no_spread && spread.is_beyond_noise(), "{spread:?}");
    }

    #[test]
    fn one_run_a_side_judges_only_what_doubles_or_halves() {
        let judge = |a: f64, b: f64, figure| Change::of(&[a], &[b], 0.95, figure, 100.0).unwrap();
        let within = judge(100.0, 190.0, Figure::Steady);
        assert_eq!((within.interval, within.beyond_noise), (None, Some(false)));
        assert_eq!(judge(100.0, 210.0, Figure::Steady).beyond_noise, Some(true));
        assert_eq!(judge(100.0, 45.0, Figure::Steady).beyond_noise, Some(true));
        assert_eq!(judge(0.0, 20.0, Figure::Steady).beyond_noise, Some(true));
        assert_eq!(judge(0.0, 0.0, Figure::Steady).beyond_noise, Some(false));
        // A stage of a few nanoseconds may double: the whole exit's noise hides that.
        assert_eq!(judge(5.0, 12.0, Figure::Steady).beyond_noise, Some(false));
        assert_eq!(judge(5.0, 15.0, Figure::Steady).beyond_noise, Some(true));
        // Tails and time off a CPU vary more than that between runs.
        assert_eq!(judge(100.0, 1_000.0, Figure::Volatile).beyond_noise, None);
        // Two runs a side are still too few for an interval.
        let two = Change::of(&[100.0, 101.0], &[300.0, 301.0], 0.95, Figure::Steady, 100.0);
        let two = two.unwrap();
        assert_eq!((two.interval, two.beyond_noise), (None, Some(true)));
    }
}
