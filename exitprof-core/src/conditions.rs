//! The conditions `compare` switches on and off around a storm, by name; setting them is the
//! engine's.

use serde::{Serialize, Serializer};

/// Something a run can have on or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    TaskstatsListener,
    Delayacct,
    Probes,
    PointSet,
}

/// Which side of a condition a run has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    On,
    Off,
}

impl Condition {
    pub fn name(self) -> &'static str {
        match self {
            Condition::TaskstatsListener => "taskstats-listener",
            Condition::Delayacct => "delayacct",
            Condition::Probes => "probes",
            Condition::PointSet => "point-set",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Condition::TaskstatsListener => {
                "a taskstats listener on every CPU that reads every exit message and writes \
                 nothing (the 2006 thread's `exit_recv -w`)"
            }
            Condition::Delayacct => "per-task delay accounting (sysctl kernel.task_delayacct)",
            Condition::Probes => "exitprof's own probes attached (its overhead on the exits)",
            Condition::PointSet => {
                "every probe point attached (on) or only an exit's start and end (off), the \
                 kernel counting exitprof's program runs on both sides: checks the probe effect \
                 the report shows against the difference it makes to the exits"
            }
        }
    }
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}
