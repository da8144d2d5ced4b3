//! Command-line interface: clap's structs, the checks clap cannot express, and the one place
//! that turns them into the requests the rest of exitprof reads ([`RunRequest`],
//! [`CompareRequest`], ...), built here and nowhere else: the rest of exitprof reads them, not
//! clap's structs. Values are checked here, so bad input fails with exit code 2 before anything
//! is loaded or attached. Only `main.rs` imports this module.
//!
//! One file per command (`run.rs` for the plain run and `record`, `report.rs`, `compare.rs` for
//! `compare` and `sweep`, `serve.rs`, `diff.rs`, `probes.rs` for the probe options and `plan`,
//! `hidden.rs` for the internal commands), the value enums of the options (`values.rs`) and
//! their parsers (`parse.rs`).

mod compare;
mod diff;
mod hidden;
mod parse;
mod probes;
mod report;
mod run;
mod serve;
#[cfg(test)]
mod tests;
mod values;

use std::{ffi::OsString, path::PathBuf};

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, error::ErrorKind};

pub use self::{
    compare::{CompareArgs, SweepArgs},
    diff::DiffArgs,
    hidden::{DriverArgs, HoldArgs},
    probes::PlanArgs,
    report::ReportArgs,
    run::{RecordArgs, RunArgs},
    serve::ServeArgs,
};
use self::{parse::parse_file_mode, values::PointsArg};
#[cfg(doc)]
use exitprof_engine::{compare::CompareRequest, run::RunRequest};

#[derive(Debug, Parser)]
#[command(
    name = "exitprof",
    version,
    about = "Where does the time go when tasks exit? Drives an exit storm (or watches real \
             processes), times every exit inside the kernel stage by stage with eBPF, and reports \
             the latency distribution.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
    /// More diagnostics on stderr (-v: what exitprof does, -vv: debug, -vvv: every exit's probe
    /// hits).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Permissions of the files exitprof writes (records, --export's files), in octal: 600 (only
    /// their owner reads them) unless given, whatever the umask; e.g. 644 for a record that
    /// others on the machine may report.
    #[arg(long, value_name = "MODE", global = true, value_parser = parse_file_mode)]
    pub file_mode: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prints the probe plan for the running kernel: every probe point, how it would be
    /// attached and to what, and what is unavailable and why. Nothing is attached.
    Plan(PlanArgs),
    /// Runs the storm with a condition on and off, interleaved, and reports the Yes/No/Ovhd
    /// table of user, sys and elapsed time of the 2006 LKML benchmark of taskstats' cost per
    /// exit, with the stages that explain it.
    Compare(CompareArgs),
    /// Compares a condition on and off at rising exit rates (one row per --stagger): the table of
    /// the 2006 LKML taskstats benchmark, %overhead of user, sys and elapsed time against the
    /// exit rate.
    Sweep(SweepArgs),
    /// Profiles as a plain run does, printing and exporting the same, and also keeps the run in
    /// FILE: its raw records and everything else its report is made of, for `exitprof report`.
    Record(RecordArgs),
    /// Reports a run kept by `exitprof record`, as the run itself did (the tables, --json's
    /// document, --export's files), or views of it that need no new run (one process's exits,
    /// each kind of exit apart, one stage in detail), on any machine: nothing is loaded or
    /// attached.
    Report(ReportArgs),
    /// Serves exit latencies to Prometheus for as long as it runs: watches every exit on the
    /// machine (or --comm's, or --pid's), and answers GET /metrics (Prometheus text format, or
    /// OpenMetrics when asked for) and GET /healthz. SIGINT or SIGTERM detach and end it.
    Serve(ServeArgs),
    /// Compares saved runs (record files, or the documents of `exitprof --json`), A against B,
    /// stage by stage: the change of each stage's time per exit with an interval from the runs,
    /// and whether it is beyond run-to-run noise. `exitprof diff A B` for one run a side,
    /// `exitprof diff A1 A2 A3 -- B1 B2 B3` for repeated runs.
    Diff(DiffArgs),
    /// Runs a workload driver in this process (internal; also runs it with no probes at all
    /// when started directly, which is how the driver benchmark measures it).
    #[command(name = "__workload", hide = true)]
    Driver(DriverArgs),
    /// Holds one side of a condition while a command runs, or until SIGINT or SIGTERM, then
    /// restores it and prints what it saw as one JSON line (internal: the tests use it).
    #[command(name = "__condition", hide = true)]
    Condition(HoldArgs),
    /// Attaches only an empty program to sched_switch until SIGINT or SIGTERM (internal: the
    /// benchmark measures the floor of any program there with it).
    #[command(name = "__floor", hide = true)]
    Floor {
        /// Count the program's runs and run time, and print them as one JSON line at the end.
        #[arg(long)]
        bpf_stats: bool,
    },
    /// Writes the manual pages (one per command) and the bash, zsh and fish completions into
    /// DIR/man and DIR/completions (internal: `cargo xtask dist` packages them).
    #[command(name = "__manuals", hide = true)]
    Manuals { dir: PathBuf },
}

impl Cli {
    /// Parses the process's arguments; exits with status 2 on bad input.
    pub fn parse_checked() -> Self {
        Self::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    pub fn try_parse_checked(
        args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    ) -> Result<Self, clap::Error> {
        let mut command = Self::command();
        let matches = command.try_get_matches_from_mut(args)?;
        let cli = Self::from_arg_matches(&matches)?;
        // The run's options, and whether the run is a plain one (recorded or not).
        let checked = match (&cli.command, matches.subcommand()) {
            (None, _) => Some((&cli.run, &matches, true)),
            (Some(Command::Record(r)), Some((_, sub))) => Some((&r.run, sub, true)),
            (Some(Command::Compare(c)), Some((_, sub))) => Some((&c.run, sub, false)),
            (Some(Command::Sweep(s)), Some((_, sub))) => Some((&s.compare.run, sub, false)),
            _ => None,
        };
        if let Some((run, matches, plain)) = checked {
            run.check_options(matches)
                .map_err(|msg| command.error(ErrorKind::ArgumentConflict, msg))?;
            if !plain && run.bpf_stats {
                return Err(command.error(
                    ErrorKind::ArgumentConflict,
                    "--bpf-stats applies to a plain run, not to compare or sweep (--toggle \
                     point-set counts the program runs on both sides itself)",
                ));
            }
            if !plain && run.probes.points == PointsArg::Minimal {
                return Err(command.error(
                    ErrorKind::ArgumentConflict,
                    "--points minimal applies to a plain run; compare --toggle point-set runs \
                     both point sets",
                ));
            }
        }
        Ok(cli)
    }
}
