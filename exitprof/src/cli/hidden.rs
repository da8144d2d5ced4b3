//! The hidden commands: a workload's child process (`__workload`) and a condition held while a
//! command runs (`__condition`).

use std::ffi::OsString;

use clap::{Args, Subcommand};
use exitprof_engine::profiled::workload::Driver;

use super::{
    compare::ConditionArgs,
    run::ThreadsArgs,
    values::{ConditionArg, SideArg},
};

/// The hidden child-process side of a workload.
#[derive(Debug, Args)]
pub struct DriverArgs {
    /// A socket shared with exitprof: the child reads one byte from it before starting (exitprof
    /// sends it once its probes are attached) and writes its report to it at the end. Without
    /// it the driver starts at once and reports nothing.
    #[arg(long)]
    pub channel_fd: Option<i32>,
    #[command(subcommand)]
    pub command: DriverCommand,
}

#[derive(Debug, Subcommand)]
pub enum DriverCommand {
    Threads(ThreadsArgs),
    Fork(ForkLoopArgs),
    Ipcns(ForkLoopArgs),
    Netns(NetnsLoopArgs),
    /// Executes CMD with ARGS in place of the child, keeping its pid.
    Exec {
        /// The program to execute, as found on PATH by exitprof.
        #[arg(long)]
        program: OsString,
        /// The command line as given, CMD first.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<OsString>,
    },
}

/// One sequential fork loop.
#[derive(Clone, Copy, Debug, Args, PartialEq, Eq)]
pub struct ForkLoopArgs {
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
}

/// One sequential fork loop of the `netns` storm.
#[derive(Clone, Copy, Debug, Args, PartialEq, Eq)]
pub struct NetnsLoopArgs {
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    #[arg(long)]
    pub veth_pairs: u32,
}

/// The hidden `__condition` command.
#[derive(Debug, Args)]
pub struct HoldArgs {
    #[arg(value_enum)]
    pub condition: ConditionArg,
    #[arg(value_enum)]
    pub side: SideArg,
    #[command(flatten)]
    pub options: ConditionArgs,
    /// The command to run while the condition holds.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl DriverCommand {
    /// What the workload child runs.
    pub fn driver(self) -> Driver {
        match self {
            Self::Threads(args) => Driver::Threads(args.params()),
            Self::Fork(ForkLoopArgs { count }) => Driver::Fork { count },
            Self::Ipcns(ForkLoopArgs { count }) => Driver::Ipcns { count },
            Self::Netns(NetnsLoopArgs { count, veth_pairs }) => Driver::Netns { count, veth_pairs },
            Self::Exec { program, argv } => Driver::Exec { program, argv },
        }
    }
}
