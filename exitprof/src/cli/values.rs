//! The value enums of the options: the command line's own names and help for the domain's
//! enums, converted with `From`, so that nothing below the command line knows clap.

use clap::{ValueEnum, builder::PossibleValue};

use exitprof_core::{analysis::groups::GroupBy, export::Format};

use exitprof_engine::{
    conditions::{Condition, Side},
    probes::plan::{AttachMode, PointSet},
};

/// A choice exitprof can make itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    Auto,
    On,
    Off,
}

impl Switch {
    /// The choice; `None` for `auto`, which exitprof decides.
    pub(super) fn choice(self) -> Option<bool> {
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
