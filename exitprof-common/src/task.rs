//! How tasks are followed. Userspace marks the processes it starts or watches, through their
//! pidfds, in their task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`): a mark lives and dies with
//! its task, so nothing here is keyed by pid, and PID namespaces and pid reuse do not matter.
//! When a task starts to exit, the kernel side looks for the nearest mark among the task, its
//! thread-group leader and their ancestors. It marks a process itself as it is created during a
//! run (with its parent's decision), and as a thread takes it over by exec.

/// Not followed (the exit may still be chosen by name, or by `--all`).
pub const FOLLOW_NONE: u32 = 0;
/// A followed task: its exits are recorded, and so are those of its threads and descendants.
pub const FOLLOWED: u32 = 1;
/// A storm driver's main thread: the threads and processes it creates are followed, but its own
/// exit is not part of the storm it drives. Left out in the kernel, so that a full ring buffer
/// never counts it among the storm's lost exits.
pub const DRIVER: u32 = 2;
/// exitprof itself: never recorded, nor are its threads and the children it does not mark
/// otherwise, whatever else is followed (`--all`, `--comm`).
pub const EXCLUDED: u32 = 3;
/// Set by the kernel side only, on a process created during a run by a parent whose following
/// could not be decided (no mark within the generations of ancestors looked through): its exits
/// and its descendants' are counted lost, as not known to be followed.
pub const UNDECIDED: u32 = 4;

/// A task's mark, in its local storage.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskMark {
    /// How the task and its descendants are followed: `FOLLOWED`, `DRIVER`, `EXCLUDED` or
    /// `UNDECIDED`.
    pub follow: u32,
}

/// A process's mark where tasks have no local storage for tracing programs (before Linux 5.13):
/// kept by the process's pid (the initial PID namespace's), with the process's start time in
/// clock ticks (`/proc/PID/stat`'s 22nd field, the kernel's `start_boottime`), so that a process
/// that reuses the pid is never taken for the one marked.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PidMark {
    pub follow: u32,
    pad: u32,
    pub start_ticks: u64,
}

impl PidMark {
    pub const fn new(follow: u32, start_ticks: u64) -> Self {
        Self { follow, pad: 0, start_ticks }
    }
}

/// How a descendant (a thread, a child, ...) of a task marked `follow` is followed, if nothing
/// nearer is marked: a driver's own exit is left out, those of the tasks it creates are not.
pub const fn inherited(follow: u32) -> u32 {
    match follow {
        DRIVER => FOLLOWED,
        follow => follow,
    }
}

#[cfg(feature = "user")]
// SAFETY: a plain `#[repr(C)]` integer.
unsafe impl aya::Pod for TaskMark {}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers, no padding left implicit.
unsafe impl aya::Pod for PidMark {}
