//! The probe points: their table across kernel versions, the plan a kernel resolved (or a
//! record kept), how the user asked for them to be attached, and what the kernel side counted.

pub mod counts;
pub mod plan;
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
