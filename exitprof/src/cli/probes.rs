//! How exitprof attaches its probes (the options every profiling command shares), and `exitprof
//! plan`.

use clap::Args;
use exitprof_engine::probes::{ProbeOptions, kprobe_events};

use super::values::{AttachArg, PointsArg, Switch};

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
pub(super) const DEFAULT_SAMPLE_HZ: u32 = 999;
/// Well under the kernel's own ceiling (`perf_event_max_sample_rate`, 100000 by default).
const MAX_SAMPLE_HZ: u32 = 20_000;

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
