//! `--rate`: choosing the threads storm's stagger so that it reaches a target exit rate.
//!
//! The 2006 thread set its exit rate through the per-thread sleep: thread i of N sleeps
//! `(N-i)*stagger`, so a rep lasts about `N*stagger` once that exceeds the time it takes to create
//! the N threads, and the rate is `N / rep` exits per second. The pacer keeps that shape and only
//! picks the stagger, rep by rep, from what the reps so far took:
//!
//! - the time left for the target, `exits / rate - elapsed`, is split evenly over the reps left;
//! - the next stagger corrects the last one by the difference between the rep time wanted and
//!   the rep time measured, spread over N threads: `s' = s + (want - took) / N`. Where the rep is
//!   sleep-bound (`took = N*s + overhead`) this lands on the wanted time in one step; where it is
//!   creation-bound the stagger falls until it reaches 0 and the storm runs as fast as it can.
//!
//! The first rep, with nothing measured yet, sleeps `1/rate` per thread. A target beyond what the
//! machine can create and reap is not silently missed: the run reports the rate achieved next to
//! the target.

use std::time::Duration;

/// Chooses each rep's stagger for a target rate.
#[derive(Clone, Debug)]
pub struct Pacer {
    threads: f64,
    reps_left: u32,
    /// Time left before the target total elapsed time (ns; negative when behind).
    budget_ns: f64,
    /// The last rep's stagger and how long it took (ns).
    last: Option<(f64, f64)>,
}

impl Pacer {
    /// A pacer for `reps` reps of `threads` threads at `rate` exits per second.
    pub fn new(threads: u32, reps: u32, rate: u64) -> Self {
        let exits = f64::from(threads) * f64::from(reps);
        Self {
            threads: f64::from(threads),
            reps_left: reps,
            budget_ns: exits / rate as f64 * 1e9,
            last: None,
        }
    }

    /// The stagger of the next rep (ns).
    pub fn next_stagger_ns(&self) -> u64 {
        let want = self.budget_ns / f64::from(self.reps_left.max(1));
        let stagger = match self.last {
            None => want / self.threads,
            Some((stagger, took)) => stagger + (want - took) / self.threads,
        };
        stagger.max(0.0).round() as u64
    }

    /// Records that a rep ran with `stagger_ns` and took `took`.
    pub fn rep_done(&mut self, stagger_ns: u64, took: Duration) {
        let took = took.as_nanos() as f64;
        self.budget_ns -= took;
        self.reps_left = self.reps_left.saturating_sub(1);
        self.last = Some((stagger_ns as f64, took));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rep of the 2006 storm: creating N threads takes `create_ns` each; the last one to exit
    /// is thread 0 after `N*stagger`, or the last one created if creation is slower; plus a
    /// fixed overhead (timer slack, joins).
    fn rep_ns(threads: u32, stagger_ns: u64, create_ns: f64, overhead_ns: f64) -> f64 {
        let n = f64::from(threads);
        (n * create_ns).max(n * stagger_ns as f64) + overhead_ns
    }

    /// Runs a whole paced storm in the model; returns the achieved rate.
    fn simulate(threads: u32, reps: u32, rate: u64, create_ns: f64, overhead_ns: f64) -> f64 {
        let mut pacer = Pacer::new(threads, reps, rate);
        let mut total = 0.0;
        for _ in 0..reps {
            let s = pacer.next_stagger_ns();
            let took = rep_ns(threads, s, create_ns, overhead_ns);
            total += took;
            pacer.rep_done(s, Duration::from_nanos(took as u64));
        }
        f64::from(threads) * f64::from(reps) / (total / 1e9)
    }

    #[test]
    fn reaches_a_sleep_bound_rate() {
        // 1000 exits/s with 1000 threads: about 1 ms of stagger, far above a 50 us create cost.
        let achieved = simulate(1000, 10, 1000, 50_000.0, 120_000.0);
        assert!((achieved / 1000.0 - 1.0).abs() < 0.005, "achieved {achieved}");
    }

    #[test]
    fn reaches_a_rate_close_to_the_creation_limit() {
        // 15k exits/s where creation alone allows 20k/s: the first rep misses, the next ones
        // make up for it.
        let achieved = simulate(1000, 10, 15_000, 50_000.0, 2_000_000.0);
        assert!((achieved / 15_000.0 - 1.0).abs() < 0.01, "achieved {achieved}");
    }

    #[test]
    fn an_unreachable_rate_runs_flat_out() {
        let mut pacer = Pacer::new(1000, 3, 1_000_000);
        for _ in 0..3 {
            let s = pacer.next_stagger_ns();
            pacer.rep_done(s, Duration::from_millis(50));
        }
        assert_eq!(pacer.next_stagger_ns(), 0);
        let achieved = simulate(1000, 10, 1_000_000, 50_000.0, 0.0);
        assert!((achieved - 20_000.0).abs() < 200.0, "achieved {achieved}");
    }

    #[test]
    fn first_rep_sleeps_one_exit_interval_per_thread() {
        assert_eq!(Pacer::new(1000, 10, 2000).next_stagger_ns(), 500_000);
    }
}
