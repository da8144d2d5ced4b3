//! What exitprof itself cost a run: its own CPU time and peak memory, its workload children left
//! out. The engine measures it.

use serde::{Deserialize, Serialize};

/// exitprof's own use of the machine so far.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct OwnCost {
    /// CPU time of all of exitprof's threads, in seconds.
    #[serde(flatten)]
    pub cpu: CpuTime,
    /// The part of it spent while the target ran and its last records came in: reading and
    /// profiling the exits, without loading, attaching, detaching or reporting.
    pub collecting: CpuTime,
    /// Its peak resident memory (VmHWM in /proc/self/status), in bytes; `null` where it cannot
    /// be read. (`ru_maxrss` would not do: it keeps the peak of the process image before exec.)
    pub peak_rss_bytes: Option<u64>,
}

/// User and system CPU time of exitprof's threads (`getrusage(RUSAGE_SELF)`), in seconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct CpuTime {
    pub user_s: f64,
    pub sys_s: f64,
}

impl CpuTime {
    /// The CPU time spent since `earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self { user_s: self.user_s - earlier.user_s, sys_s: self.sys_s - earlier.sys_s }
    }
}
