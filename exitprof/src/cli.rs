//! Command-line interface. Values are checked here, so bad input fails with exit code 2 before
//! anything is loaded or attached.

use std::path::PathBuf;

use clap::{Args, CommandFactory as _, Parser, Subcommand, ValueEnum, error::ErrorKind};

use crate::export::{self, ExportTarget, Format};

use crate::{
    conditions::{Condition, ConditionOptions, Side},
    kprobe_events,
    plan::AttachMode,
};

#[derive(Debug, Parser)]
#[command(
    name = "exitprof",
    version,
    about = "Where does the time go when tasks exit? Drives an exit storm, times every exit \
             inside the kernel stage by stage with eBPF, and reports the latency distribution.",
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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prints the probe plan for the running kernel: every probe point, how it would be
    /// attached and to what, and what is unavailable and why. Nothing is attached.
    Plan(PlanArgs),
    /// Runs a workload inside exitprof's child process (internal).
    #[command(name = "__workload", hide = true)]
    Workload(WorkloadChild),
    /// Holds one side of a condition while a command runs, or until SIGINT or SIGTERM, then
    /// restores it and prints what it saw as one JSON line (internal: the tests use it).
    #[command(name = "__condition", hide = true)]
    Condition(HoldArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub probes: ProbeArgs,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How exitprof attaches its probes.
#[derive(Clone, Copy, Debug, Args)]
pub struct ProbeArgs {
    /// Attach mode: per point the best available (auto), or force one mode and fail where the
    /// kernel cannot do it.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach: AttachMode,
    /// Instances per kretprobe: how many tasks may be inside one probed function at once
    /// before returns are missed (and counted).
    #[arg(long, value_name = "N", default_value_t = kprobe_events::MAX_ACTIVE,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(kprobe_events::MAX_ACTIVE)))]
    pub kretprobe_maxactive: u32,
}

/// Profile one storm (the default command).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The exit storm to drive.
    #[arg(long, value_enum, default_value_t = WorkloadKind::Threads)]
    pub workload: WorkloadKind,
    #[command(flatten)]
    pub threads: ThreadsParams,
    #[command(flatten)]
    pub probes: ProbeArgs,
    /// Print one JSON document on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the results to PATH (repeatable), in the format its extension names: .hlog
    /// (HdrHistogram log), .json (the --json document), .csv (percentiles), .svg (figure), .prom
    /// (Prometheus text).
    #[arg(long = "export", value_name = "PATH")]
    pub exports: Vec<PathBuf>,
    /// The format of the --export paths whose extension names none.
    #[arg(long, value_enum, value_name = "FMT", requires = "exports")]
    pub format: Option<Format>,
    /// Size of the kernel-to-userspace ring buffer for exit records (a power of two).
    #[arg(long, value_name = "BYTES", default_value_t = 16 << 20, value_parser = parse_ringbuf_size)]
    pub ringbuf_bytes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// N threads x reps, each sleeping (N-i)*stagger us before it exits (the 2006 taskstats
    /// thread's program).
    Threads,
}

/// Parameters of the `threads` storm; defaults are the 2006 thread's.
#[derive(Clone, Copy, Debug, Args, PartialEq, Eq, serde::Serialize)]
pub struct ThreadsParams {
    /// Threads created, then joined, per repetition.
    #[arg(long, default_value_t = 1000, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,
    /// Repetitions.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub reps: u32,
    /// Thread i of N sleeps (N-i)*stagger microseconds before it exits.
    #[arg(long, value_name = "US", default_value_t = 2, allow_negative_numbers = true)]
    pub stagger_us: u32,
}

/// The hidden child-process side of a workload.
#[derive(Debug, Args)]
pub struct WorkloadChild {
    /// File descriptor to read one byte from before starting: the parent opens the gate once
    /// its probes are attached. Without it, the workload starts at once.
    #[arg(long)]
    pub gate_fd: Option<i32>,
    #[command(subcommand)]
    pub workload: ChildWorkload,
}

#[derive(Debug, Subcommand)]
pub enum ChildWorkload {
    Threads(ThreadsParams),
}

/// The hidden `__condition` command.
#[derive(Debug, Args)]
pub struct HoldArgs {
    #[arg(value_enum)]
    pub condition: Condition,
    #[arg(value_enum)]
    pub side: Side,
    #[command(flatten)]
    pub options: ConditionOptions,
    /// The command to run while the condition holds.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl RunArgs {
    /// Each `--export` path with its format; a usage error when a format cannot be told.
    pub fn export_targets(&self) -> Result<Vec<ExportTarget>, clap::Error> {
        export::targets(&self.exports, self.format)
            .map_err(|why| Cli::command().error(ErrorKind::ValueValidation, why))
    }
}

fn parse_ringbuf_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!("{n} is not a power of two of at least 4096"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("exitprof").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_are_the_seed_program() {
        let cli = parse(&[]).unwrap();
        assert_eq!(cli.run.workload, WorkloadKind::Threads);
        assert_eq!(cli.run.threads, ThreadsParams { threads: 1000, reps: 10, stagger_us: 2 });
        assert!(!cli.run.json);
    }

    #[test]
    fn flags_are_read() {
        let cli = parse(&[
            "--workload",
            "threads",
            "--threads",
            "50",
            "--reps",
            "3",
            "--stagger-us",
            "0",
            "--json",
        ])
        .unwrap();
        assert_eq!(cli.run.threads, ThreadsParams { threads: 50, reps: 3, stagger_us: 0 });
        assert!(cli.run.json);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            &["--threads", "0"][..],
            &["--reps", "-1"],
            &["--reps", "0"],
            &["--workload", "nosuch"],
            &["--stagger-us", "x"],
            &["--ringbuf-bytes", "5000"],
        ] {
            let err = parse(args).unwrap_err();
            assert_ne!(err.kind(), ErrorKind::DisplayHelp, "{args:?}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn exports_take_their_format_from_the_extension_or_format() {
        let cli =
            parse(&["--export", "a.csv", "--export", "dir/b.txt", "--format", "csv"]).unwrap();
        let targets = cli.run.export_targets().unwrap();
        let formats: Vec<Format> = targets.iter().map(|t| t.format).collect();
        assert_eq!(formats, [Format::Csv, Format::Csv]);
        assert_eq!(targets[1].path, PathBuf::from("dir/b.txt"));
        assert!(parse(&[]).unwrap().run.export_targets().unwrap().is_empty());
    }

    #[test]
    fn exports_of_unknown_format_are_usage_errors() {
        for args in [&["--export", "out.txt"][..], &["--export", "out.json", "--format", "prom"]] {
            let err = parse(args).unwrap().run.export_targets().unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
        for args in [&["--format", "csv"][..], &["--export", "a.csv", "--format", "xml"]] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn workload_child_parses() {
        let cli = parse(&["__workload", "--gate-fd", "5", "threads", "--threads", "4"]).unwrap();
        let Some(Command::Workload(child)) = cli.command else { panic!("not a workload child") };
        assert_eq!(child.gate_fd, Some(5));
        let ChildWorkload::Threads(p) = child.workload;
        assert_eq!(p.threads, 4);
    }
}
