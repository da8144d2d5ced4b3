//! Deferred work: what an exit causes in other contexts (a kworker, the parent, an RCU
//! callback), sent as separate records and joined to exits in userspace.

/// The frees of one recorded exit's task in this many are reported (`TaskFreed`): enough for
/// the distribution of how long tasks wait for their RCU callback, without a map insert and a
/// record at every exit.
pub const FREES_SAMPLED: u32 = 16;

/// Whether the free of the task of a recorded exit with kernel pid `pid` is reported. Pids are
/// handed out in turn, so every sixteenth exit of a storm is.
pub const fn is_free_sampled(pid: u32) -> bool {
    pid.is_multiple_of(FREES_SAMPLED)
}

/// What a [`DeferredRecord`] describes.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeferredKind {
    /// One run of the `free_ipc` work item in a kworker (`start_ns`..`end_ns`), which frees the
    /// IPC namespaces released since its previous run after one RCU grace period (v6.3+ batch).
    IpcFreeRun = 1,
    /// One IPC namespace freed (`object` = its address) by the run that started at `start_ns`.
    IpcNsFreed = 2,
    /// The parent reaped a zombie (`object` = its pid): its `release_task` ran from `start_ns`
    /// to `end_ns` (equal when only the moment is known).
    Reap = 3,
    /// The RCU callback freed a task (`object` = its pid) at `start_ns` (`sched_process_free`):
    /// the tasks of recorded exits whose pids pass [`is_free_sampled`].
    TaskFreed = 4,
    /// A task queued the `free_ipc` work item at `start_ns`: a namespace it released waits for
    /// the next run.
    IpcFreeQueued = 5,
    /// A parent's `wait4` returned a reaped child at `start_ns` (`object` = the child's pid as
    /// the parent's PID namespace sees it): the tracepoint stand-in for `Reap`.
    WaitReaped = 6,
}

impl DeferredKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::IpcFreeRun),
            2 => Some(Self::IpcNsFreed),
            3 => Some(Self::Reap),
            4 => Some(Self::TaskFreed),
            5 => Some(Self::IpcFreeQueued),
            6 => Some(Self::WaitReaped),
            _ => None,
        }
    }
}

/// One piece of deferred work.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeferredRecord {
    /// A [`DeferredKind`] discriminant.
    pub kind: u32,
    /// Thread id of the task the work ran in (kworker, parent).
    pub pid: u32,
    /// When the work started (`bpf_ktime_get_ns`).
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// What it worked on: an IPC namespace address, or a pid (see [`DeferredKind`]).
    pub object: u64,
    /// `IpcFreeRun`: time spent in `synchronize_rcu` (0 where that cannot be probed).
    pub wait_ns: u64,
}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers without padding; any bit pattern is valid.
unsafe impl aya::Pod for DeferredRecord {}
