//! The plain run (the default command) and `exitprof record`: the target, the storms'
//! parameters, the exports, the grouping.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use clap::{ArgMatches, Args, ValueEnum, parser::ValueSource};
use exitprof_core::{
    analysis::groups::GroupOptions,
    export::{self, ExportTarget, Format},
};
use exitprof_engine::{
    probes::ProbeOptions,
    profiled::{ForkParams, NetnsParams, Storm, Target, ThreadsParams},
    run::RunRequest,
};

use super::{
    parse::{parse_comm, parse_duration, parse_exit_slots, parse_ringbuf_size, parse_time, usage},
    probes::ProbeArgs,
    values::{FormatArg, GroupByArg},
};

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
    pub(super) fn check_options(&self, matches: &ArgMatches) -> Result<(), String> {
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

impl RunArgs {
    /// Each `--export` path with its format; a usage error when a format cannot be told.
    pub fn export_targets(&self) -> Result<Vec<ExportTarget>, clap::Error> {
        export::targets(&self.exports, self.format.map(Format::from)).map_err(usage)
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

impl GroupArgs {
    /// Whether exits are grouped by cgroup, which needs the cgroups made and removed during the
    /// run named.
    pub(super) fn by_cgroup(self) -> bool {
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
    pub(super) fn params(self) -> ThreadsParams {
        let Self { threads, reps, stagger_us, rate } = self;
        ThreadsParams { threads, reps, stagger_us, rate }
    }
}

impl ForkArgs {
    pub(super) fn params(self) -> ForkParams {
        let Self { count, parallel, .. } = self;
        ForkParams { count, parallel }
    }
}
