//! What the kernel side counted: each attached program's runs and run time (while BPF
//! statistics are on), and its counters of what it could not keep and what it did besides.

use std::collections::BTreeMap;

use exitprof_common::counters::{self, Kind};
use serde::{Deserialize, Serialize};

/// What the kernel measured of one attached program while BPF statistics were on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCost {
    pub program: String,
    /// Times it ran.
    pub runs: u64,
    /// Time spent in it, in total (ns).
    pub run_ns: u64,
}

/// The kernel side's counters (`exitprof_common::counters::KERNEL`), each summed over CPUs:
/// everything it could not keep, and what it did besides recording exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLosses(pub [u64; counters::COUNT as usize]);

impl Default for KernelLosses {
    fn default() -> Self {
        Self([0; counters::COUNT as usize])
    }
}

impl KernelLosses {
    /// What was counted since `earlier` (the counters only grow).
    pub fn since(&self, earlier: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i].saturating_sub(earlier.0[i])))
    }

    /// Both counts together.
    pub fn plus(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i].saturating_add(other.0[i])))
    }

    /// Every counter a person may read by its name, as a record file keeps them (the
    /// bookkeeping of exits opened and ended is not kept).
    pub fn by_name(&self) -> BTreeMap<String, u64> {
        counters::KERNEL
            .iter()
            .zip(self.0)
            .filter(|(count, _)| count.kind != Kind::Bookkeeping)
            .map(|(count, n)| (count.key.to_owned(), n))
            .collect()
    }

    /// The counters of [`KernelLosses::by_name`]; those it lacks are 0.
    pub fn from_names(counts: &BTreeMap<String, u64>) -> Self {
        Self(std::array::from_fn(|i| counts.get(counters::KERNEL[i].key).copied().unwrap_or(0)))
    }
}
