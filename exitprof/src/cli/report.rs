//! `exitprof report`: a recorded run, or a view of it.

use std::path::PathBuf;

use clap::Args;
use exitprof_core::{
    analysis::records::TaskName,
    export::{self, ExportTarget, Format},
};
use exitprof_engine::run::record::{
    ExitsShown,
    view::{Shown, View},
};

use super::{
    parse::{parse_comm, usage},
    values::FormatArg,
};

/// `exitprof report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A record file written by `exitprof record`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print one JSON document on stdout instead of the tables: the one the run printed.
    #[arg(long)]
    pub json: bool,
    /// Also write the results to PATH (repeatable), as a run's --export does.
    #[arg(long = "export", value_name = "PATH")]
    pub exports: Vec<PathBuf>,
    /// The format of the --export paths whose extension names none.
    #[arg(long, value_enum, value_name = "FMT", requires = "exports")]
    pub format: Option<FormatArg>,
    /// Only the exits of process PID (those of all its threads), or of thread PID alone where
    /// PID is a thread's id and not its process's, as exitprof's PID namespace saw them. The
    /// exits the run lost cannot be told apart by process: the report gives the run's.
    /// The exports are of these exits too.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
    /// Only the exits of the processes named NAME (comm, at most 15 bytes; their threads may
    /// have names of their own).
    #[arg(long, value_name = "NAME", value_parser = parse_comm, conflicts_with = "pid")]
    pub comm: Option<String>,
    /// Thread exits (a thread of a process that lives on) and process exits (its last or only
    /// thread) apart, each with its whole report: every stage, where it computed on the CPU
    /// and where it blocked. The exports are the report's, as without it.
    #[arg(long, conflicts_with = "stage")]
    pub by_kind: bool,
    /// One stage in detail: the functions its on-CPU samples fell in, with their shares, its
    /// time off the CPU, runnable or blocked, and the stacks it blocked in. STAGE is a stage's
    /// name, or a kernel function it covers (e.g. taskstats_exit). The exports are the report's,
    /// as without it.
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// The N exits that took longest, longest first, each as `--slower-than` printed it as it
    /// ended: who, how long, on and off the CPU, where it blocked or computed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with_all = ["stage", "by_kind", "pid", "comm"])]
    pub slowest: Option<u32>,
    /// The exit of thread PID (or those of the threads of process PID), as exitprof's PID
    /// namespace saw it, with its whole timeline: every stage, every block with its stack and
    /// length, every on-CPU sample.
    #[arg(long = "exit", value_name = "PID", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with_all = ["stage", "by_kind", "pid", "comm", "slowest"])]
    pub exit_of: Option<u32>,
}

impl ReportArgs {
    /// Each `--export` path with its format; a usage error when a format cannot be told.
    pub fn export_targets(&self) -> Result<Vec<ExportTarget>, clap::Error> {
        export::targets(&self.exports, self.format.map(Format::from)).map_err(usage)
    }

    /// The view asked for.
    pub fn view(&self) -> View {
        let comm = self.comm.as_deref().map(TaskName::of);
        let shown = match (&self.stage, self.by_kind, self.slowest, self.exit_of) {
            (Some(stage), _, _, _) => Shown::Stage(stage.clone()),
            (None, true, _, _) => Shown::ByKind,
            (None, false, Some(n), _) => Shown::Exits(ExitsShown::Slowest(n as usize)),
            (None, false, None, Some(pid)) => Shown::Exits(ExitsShown::Of(pid)),
            (None, false, None, None) => Shown::Report,
        };
        View { pid: self.pid, comm, shown }
    }
}
