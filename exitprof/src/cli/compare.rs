//! `exitprof compare` and `exitprof sweep`: a condition on and off, interleaved.

use clap::Args;
use exitprof_engine::{compare::CompareRequest, conditions::ConditionOptions};

use super::{run::RunArgs, values::ConditionArg};

/// `exitprof compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// The condition switched on and off between runs.
    #[arg(long, value_enum, value_name = "CONDITION")]
    pub toggle: ConditionArg,
    /// Runs of each side (the 2006 LKML taskstats benchmark averaged 10).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    #[command(flatten)]
    pub condition: ConditionArgs,
}

/// `exitprof sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub compare: CompareArgs,
    /// Stagger values (us) of the threads storm, one row each: a lower stagger is a higher exit
    /// rate. Each row sets the stagger, so --stagger-us and --rate (which would choose it and
    /// leave the rows mislabelled) are refused.
    #[arg(
        long = "stagger",
        value_name = "US,US,...",
        value_delimiter = ',',
        required = true,
        conflicts_with_all = ["stagger_us", "rate"]
    )]
    pub staggers: Vec<u32>,
}

/// Settings of the conditions, for the commands that set them.
#[derive(Clone, Copy, Debug, Args)]
pub struct ConditionArgs {
    /// Receive buffer of exitprof's taskstats listener socket, in bytes (SO_RCVBUF, or
    /// SO_RCVBUFFORCE above net.core.rmem_max); default: net.core.rmem_default.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub rcvbuf: Option<u32>,
}

impl CompareArgs {
    /// The comparison the command line asks for: `compare`, or `sweep` with its `staggers`.
    pub fn request(&self, staggers: Option<Vec<u32>>) -> CompareRequest {
        CompareRequest {
            run: self.run.request(),
            toggle: self.toggle.into(),
            runs: self.runs,
            condition: self.condition.options(),
            staggers,
        }
    }
}

impl ConditionArgs {
    /// The conditions' settings.
    pub fn options(self) -> ConditionOptions {
        ConditionOptions { rcvbuf: self.rcvbuf }
    }
}
