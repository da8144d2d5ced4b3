//! Reads that serve makes of the kernel besides the records (its loss counters, the probes'
//! misses, the programs' statistics) can fail for a moment: tracefs unmounted under it, a
//! descriptor table full. A failure is counted (`exitprof_read_errors_total{source}`), logged
//! the first time for its source, and the last value read stands in for it, so that no counter
//! served ever goes back; serve carries on.

use std::fmt::Display;

/// What serve reads, each of which can fail on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The eBPF object's loss counters (the `COUNTERS` map).
    LossCounters,
    /// The probes' misses: `kprobe_profile` and the programs' recursion misses.
    ProbeMisses,
    /// The programs' runs and run time (`--bpf-stats`).
    ProgramStats,
}

impl Source {
    pub const ALL: [Self; 3] = [Self::LossCounters, Self::ProbeMisses, Self::ProgramStats];

    /// The `source` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::LossCounters => "loss_counters",
            Self::ProbeMisses => "probe_misses",
            Self::ProgramStats => "program_stats",
        }
    }
}

/// Failed reads so far, by source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadErrors {
    failed: [u64; Source::ALL.len()],
}

impl ReadErrors {
    /// What `read` returned, kept in `last`; or, where it failed, `last` as it was, the failure
    /// counted and logged if it is its source's first.
    pub fn keep<T: Clone, E: Display>(
        &mut self,
        source: Source,
        read: Result<T, E>,
        last: &mut T,
    ) -> T {
        match read {
            Ok(value) => *last = value,
            Err(e) => {
                if self.count(source) {
                    log::warn!(
                        "reading {}: {e:#} (serving the last value read; further failures are \
                         counted in exitprof_read_errors_total{{source=\"{}\"}}, not logged)",
                        source.name(),
                        source.name()
                    );
                }
            }
        }
        last.clone()
    }

    /// Counts one failure; true if it is its source's first.
    fn count(&mut self, source: Source) -> bool {
        let failed = &mut self.failed[source as usize];
        *failed += 1;
        *failed == 1
    }

    /// Each source with its failed reads.
    pub fn by_source(&self) -> impl Iterator<Item = (Source, u64)> + '_ {
        Source::ALL.into_iter().map(|s| (s, self.failed[s as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure keeps the last value, is counted for its source only, and only the first of a
    /// source is to be logged.
    #[test]
    fn a_failed_read_is_counted_and_the_last_value_served() {
        let mut errors = ReadErrors::default();
        let mut last = 0u64;
        assert_eq!(errors.keep(Source::LossCounters, Ok::<_, String>(7), &mut last), 7);
        let failed = Err::<u64, _>("EMFILE".to_owned());
        assert_eq!(errors.keep(Source::LossCounters, failed.clone(), &mut last), 7);
        assert_eq!(errors.keep(Source::LossCounters, failed, &mut last), 7);
        assert_eq!(errors.keep(Source::LossCounters, Ok::<_, String>(9), &mut last), 9);
        let counts: Vec<(&str, u64)> = errors.by_source().map(|(s, n)| (s.name(), n)).collect();
        assert_eq!(counts, [("loss_counters", 2), ("probe_misses", 0), ("program_stats", 0)]);
        assert!(errors.count(Source::ProgramStats), "a source's first failure is logged");
        assert!(!errors.count(Source::ProgramStats), "its second is not");
        assert!(!errors.count(Source::LossCounters));
    }
}
