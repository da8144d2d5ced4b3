//! What exitprof runs in its children, and what became of them: `wait4`'s statuses and rusage
//! and the drivers' reports, from which a storm's exit rate is computed as the 2006 thread did.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use super::Storm;

/// What exitprof runs in its children.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// A storm driven by exitprof's own code; the drivers' exits are not part of it.
    Storm(Storm),
    /// A program, found before anything started; its exits and its descendants' are the target.
    Command { program: PathBuf, argv: Vec<OsString> },
}

impl Workload {
    /// The exits the workload will cause, when that is known in advance.
    pub fn expected_exits(&self) -> Option<u64> {
        match self {
            Self::Storm(Storm::Threads(p)) => Some(u64::from(p.threads) * u64::from(p.reps)),
            Self::Storm(Storm::Fork(f) | Storm::Ipcns(f)) => Some(u64::from(f.count)),
            Self::Storm(Storm::Netns(n)) => Some(u64::from(n.forks.count)),
            Self::Command { .. } => None,
        }
    }
}

/// How the workload children ended, as `wait4` reported them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildOutcome {
    /// Raw wait status of each child, by pid.
    pub statuses: Vec<(u32, i32)>,
    /// User and sys time of the children and of everything they waited for.
    pub user: Duration,
    pub sys: Duration,
    /// From the gates opening to the last child being reaped.
    pub elapsed: Duration,
    /// The drivers' reports added up; `None` when a child sent none (killed, or a command).
    pub report: Option<DriverReport>,
}

/// What a driver tells exitprof when its storm is over.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverReport {
    /// Tasks the driver created (threads or processes).
    pub created: u64,
    /// Tasks it saw exit (joined or waited for).
    pub exited: u64,
    /// Per rep, the stagger the rate pacer chose (ns); empty without --rate.
    pub staggers_ns: Vec<u64>,
}

impl DriverReport {
    /// Two drivers' reports as one.
    pub fn plus(mut self, other: Self) -> Self {
        self.created += other.created;
        self.exited += other.exited;
        self.staggers_ns.extend(other.staggers_ns);
        self
    }
}

/// Exits per second: for storms as the 2006 thread computed it, from the drivers' counts
/// ((created + exited) / elapsed / 2); otherwise exits recorded / elapsed.
pub fn exit_rate(child: Option<&ChildOutcome>, elapsed: Duration, recorded: u64) -> f64 {
    let elapsed_s = elapsed.as_secs_f64();
    if elapsed_s <= 0.0 {
        return 0.0;
    }
    match child.and_then(|c| c.report.as_ref()) {
        Some(r) => (r.created + r.exited) as f64 / 2.0 / elapsed_s,
        None => recorded as f64 / elapsed_s,
    }
}
