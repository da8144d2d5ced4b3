//! Command-line interface: clap's structs, the checks clap cannot express, and the one place
//! that turns them into the requests the rest of exitprof reads ([`RunRequest`],
//! [`CompareRequest`], ...). Values are checked here, so bad input fails with exit code 2 before
//! anything is loaded or attached. Only `main.rs` imports this module.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{
    ArgMatches, Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum,
    builder::PossibleValue, error::ErrorKind, parser::ValueSource,
};

use crate::{
    analysis::{
        groups::{GroupBy, GroupOptions},
        records::TaskName,
    },
    compare::CompareRequest,
    conditions::{Condition, ConditionOptions, Side},
    diff::{self, DiffRequest, Input},
    export::{self, ExportTarget, Format},
    probes::{
        ProbeOptions, kprobe_events,
        plan::{AttachMode, PointSet},
    },
    profiled::{ForkParams, NetnsParams, Storm, Target, ThreadsParams, workload::Driver},
    run::{
        RunRequest,
        record::{
            ExitsShown,
            view::{Shown, View},
        },
    },
    serve::{self, ServeRequest},
};

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
    #[arg(long, value_enum, default_value_t = AttachArg::Auto)]
    pub attach: AttachArg,
    /// Instances per kretprobe: how many tasks may be inside one probed function at once
    /// before returns are missed (and counted).
    #[arg(long, value_name = "N", default_value_t = kprobe_events::MAX_ACTIVE,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(kprobe_events::MAX_ACTIVE)))]
    pub kretprobe_maxactive: u32,
    /// Use the exit syscalls' tracepoints to time exits from their start where `do_exit`
    /// cannot be probed (tracepoint mode), and `wait4`'s for reaps. Any syscall tracepoint makes
    /// every syscall of the machine take the kernel's slower traced path, so `auto` uses them
    /// for workloads exitprof drives, not when it watches other processes.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = Switch::Auto)]
    pub syscall_tracepoints: Switch,
    /// Do not take the kernel stack of each block of an exiting task: the report then has no
    /// "blocked in" table, and each block costs one kernel stack walk less (microseconds each:
    /// about a third of exitprof's in-kernel time in a thread storm where one exit in six blocks).
    #[arg(long)]
    pub no_block_stacks: bool,
    /// Samples per second and CPU of the kernel stacks of exits that are on a CPU (the "on CPU
    /// in" table, the verdict's "mostly in", the flame graphs). Measured on a 2-CPU 6.18 VM: a
    /// tick that finds no exit on its CPU costs the kernel about 0.2 µs, one that samples an
    /// exit about 2 µs (its stack walk included); at 999 Hz that is 0.02% of each CPU, and 0.2%
    /// of the time exits spend on a CPU.
    #[arg(long, value_name = "HZ", default_value_t = DEFAULT_SAMPLE_HZ,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SAMPLE_HZ)))]
    pub sample_hz: u32,
    /// Do not sample the kernel stacks of exits on a CPU.
    #[arg(long, conflicts_with = "sample_hz")]
    pub no_cpu_stacks: bool,
    /// Which probe points to attach: every one (full), or only an exit's first probe and its
    /// final switch-out (minimal: the exit is one stage, and carries the fewest of exitprof's
    /// own program runs).
    #[arg(long, value_enum, value_name = "SET", default_value_t = PointsArg::Full)]
    pub points: PointsArg,
}

/// The sampling rate when none is asked for: odd, so that it does not tick in step with the
/// kernel's own timers.
const DEFAULT_SAMPLE_HZ: u32 = 999;
/// Well under the kernel's own ceiling (`perf_event_max_sample_rate`, 100000 by default).
const MAX_SAMPLE_HZ: u32 = 20_000;

/// A choice exitprof can make itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    Auto,
    On,
    Off,
}

impl Switch {
    /// The choice; `None` for `auto`, which exitprof decides.
    fn choice(self) -> Option<bool> {
        match self {
            Self::Auto => None,
            Self::On => Some(true),
            Self::Off => Some(false),
        }
    }
}

/// `--attach`: how the probes are attached ([`AttachMode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttachArg {
    /// Per point, the best the kernel offers: fentry, then kprobe, then tracepoints.
    Auto,
    /// kprobes and kretprobes on functions (tracepoints where a point is one).
    Kprobe,
    /// fentry and fexit on functions (tracepoints where a point is one).
    Fentry,
    /// Tracepoints only.
    Tracepoint,
}

impl From<AttachArg> for AttachMode {
    fn from(arg: AttachArg) -> Self {
        match arg {
            AttachArg::Auto => Self::Auto,
            AttachArg::Kprobe => Self::Kprobe,
            AttachArg::Fentry => Self::Fentry,
            AttachArg::Tracepoint => Self::Tracepoint,
        }
    }
}

/// `--points`: which probe points are attached ([`PointSet`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PointsArg {
    /// Every point the kernel offers: the exit cut into stages, deferred work joined.
    Full,
    /// Every point of the exit itself, and of the namespace teardowns exits set off, without
    /// the probes of other deferred work (`kfree` fires on every free of the machine, a
    /// `free_ipc` run's kworker is not followed): what `serve` attaches, which joins only
    /// teardowns.
    Stages,
    /// Only what an exit's start and end need: its first probe and the final switch-out. The
    /// exit is one stage; it checks what the other points cost the exits they time.
    Minimal,
}

impl From<PointsArg> for PointSet {
    fn from(arg: PointsArg) -> Self {
        match arg {
            PointsArg::Full => Self::Full,
            PointsArg::Stages => Self::Stages,
            PointsArg::Minimal => Self::Minimal,
        }
    }
}

/// `--format`: an export file format ([`Format`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// HdrHistogram interval log: one compressed histogram per stage, tagged.
    Hlog,
    /// The `--json` document, histogram buckets included.
    Json,
    /// Each stage's percentile distribution, one row per percentile.
    Csv,
    /// A figure: latency by percentile per stage, and each stage's share of the exit.
    Svg,
    /// Prometheus text exposition format: a histogram per stage, and counters.
    Prom,
    /// Folded kernel stacks (`root;stage;frame;... µs`) where exits computed and blocked, for
    /// flamegraph.pl and inferno.
    Folded,
    /// A flame graph of the folded stacks.
    FlameSvg,
    /// One self-contained HTML report: the tables, the figure and a flame graph one can zoom,
    /// nothing fetched from elsewhere.
    Html,
}

impl From<FormatArg> for Format {
    fn from(arg: FormatArg) -> Self {
        match arg {
            FormatArg::Hlog => Self::Hlog,
            FormatArg::Json => Self::Json,
            FormatArg::Csv => Self::Csv,
            FormatArg::Svg => Self::Svg,
            FormatArg::Prom => Self::Prom,
            FormatArg::Folded => Self::Folded,
            FormatArg::FlameSvg => Self::FlameSvg,
            FormatArg::Html => Self::Html,
        }
    }
}

/// `--group-by`: what exits are grouped by ([`GroupBy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupByArg {
    /// The cgroup (v2) the exiting task was in, named as its container, pod or service.
    Cgroup,
    /// The name (comm) of the exiting task's process.
    Comm,
}

impl From<GroupByArg> for GroupBy {
    fn from(arg: GroupByArg) -> Self {
        match arg {
            GroupByArg::Cgroup => Self::Cgroup,
            GroupByArg::Comm => Self::Comm,
        }
    }
}

/// `--toggle` and `__condition`'s condition: something a run can have on or off
/// ([`Condition`]: its names and descriptions are the values and their help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionArg {
    TaskstatsListener,
    Delayacct,
    Probes,
    PointSet,
}

impl From<ConditionArg> for Condition {
    fn from(arg: ConditionArg) -> Self {
        match arg {
            ConditionArg::TaskstatsListener => Self::TaskstatsListener,
            ConditionArg::Delayacct => Self::Delayacct,
            ConditionArg::Probes => Self::Probes,
            ConditionArg::PointSet => Self::PointSet,
        }
    }
}

impl ValueEnum for ConditionArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::TaskstatsListener, Self::Delayacct, Self::Probes, Self::PointSet]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let condition = Condition::from(*self);
        Some(PossibleValue::new(condition.name()).help(condition.description()))
    }
}

/// `__condition`'s side: which side of a condition a run has ([`Side`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SideArg {
    On,
    Off,
}

impl From<SideArg> for Side {
    fn from(arg: SideArg) -> Self {
        match arg {
            SideArg::On => Self::On,
            SideArg::Off => Self::Off,
        }
    }
}

/// Profile one storm or watch real processes (the default command).
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub threads: ThreadsArgs,
    #[command(flatten)]
    pub probes: ProbeArgs,
    #[command(flatten)]
    pub forks: ForkArgs,
    /// Stop watching after SECS (--pid, --comm, --all; without it they run until Ctrl-C, and
    /// --pid also until the process exits).
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Print one JSON document on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the results to PATH (repeatable), in the format its extension names: .hlog
    /// (HdrHistogram log), .json (the --json document), .csv (percentiles), .svg (figure), .prom
    /// (Prometheus text), .folded and .flame.svg (kernel stacks, a flame graph), .html (one
    /// self-contained page of the tables, the figure and a flame graph one can zoom).
    #[arg(long = "export", value_name = "PATH")]
    pub exports: Vec<PathBuf>,
    /// The format of the --export paths whose extension names none.
    #[arg(long, value_enum, value_name = "FMT", requires = "exports")]
    pub format: Option<FormatArg>,
    /// Size of the kernel-to-userspace ring buffer for exit records (a power of two) [default:
    /// from the storm, 256 KiB to 4 MiB; 4 MiB when watching].
    #[arg(long, value_name = "BYTES", value_parser = parse_ringbuf_size)]
    pub ringbuf_bytes: Option<u32>,
    /// Slots for exits in progress (a power of two): fewer make exits collide for slots, which
    /// tests use to check that every exit is recorded or counted lost.
    #[arg(long, value_name = "N", value_parser = parse_exit_slots, hide = true)]
    pub exit_slots: Option<u32>,
    /// Have the kernel count each of exitprof's eBPF programs' runs and run time while the
    /// target runs, and report them: exitprof's own cost in the kernel, per exit. The counting
    /// itself adds a little to every program run.
    #[arg(long)]
    pub bpf_stats: bool,
    #[command(flatten)]
    pub groups: GroupArgs,
    /// Print each exit that takes at least TIME (e.g. 50ms, 1.5s, 200us) as it ends: when,
    /// who, its cgroup, the whole exit, its stages that matter, on and off the CPU, where it
    /// blocked or computed; one JSON line each with --json (the run's document last, on one
    /// line). Exits under TIME cost nothing more. `record` keeps every exit: `report --slowest`
    /// and `report --exit` show them again.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub slower_than: Option<Duration>,
}

/// How exits are split by workload.
#[derive(Clone, Copy, Debug, Args)]
pub struct GroupArgs {
    /// Split the exits by workload: by the cgroup (v2) they ran in, named as its container,
    /// pod or service, or by their process's name (comm).
    #[arg(long, value_enum, value_name = "BY")]
    pub group_by: Option<GroupByArg>,
    /// Groups kept apart, at most: the exits of any other go to the group "other".
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100,
        requires = "group_by",
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub max_groups: u32,
}

/// `exitprof record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The record file to write (whole, when the run ends; a run cut short by Ctrl-C writes one
    /// marked partial).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

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

/// Whose exits are profiled: exactly one of these (the threads storm when none is given).
#[derive(Debug, Args)]
#[group(id = "target", multiple = false)]
pub struct TargetArgs {
    /// The exit storm exitprof drives [default: threads].
    #[arg(long, value_enum)]
    pub workload: Option<StormKind>,
    /// Watch an existing process and its descendants (the ones it has and the ones it forks).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub pid: Option<u32>,
    /// Watch every task whose name (comm, at most 15 bytes) is NAME.
    #[arg(long, value_name = "NAME", value_parser = parse_comm)]
    pub comm: Option<String>,
    /// Watch every task in the cgroup at PATH of the cgroup v2 hierarchy (e.g. a container's
    /// or a systemd service's), and in the cgroups below it.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Watch every exit on the machine (exitprof's own excepted).
    #[arg(long)]
    pub all: bool,
    /// Run CMD with ARGS and profile the exits of it and all its descendants.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub command: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StormKind {
    /// N threads x reps, each sleeping (N-i)*stagger us before it exits (the program of the
    /// 2006 LKML benchmark of taskstats' cost per exit).
    Threads,
    /// Sequential fork + exit + wait in the parent.
    Fork,
    /// Sequential fork + unshare(CLONE_NEWIPC) + exit + wait in the parent (the program of the
    /// 2012 LKML report of 1024 such exits taking 32 s, waiting on IPC namespace teardown).
    Ipcns,
    /// Sequential fork + unshare(CLONE_NEWNET) + --veth-pairs veth pairs + exit + wait in the
    /// parent: each exit leaves a network namespace with devices to cleanup_net, the teardown
    /// that container and pod deletion waits for.
    Netns,
}

/// Parameters of the `threads` storm; defaults are those of the 2006 LKML taskstats benchmark.
#[derive(Clone, Copy, Debug, Args)]
pub struct ThreadsArgs {
    /// Threads created, then joined, per repetition.
    #[arg(long, default_value_t = 1000, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,
    /// Repetitions.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub reps: u32,
    /// Thread i of N sleeps (N-i)*stagger microseconds before it exits; N*stagger, the longest
    /// sleep, is at most 60 s.
    #[arg(
        long,
        value_name = "US",
        default_value_t = 2,
        allow_negative_numbers = true,
        conflicts_with = "rate"
    )]
    pub stagger_us: u32,
    /// Aim at this exit rate: exitprof chooses the stagger, rep by rep, so that the storm's
    /// (created + exited) / elapsed / 2 reaches it.
    #[arg(long, value_name = "EXITS_PER_S", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
}

/// Parameters of the `fork` and `ipcns` storms; defaults are those of the 2012 LKML
/// CLONE_NEWIPC report.
#[derive(Clone, Copy, Debug, Args)]
pub struct ForkArgs {
    /// Child processes forked in all (each exits, and its parent waits for it).
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// Sequential fork loops running at once, each a process of its own, sharing --count.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub parallel: u32,
    /// Veth pairs each child of --workload netns makes in its network namespace before it exits
    /// (two devices each, unregistered by the namespace's teardown).
    #[arg(long, value_name = "N", default_value_t = 16, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..=65_536))]
    pub veth_pairs: u32,
}

/// Options that apply to one kind of target only: (option id, flag, the kind).
const OPTION_TARGETS: &[(&str, &str, TargetKind)] = &[
    ("threads", "--threads", TargetKind::Threads),
    ("reps", "--reps", TargetKind::Threads),
    ("stagger_us", "--stagger-us", TargetKind::Threads),
    ("rate", "--rate", TargetKind::Threads),
    ("count", "--count", TargetKind::Forks),
    ("parallel", "--parallel", TargetKind::Forks),
    ("veth_pairs", "--veth-pairs", TargetKind::Netns),
    ("duration", "--duration", TargetKind::Watch),
];

/// Targets grouped by the options they take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TargetKind {
    Threads,
    Forks,
    /// `netns`, which takes the options of `Forks` too.
    Netns,
    Command,
    Watch,
}

impl TargetKind {
    fn flags(self) -> &'static str {
        match self {
            Self::Threads => "--workload threads",
            Self::Forks => "--workload fork, ipcns and netns",
            Self::Netns => "--workload netns",
            Self::Command => "-- CMD",
            Self::Watch => "--pid, --comm, --cgroup and --all",
        }
    }
}

impl RunArgs {
    /// The target the command line names.
    pub fn target(&self) -> Target {
        let t = &self.target;
        if !t.command.is_empty() {
            return Target::Command(t.command.clone());
        }
        if let Some(pid) = t.pid {
            return Target::Pid(pid);
        }
        if let Some(comm) = &t.comm {
            return Target::Comm(comm.clone());
        }
        if let Some(path) = &t.cgroup {
            return Target::Cgroup(path.clone());
        }
        if t.all {
            return Target::All;
        }
        Target::Storm(match t.workload.unwrap_or(StormKind::Threads) {
            StormKind::Threads => Storm::Threads(self.threads.params()),
            StormKind::Fork => Storm::Fork(self.forks.params()),
            StormKind::Ipcns => Storm::Ipcns(self.forks.params()),
            StormKind::Netns => Storm::Netns(NetnsParams {
                forks: self.forks.params(),
                veth_pairs: self.forks.veth_pairs,
            }),
        })
    }

    fn target_kind(&self) -> TargetKind {
        match self.target() {
            Target::Storm(Storm::Threads(_)) => TargetKind::Threads,
            Target::Storm(Storm::Netns(_)) => TargetKind::Netns,
            Target::Storm(_) => TargetKind::Forks,
            Target::Command(_) => TargetKind::Command,
            Target::Pid(_) | Target::Comm(_) | Target::Cgroup(_) | Target::All => TargetKind::Watch,
        }
    }

    /// Rejects options given for a target they do not apply to.
    fn check_options(&self, matches: &ArgMatches) -> Result<(), String> {
        let kind = self.target_kind();
        for &(id, flag, applies_to) in OPTION_TARGETS {
            let given = matches.value_source(id) == Some(ValueSource::CommandLine);
            let applies = applies_to == kind
                || (applies_to == TargetKind::Forks && kind == TargetKind::Netns);
            if given && !applies {
                return Err(format!(
                    "{flag} applies to {} only, not to {}",
                    applies_to.flags(),
                    kind.flags()
                ));
            }
        }
        Ok(())
    }
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

/// `exitprof serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub target: ServeTargetArgs,
    /// Address to serve on. The default port, 19100, is in no allocation of Prometheus's list
    /// of default exporter ports (9435 is ebpf_exporter's, 9464 OpenTelemetry's); the address
    /// is loopback unless another is given here.
    #[arg(long, value_name = "ADDR", default_value = serve::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Attach mode: per point the best available (auto), or force one mode and fail where the
    /// kernel cannot do it.
    #[arg(long, value_enum, default_value_t = AttachArg::Auto)]
    pub attach: AttachArg,
    /// Use the exit syscalls' tracepoints to time exits from their start where `do_exit`
    /// cannot be probed (tracepoint mode). They make every syscall of the machine take the
    /// kernel's slower traced path, so they are off unless asked for.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = Switch::Off)]
    pub syscall_tracepoints: Switch,
    /// Size of the kernel-to-userspace ring buffer for exit records (a power of two) [default:
    /// 4 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_ringbuf_size)]
    pub ringbuf_bytes: Option<u32>,
    #[command(flatten)]
    pub groups: GroupArgs,
    /// With --group-by: a group with no exit for this long is dropped, its series with it:
    /// seconds, or a number with its unit (90s, 10m, 1h) [default: 10m].
    #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "group_by")]
    pub group_ttl: Option<Duration>,
    /// Have the kernel count each of exitprof's eBPF programs' runs and run time while serve
    /// runs, exported as exitprof_bpf_program_runs_total and
    /// exitprof_bpf_program_run_seconds_total: what exitprof costs the node in the kernel. The
    /// counting adds two clock reads to every run of every BPF program on the machine.
    #[arg(long)]
    pub bpf_stats: bool,
    /// Serve over TLS and/or behind basic auth, as this file says, in the web configuration
    /// format Prometheus's exporters share (tls_server_config: cert_file, key_file, optional
    /// client_ca_file and client_auth_type, min_version; basic_auth_users: bcrypt hashes by
    /// user). Read again when it or a file it names changes, or on SIGHUP.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
}

/// `exitprof diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Side A's runs (the baseline): one `--json` document or record file (`exitprof record`),
    /// or several of repeated runs. Without `--`, exactly two: A and B.
    #[arg(value_name = "A", required = true)]
    pub a: Vec<PathBuf>,
    /// Side B's runs, after `--`.
    #[arg(last = true, value_name = "B")]
    pub b: Vec<PathBuf>,
    /// Print the diff as one JSON document instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the diff to PATH (repeatable), in the format its extension names: .json (the
    /// --json document), .svg (each row's time per exit on both sides, and its change with its
    /// interval), .flame.svg (a differential flame graph: B's stacks, red where B spends more
    /// per exit, blue where less), .html (one self-contained page of it all).
    #[arg(long = "export", value_name = "PATH")]
    pub exports: Vec<PathBuf>,
}

/// Whose exits `serve` watches: at most one of these (every exit when none is given).
#[derive(Debug, Args)]
#[group(id = "serve_target", multiple = false)]
pub struct ServeTargetArgs {
    /// Watch every exit on the machine (exitprof's own excepted) [the default].
    #[arg(long)]
    pub all: bool,
    /// Watch every task whose name (comm, at most 15 bytes) is NAME.
    #[arg(long, value_name = "NAME", value_parser = parse_comm)]
    pub comm: Option<String>,
    /// Watch every task in the cgroup at PATH of the cgroup v2 hierarchy, and below it.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Watch an existing process and its descendants; serve ends when it exits.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub pid: Option<u32>,
}

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

/// Settings of the conditions, for the commands that set them.
#[derive(Clone, Copy, Debug, Args)]
pub struct ConditionArgs {
    /// Receive buffer of exitprof's taskstats listener socket, in bytes (SO_RCVBUF, or
    /// SO_RCVBUFFORCE above net.core.rmem_max); default: net.core.rmem_default.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub rcvbuf: Option<u32>,
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

// The requests the command line makes, built here and nowhere else: the rest of exitprof reads
// them, not clap's structs.

impl RunArgs {
    /// Each `--export` path with its format; a usage error when a format cannot be told.
    pub fn export_targets(&self) -> Result<Vec<ExportTarget>, clap::Error> {
        export::targets(&self.exports, self.format.map(Format::from))
            .map_err(|why| Cli::command().error(ErrorKind::ValueValidation, why))
    }

    /// The run the command line asks for.
    pub fn request(&self) -> RunRequest {
        RunRequest {
            target: self.target(),
            probes: ProbeOptions { cgroup_paths: self.groups.by_cgroup(), ..self.probes.options() },
            duration: self.duration,
            json: self.json,
            ringbuf_bytes: self.ringbuf_bytes,
            exit_slots: self.exit_slots,
            bpf_stats: self.bpf_stats,
            record: None,
            groups: self.groups.options(None),
            slower_than: self.slower_than,
        }
    }
}

impl RecordArgs {
    /// The run the command line asks for, kept in its record file.
    pub fn request(&self) -> RunRequest {
        RunRequest { record: Some(self.output.clone()), ..self.run.request() }
    }
}

impl ReportArgs {
    /// Each `--export` path with its format; a usage error when a format cannot be told.
    pub fn export_targets(&self) -> Result<Vec<ExportTarget>, clap::Error> {
        export::targets(&self.exports, self.format.map(Format::from))
            .map_err(|why| Cli::command().error(ErrorKind::ValueValidation, why))
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

impl ServeArgs {
    /// What `serve` is asked to do.
    pub fn request(&self) -> ServeRequest {
        let t = &self.target;
        let target = match (t.pid, &t.comm, &t.cgroup) {
            (Some(pid), _, _) => Target::Pid(pid),
            (None, Some(comm), _) => Target::Comm(comm.clone()),
            (None, None, Some(path)) => Target::Cgroup(path.clone()),
            (None, None, None) => Target::All,
        };
        ServeRequest {
            target,
            probes: ProbeOptions {
                attach: self.attach.into(),
                kretprobe_maxactive: kprobe_events::MAX_ACTIVE,
                syscall_tracepoints: self.syscall_tracepoints.choice(),
                block_stacks: false,
                sample_hz: 0,
                // Stage histograms need every point of the exit; serve joins no deferred work.
                points: PointSet::Stages,
                cgroup_paths: self.groups.by_cgroup(),
            },
            groups: self.groups.options(Some(self.group_ttl.unwrap_or(serve::GROUP_TTL))),
            listen: self.listen,
            ringbuf_bytes: self.ringbuf_bytes,
            bpf_stats: self.bpf_stats,
            web_config: self.web_config.clone(),
        }
    }
}

impl DiffArgs {
    /// The diff the command line asks for; a usage error when the sides cannot be told apart
    /// or an export's format is not one a diff writes.
    pub fn request(&self) -> Result<DiffRequest, clap::Error> {
        let usage = |why: String| Cli::command().error(ErrorKind::ValueValidation, why);
        let (a, b) = match (self.a.as_slice(), self.b.as_slice()) {
            ([a, b], []) => (vec![a.clone()], vec![b.clone()]),
            (_, []) => {
                return Err(usage(format!(
                    "diff needs two sides: `exitprof diff A B`, or `exitprof diff A1 A2 ... --                      B1 B2 ...` for several runs a side ({} documents given, no `--`)",
                    self.a.len()
                )));
            }
            (a, b) => (a.to_vec(), b.to_vec()),
        };
        if let Some(option) = b.iter().find(|p| p.to_string_lossy().starts_with('-')) {
            return Err(usage(format!(
                "{} comes after `--`, where only side B's documents go: options go before `--`",
                option.display()
            )));
        }
        let exports = export::targets(&self.exports, None).map_err(usage)?;
        if let Some(t) = exports.iter().find(|t| !diff::EXPORT_FORMATS.contains(&t.format)) {
            return Err(usage(format!(
                "--export {}: a diff is written as .json, .svg, .flame.svg or .html, not .{}",
                t.path.display(),
                t.format
            )));
        }
        let inputs = |paths: Vec<PathBuf>| paths.into_iter().map(Input::Saved).collect();
        Ok(DiffRequest { a: inputs(a), b: inputs(b), json: self.json, exports })
    }
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

impl ProbeArgs {
    /// How the probes are to be attached.
    pub fn options(self) -> ProbeOptions {
        ProbeOptions {
            attach: self.attach.into(),
            kretprobe_maxactive: self.kretprobe_maxactive,
            syscall_tracepoints: self.syscall_tracepoints.choice(),
            block_stacks: !self.no_block_stacks,
            sample_hz: if self.no_cpu_stacks { 0 } else { self.sample_hz },
            points: self.points.into(),
            cgroup_paths: false,
        }
    }
}

impl GroupArgs {
    /// Whether exits are grouped by cgroup, which needs the cgroups made and removed during the
    /// run named.
    fn by_cgroup(self) -> bool {
        self.group_by == Some(GroupByArg::Cgroup)
    }

    /// The grouping asked for, with the time to live of `serve`'s groups.
    pub fn options(self, ttl: Option<Duration>) -> Option<GroupOptions> {
        self.group_by.map(|by| GroupOptions {
            by: by.into(),
            max_groups: self.max_groups as usize,
            ttl,
        })
    }
}

impl ThreadsArgs {
    fn params(self) -> ThreadsParams {
        let Self { threads, reps, stagger_us, rate } = self;
        ThreadsParams { threads, reps, stagger_us, rate }
    }
}

impl ForkArgs {
    fn params(self) -> ForkParams {
        let Self { count, parallel, .. } = self;
        ForkParams { count, parallel }
    }
}

impl ConditionArgs {
    /// The conditions' settings.
    pub fn options(self) -> ConditionOptions {
        ConditionOptions { rcvbuf: self.rcvbuf }
    }
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

fn parse_ringbuf_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!("{n} is not a power of two of at least 4096"));
    }
    Ok(n)
}

fn parse_exit_slots(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if !n.is_power_of_two() || n > 1 << 20 {
        return Err(format!("{n} is not a power of two of at most 2^20"));
    }
    Ok(n)
}

/// Permissions in octal (`600`, `0640`, `0o644`).
fn parse_file_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|&mode| mode <= 0o777)
        .ok_or_else(|| format!("{s} is not a file mode in octal, from 0 to 777 (e.g. 600, 644)"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("{s} is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{e}"))
}

/// A time with its unit (`ns`, `us`, `ms`, `s`, `m`, `h`), or a number of seconds.
fn parse_time(s: &str) -> Result<Duration, String> {
    let units = [
        ("ns", 1e-9),
        ("us", 1e-6),
        ("µs", 1e-6),
        ("ms", 0.001),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ];
    let (number, unit_s) = units
        .iter()
        .find_map(|&(unit, unit_s)| s.strip_suffix(unit).map(|n| (n, unit_s)))
        .unwrap_or((s, 1.0));
    let n: f64 = number.parse().map_err(|_| {
        format!("{s} is not a time: seconds, or a number with its unit (50ms, 90s, 10m, 1h)")
    })?;
    let secs = n * unit_s;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("{s} is not a positive time"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{e}"))
}

/// The kernel keeps 15 bytes of a task's name (TASK_COMM_LEN is 16 with the NUL).
pub const COMM_MAX: usize = 15;

fn parse_comm(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > COMM_MAX || s.contains('\0') {
        return Err(format!(
            "{s:?} cannot be a task name: the kernel keeps 1 to {COMM_MAX} bytes without NUL"
        ));
    }
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use proptest::{collection::vec, prelude::*};

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_checked(std::iter::once("exitprof").chain(args.iter().copied()))
    }

    fn target(args: &[&str]) -> Target {
        parse(args).unwrap().run.target()
    }

    #[test]
    fn defaults_are_the_2006_benchmark() {
        let cli = parse(&[]).unwrap();
        let benchmark = ThreadsParams { threads: 1000, reps: 10, stagger_us: 2, rate: None };
        assert_eq!(cli.run.target(), Target::Storm(Storm::Threads(benchmark)));
        assert!(!cli.run.json);
        let fork = ForkParams { count: 1024, parallel: 1 };
        assert_eq!(target(&["--workload", "ipcns"]), Target::Storm(Storm::Ipcns(fork)));
        let netns = NetnsParams { forks: ForkParams { count: 3, parallel: 1 }, veth_pairs: 100 };
        assert_eq!(
            target(&["--workload", "netns", "--count", "3", "--veth-pairs", "100"]),
            Target::Storm(Storm::Netns(netns))
        );
        let err = parse(&["--workload", "ipcns", "--veth-pairs", "4"]).unwrap_err();
        assert!(err.to_string().contains("--veth-pairs applies to --workload netns only"), "{err}");
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
        let params = ThreadsParams { threads: 50, reps: 3, stagger_us: 0, rate: None };
        assert_eq!(cli.run.target(), Target::Storm(Storm::Threads(params)));
        assert!(cli.run.json);
        let Target::Storm(Storm::Threads(p)) = target(&["--rate", "5000"]) else { panic!() };
        assert_eq!(p.rate, Some(5000));
        assert_eq!(
            target(&["--workload", "fork", "--count", "64", "--parallel", "2"]),
            Target::Storm(Storm::Fork(ForkParams { count: 64, parallel: 2 }))
        );
    }

    #[test]
    fn file_modes_are_octal_on_every_command() {
        assert_eq!(parse(&[]).unwrap().file_mode, None);
        assert_eq!(parse(&["--file-mode", "644"]).unwrap().file_mode, Some(0o644));
        let record = parse(&["record", "-o", "run.rec", "--file-mode", "0640"]).unwrap();
        assert_eq!(record.file_mode, Some(0o640));
        assert_eq!(
            parse(&["report", "x.rec", "--file-mode", "0o600"]).unwrap().file_mode,
            Some(0o600)
        );
        for bad in ["888", "1777", "rw-r--r--", ""] {
            let error = parse(&["--file-mode", bad]).unwrap_err().to_string();
            assert!(error.contains("not a file mode in octal"), "{bad}: {error}");
        }
    }

    #[test]
    fn sampling_is_on_by_default_and_off_when_asked() {
        let hz = |args: &[&str]| parse(args).unwrap().run.probes.options().sample_hz;
        assert_eq!(hz(&[]), DEFAULT_SAMPLE_HZ);
        assert_eq!(hz(&["--sample-hz", "4999"]), 4999);
        assert_eq!(hz(&["--no-cpu-stacks"]), 0);
    }

    #[test]
    fn targets_are_read() {
        assert_eq!(
            target(&["--", "sh", "-c", "true"]),
            Target::Command(vec!["sh".into(), "-c".into(), "true".into()])
        );
        assert_eq!(target(&["--pid", "42", "--duration", "1.5"]), Target::Pid(42));
        assert_eq!(target(&["--comm", "nginx"]), Target::Comm("nginx".into()));
        assert_eq!(
            target(&["--cgroup", "/sys/fs/cgroup/a"]),
            Target::Cgroup("/sys/fs/cgroup/a".into())
        );
        assert_eq!(target(&["--all"]), Target::All);
        let cli = parse(&["--all", "--duration", "0.25"]).unwrap();
        assert_eq!(cli.run.duration, Some(Duration::from_millis(250)));
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
            &["--rate", "0"],
            &["--workload", "fork", "--count", "0"],
            &["--workload", "fork", "--parallel", "0"],
            &["--pid", "0"],
            &["--comm", "a-name-longer-than-15"],
            &["--comm", ""],
            &["--all", "--duration", "0"],
            &["--all", "--duration", "-1"],
            &["--sample-hz", "0"],
            &["--sample-hz", "20001"],
            &["--sample-hz", "99", "--no-cpu-stacks"],
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
    fn one_target_at_a_time() {
        for args in [
            &["--workload", "fork", "--all"][..],
            &["--pid", "1", "--comm", "x"],
            &["--all", "--", "true"],
            &["--workload", "threads", "--", "true"],
        ] {
            let err = parse(args).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ArgumentConflict, "{args:?}: {err}");
        }
    }

    #[test]
    fn serve_watches_every_exit_on_loopback_unless_told() {
        let serve = |args: &[&str]| {
            let cli = parse(&[&["serve"], args].concat())?;
            let Some(Command::Serve(serve)) = cli.command else { panic!("not serve: {args:?}") };
            Ok::<_, clap::Error>(serve.request())
        };
        let default = serve(&[]).unwrap();
        assert_eq!(default.target, Target::All);
        assert_eq!(default.listen.to_string(), "127.0.0.1:19100");
        assert_eq!(default.probes.syscall_tracepoints, Some(false));
        assert!(!default.probes.block_stacks && default.probes.sample_hz == 0);
        assert_eq!(serve(&["--comm", "nginx"]).unwrap().target, Target::Comm("nginx".to_owned()));
        assert_eq!(serve(&["--cgroup", "/a"]).unwrap().target, Target::Cgroup("/a".into()));
        let pid = serve(&["--pid", "7", "--listen", "[::]:9000"]).unwrap();
        assert_eq!((pid.target, pid.listen.port()), (Target::Pid(7), 9000));
        for (args, kind) in [
            (&["--all", "--pid", "1"][..], ErrorKind::ArgumentConflict),
            (&["--comm", "a", "--pid", "1"], ErrorKind::ArgumentConflict),
            (&["--listen", "localhost"], ErrorKind::ValueValidation),
            (&["--workload", "fork"], ErrorKind::UnknownArgument),
        ] {
            let err = serve(args).err().unwrap_or_else(|| panic!("{args:?} accepted"));
            assert_eq!(err.kind(), kind, "{args:?}: {err}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    /// `--group-ttl` takes its default's form (`10m`), and any of the units, or seconds.
    #[test]
    fn group_ttl_takes_a_time_with_its_unit() {
        let ttl = |args: &[&str]| {
            let cli = parse(&[&["serve", "--group-by", "cgroup"], args].concat())?;
            let Some(Command::Serve(serve)) = cli.command else { panic!("not serve: {args:?}") };
            Ok::<_, clap::Error>(serve.request().groups.and_then(|g| g.ttl))
        };
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(ttl(&[]).unwrap(), Some(serve::GROUP_TTL));
        assert_eq!(serve::GROUP_TTL, Duration::from_secs(600), "the help's [default: 10m]");
        for (time, expected) in [("10m", secs(600)), ("90s", secs(90)), ("2", secs(2))] {
            assert_eq!(ttl(&["--group-ttl", time]).unwrap(), expected, "{time}");
        }
        assert_eq!(ttl(&["--group-ttl", "1.5h"]).unwrap(), secs(5400));
        assert_eq!(ttl(&["--group-ttl", "500ms"]).unwrap(), Some(Duration::from_millis(500)));
        for bad in ["0", "0s", "--group-ttl=-1m", "10x", "m", "1d"] {
            let args: &[&str] = if bad.starts_with("--") { &[bad] } else { &["--group-ttl", bad] };
            let err = ttl(args).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}: {err}");
        }
    }

    #[test]
    fn options_must_fit_their_target() {
        for (args, flag) in [
            (&["--workload", "fork", "--threads", "5"][..], "--threads"),
            (&["--count", "5"], "--count"),
            (&["--all", "--parallel", "2"], "--parallel"),
            (&["--duration", "1"], "--duration"),
            (&["--duration", "1", "--", "true"], "--duration"),
            (&["--pid", "1", "--rate", "10"], "--rate"),
            (&["--rate", "10", "--stagger-us", "3"], "--stagger-us"),
        ] {
            let err = parse(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains(flag), "{args:?}: {err}");
        }
    }

    #[test]
    fn a_sweep_sets_the_stagger_itself() {
        for (extra, flag) in
            [(["--rate", "5000"], "--rate"), (["--stagger-us", "3"], "--stagger-us")]
        {
            let args = [&["sweep", "--toggle", "probes", "--stagger", "0,1"][..], &extra].concat();
            let err = parse(&args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            let text = err.to_string();
            assert!(text.contains(flag) && text.contains("--stagger"), "{args:?}: {err}");
        }
    }

    #[test]
    fn bpf_stats_is_for_plain_runs() {
        assert!(parse(&["--bpf-stats", "--json"]).unwrap().run.bpf_stats);
        assert!(!parse(&[]).unwrap().run.bpf_stats);
        for args in [
            &["compare", "--toggle", "probes", "--bpf-stats"][..],
            &["sweep", "--toggle", "probes", "--stagger", "1,2", "--bpf-stats"],
        ] {
            let err = parse(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains("--bpf-stats"), "{args:?}: {err}");
        }
    }

    #[test]
    fn the_point_set_is_full_unless_asked_and_compare_toggles_it_itself() {
        assert_eq!(parse(&[]).unwrap().run.probes.options().points, PointSet::Full);
        let minimal = parse(&["--points", "minimal"]).unwrap();
        assert_eq!(minimal.run.probes.options().points, PointSet::Minimal);
        let toggled = parse(&["compare", "--toggle", "point-set"]).unwrap();
        let Some(Command::Compare(compare)) = toggled.command else { panic!("not compare") };
        assert_eq!(Condition::from(compare.toggle), Condition::PointSet);
        let err = parse(&["compare", "--toggle", "point-set", "--points", "minimal"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--points minimal"), "{err}");
    }

    #[test]
    fn record_takes_a_plain_runs_options_and_report_a_file() {
        let cli = parse(&["record", "-o", "run.rec", "--threads", "200", "--reps", "2", "--json"])
            .unwrap();
        let Some(Command::Record(record)) = cli.command else { panic!("not record") };
        let request = record.request();
        assert_eq!(request.record, Some(PathBuf::from("run.rec")));
        let params = ThreadsParams { threads: 200, reps: 2, stagger_us: 2, rate: None };
        assert_eq!(request.target, Target::Storm(Storm::Threads(params)));
        assert!(request.json);
        assert!(parse(&[]).unwrap().run.request().record.is_none());
        for args in [
            &["record", "-o", "r", "--bpf-stats", "--points", "minimal"][..],
            &["record", "--output", "r", "--all", "--duration", "1"],
        ] {
            assert!(parse(args).is_ok(), "{args:?}");
        }
        for args in [
            &["record", "--threads", "5"][..],
            &["record", "-o", "r", "--workload", "fork", "--threads", "5"],
            &["record", "-o", "r", "--all", "--", "true"],
        ] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
        let cli = parse(&["report", "run.rec", "--json", "--export", "a.csv"]).unwrap();
        let Some(Command::Report(report)) = cli.command else { panic!("not report") };
        assert_eq!((report.file, report.json), (PathBuf::from("run.rec"), true));
        assert_eq!(report.exports, [PathBuf::from("a.csv")]);
        for args in [&["report"][..], &["report", "run.rec", "--threads", "5"]] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn report_views_are_read() {
        let view = |args: &[&str]| {
            let cli = parse(&[&["report", "run.rec"][..], args].concat()).unwrap();
            let Some(Command::Report(report)) = cli.command else { panic!("not report") };
            report.view()
        };
        let v = view(&["--pid", "42", "--by-kind"]);
        assert!(v.pid == Some(42) && matches!(v.shown, Shown::ByKind));
        let v = view(&["--stage", "exit_mm"]);
        assert!(v.pid.is_none() && matches!(v.shown, Shown::Stage(ref s) if s == "exit_mm"));
        assert!(matches!(view(&[]).shown, Shown::Report));
        assert_eq!(view(&["--comm", "sh"]).comm, Some(TaskName::of("sh")));
        for args in [
            &["report", "r", "--by-kind", "--stage", "x"][..],
            &["report", "r", "--pid", "0"],
            &["report", "r", "--pid", "1", "--comm", "sh"],
            &["report", "r", "--comm", "a-name-of-16-byte"],
        ] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn workload_child_parses() {
        let cli = parse(&["__workload", "--channel-fd", "5", "threads", "--threads", "4"]).unwrap();
        let Some(Command::Driver(child)) = cli.command else { panic!("not a workload child") };
        assert_eq!(child.channel_fd, Some(5));
        let DriverCommand::Threads(p) = child.command else { panic!("not threads") };
        assert_eq!(p.threads, 4);
        let cli =
            parse(&["__workload", "exec", "--program", "/bin/sh", "sh", "-c", "true"]).unwrap();
        let Some(Command::Driver(child)) = cli.command else { panic!("not a workload child") };
        let DriverCommand::Exec { program, argv } = child.command else { panic!("not exec") };
        assert_eq!(program, "/bin/sh");
        assert_eq!(argv, ["sh", "-c", "true"]);
    }

    #[test]
    fn diff_reads_two_documents_or_two_sides_split_by_a_double_dash() {
        let diff = |args: &[&str]| {
            let cli = parse(&[&["diff"], args].concat())?;
            let Some(Command::Diff(diff)) = cli.command else { panic!("not diff: {args:?}") };
            diff.request()
        };
        let paths = |inputs: &[Input]| -> Vec<String> {
            inputs.iter().map(|i| i.path().display().to_string()).collect()
        };
        let one_each = diff(&["a.json", "b.json"]).unwrap();
        assert_eq!(
            (paths(&one_each.a), paths(&one_each.b)),
            (vec!["a.json".to_owned()], vec!["b.json".to_owned()])
        );
        let repeated =
            diff(&["--json", "--export", "d.svg", "a1", "a2", "a3", "--", "b1", "b2"]).unwrap();
        assert_eq!(
            (paths(&repeated.a), paths(&repeated.b)),
            (
                vec!["a1".to_owned(), "a2".to_owned(), "a3".to_owned()],
                vec!["b1".to_owned(), "b2".to_owned()]
            )
        );
        assert!(repeated.json);
        assert_eq!(repeated.exports[0].format, Format::Svg);
        for (args, mentions) in [
            (&["a1", "a2", "a3"][..], "two sides"),
            (&["a"], "two sides"),
            (&["a1", "--", "b1", "--json"], "options go before `--`"),
            (&["--export", "d.csv", "a", "b"], ".json, .svg, .flame.svg or .html"),
        ] {
            let err = diff(args).err().unwrap_or_else(|| panic!("{args:?} accepted"));
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains(mentions), "{args:?}: {err}");
        }
        assert_eq!(parse(&["diff"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn conditions_are_named_on_the_command_line_as_in_documents() {
        for &arg in ConditionArg::value_variants() {
            let condition = Condition::from(arg);
            assert_eq!(ConditionArg::from_str(condition.name(), false), Ok(arg));
            assert_eq!(serde_json::to_value(condition).unwrap(), condition.name());
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Words of exitprof's command lines, good and bad, and some odd values.
    const WORDS: &[&str] = &[
        "--threads",
        "--reps",
        "--stagger-us",
        "--rate",
        "--workload",
        "threads",
        "fork",
        "ipcns",
        "netns",
        "--veth-pairs",
        "--count",
        "--parallel",
        "--pid",
        "--comm",
        "--all",
        "--duration",
        "--json",
        "--export",
        "--format",
        "csv",
        "json",
        "--ringbuf-bytes",
        "--attach",
        "kprobe",
        "fentry",
        "auto",
        "--kretprobe-maxactive",
        "--",
        "plan",
        "compare",
        "sweep",
        "diff",
        "a.json",
        "--toggle",
        "delayacct",
        "probes",
        "taskstats-listener",
        "--runs",
        "--stagger",
        "--rcvbuf",
        "-v",
        "__workload",
        "__condition",
        "on",
        "off",
        "exec",
        "--program",
        "--channel-fd",
        "record",
        "-o",
        "report",
        "run.rec",
        "--help",
        "0",
        "1",
        "-1",
        "4096",
        "1.5",
        "nan",
        "inf",
        "1e400",
        "5,10,x",
        "a.csv",
        "b.txt",
        "",
        "x",
        "18446744073709551616",
    ];

    proptest! {
        /// Any command line parses or is refused as bad usage (status 2), never a panic; what
        /// parses yields a target and export targets.
        #[test]
        fn any_command_line_parses_or_is_a_usage_error(
            words in vec(prop_oneof![
                4 => proptest::sample::select(WORDS).prop_map(str::to_owned),
                1 => any::<String>(),
            ], 0..10)
        ) {
            match parse(&words.iter().map(String::as_str).collect::<Vec<_>>()) {
                Ok(cli) => {
                    let refused = match &cli.command {
                        Some(Command::Diff(diff)) => diff.request().err(),
                        Some(Command::Report(report)) => report.export_targets().err(),
                        _ => None,
                    };
                    if let Some(e) = refused
                    {
                        prop_assert_eq!(e.exit_code(), 2);
                    }
                    let run = match &cli.command {
                        None => Some(&cli.run),
                        Some(Command::Record(r)) => Some(&r.run),
                        Some(Command::Compare(c)) => Some(&c.run),
                        Some(Command::Sweep(s)) => Some(&s.compare.run),
                        Some(_) => None,
                    };
                    if let Some(run) = run {
                        let _ = run.target();
                        if let Err(e) = run.export_targets() {
                            prop_assert_eq!(e.exit_code(), 2);
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::DisplayHelp => {}
                Err(e) => prop_assert_eq!(e.exit_code(), 2, "{}", e),
            }
        }

        #[test]
        fn durations_are_positive_and_finite(text in any::<String>(), secs in 1e-9f64..1e9) {
            if let Ok(d) = parse_duration(&text) {
                prop_assert!(d > Duration::ZERO);
            }
            let d = parse_duration(&secs.to_string()).unwrap();
            prop_assert!((d.as_secs_f64() - secs).abs() <= 1e-9 * secs.max(1.0));
        }

        #[test]
        fn task_names_are_the_kernels(text in any::<String>()) {
            let fits = (1..=COMM_MAX).contains(&text.len()) && !text.contains('\0');
            prop_assert_eq!(parse_comm(&text).ok(), fits.then(|| text.clone()));
        }

        #[test]
        fn ring_buffer_sizes_are_powers_of_two_of_a_page_or_more(n in any::<u32>()) {
            let fits = n >= 4096 && n.is_power_of_two();
            prop_assert_eq!(parse_ringbuf_size(&n.to_string()).ok(), fits.then_some(n));
        }

        #[test]
        fn a_stagger_list_is_read_whole(staggers in vec(any::<u32>(), 1..8)) {
            let list = staggers.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            let cli = parse(&["sweep", "--toggle", "probes", "--stagger", &list]).unwrap();
            let Some(Command::Sweep(sweep)) = cli.command else { panic!("not a sweep") };
            prop_assert_eq!(sweep.staggers, staggers);
        }
    }
}
