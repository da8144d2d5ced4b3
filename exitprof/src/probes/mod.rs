//! Everything that touches the eBPF object: the probe plan for the running kernel, loading and
//! attaching the programs, kprobe events in tracefs, the maps the programs fill (ring buffers,
//! loss counters, stacks), the kernel's statistics of each program, and the privileges and
//! locked memory all of it needs.
//!
//! Must not import `run`, `analysis`, `cli`, nor the presentation layer (`present`, `report`,
//! `export`, `diff`): it knows how to probe, not what a run does with the records.

pub mod floor;
pub mod kprobe_events;
pub mod load;
pub mod maps;
pub mod memlock;
pub mod plan;
pub mod privileges;
pub mod prog_stats;
pub mod sites;

use self::plan::{AttachMode, PointSet};

/// How exitprof attaches its probes, as asked.
#[derive(Clone, Copy, Debug)]
pub struct ProbeOptions {
    pub attach: AttachMode,
    /// Instances per kretprobe: how many tasks may be inside one probed function at once.
    pub kretprobe_maxactive: u32,
    /// Whether to use the `syscalls:` tracepoints; `None`: only for targets exitprof drives.
    pub syscall_tracepoints: Option<bool>,
    /// Take the kernel stack of each block of an exiting task.
    pub block_stacks: bool,
    /// Samples per second and CPU of the kernel stacks of exits on a CPU (0: none).
    pub sample_hz: u32,
    /// Every probe point, or only those an exit's start and end need.
    pub points: PointSet,
    /// Name the cgroups made and removed during the run (their tracepoints), for exits grouped
    /// by cgroup.
    pub cgroup_paths: bool,
}
