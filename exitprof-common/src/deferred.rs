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

/// Bits of the eBPF global `WORK_TIMED`: the work functions whose runs the `workqueue_execute_*`
/// tracepoints time, those whose own function is not probed (kprobe or fentry).
pub const WORK_TIMED_FREE_IPC: u32 = 1 << 0;
pub const WORK_TIMED_CLEANUP_NET: u32 = 1 << 1;
pub const WORK_TIMED_FREE_USER_NS: u32 = 1 << 2;

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
    /// One run of `cleanup_net` in the `netns` workqueue's kworker (`start_ns`..`end_ns`),
    /// which tears down every network namespace whose last reference went since the previous
    /// run began: `count` of them, each sent as a [`DeferredKind::NetNsTornDown`]. `wait_ns`
    /// is its time off a CPU, `runq_ns` the part of that spent runnable.
    NetTeardownRun = 7,
    /// One network namespace (`object` = its address, `inum` its inode number, as
    /// `/proc/PID/ns/net` names it) torn down by the `cleanup_net` run that started at
    /// `start_ns`; sent as the run starts.
    NetNsTornDown = 8,
    /// One run of `free_user_ns` in a kworker (`start_ns`..`end_ns`), which frees the user
    /// namespace `object` (inode number `inum`), and its parents that it held last; `wait_ns`
    /// and `runq_ns` as for [`DeferredKind::NetTeardownRun`].
    UserNsTeardown = 9,
    /// The RCU callback freed the task of a recorded exit (`object` = its pid) whose exit record
    /// says `FLAG_NET_NS_FREE_AWAITED`, at `start_ns`; `flags` says whether its network
    /// namespace had a reference left then (`DEFERRED_NET_NS_RELEASED` if not).
    NetNsAtFree = 10,
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
            7 => Some(Self::NetTeardownRun),
            8 => Some(Self::NetNsTornDown),
            9 => Some(Self::UserNsTeardown),
            10 => Some(Self::NetNsAtFree),
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
    /// What it worked on: a namespace's address, or a pid (see [`DeferredKind`]).
    pub object: u64,
    /// `IpcFreeRun`: time spent in `synchronize_rcu` (0 where that cannot be probed); a
    /// teardown run: its time off a CPU.
    pub wait_ns: u64,
    /// A teardown run: the part of `wait_ns` it spent runnable (preempted), not blocked.
    pub runq_ns: u64,
    /// A namespace's inode number (`NetNsTornDown`, `UserNsTeardown`).
    pub inum: u32,
    /// `NetTeardownRun`: the namespaces it tears down.
    pub count: u32,
    /// `DEFERRED_*` bits.
    pub flags: u32,
    /// Padding, zero.
    pub pad: u32,
}

/// [`DeferredRecord::flags`] of a `NetTeardownRun`: the walk of the kernel's list of network
/// namespaces for those the run tears down stopped at its bound before the list's end, so some
/// of them may have gone unseen (and `count` is short).
pub const DEFERRED_WALK_TRUNCATED: u32 = 1 << 0;

/// [`DeferredRecord::flags`] of a `NetNsTornDown`: found in the run's own list of the namespaces
/// it tears down (`net_exit_list`, which it builds once it has taken them), rather than by their
/// count as it began (a namespace whose last reference went as the run began is only found so).
pub const DEFERRED_BATCH_MEMBER: u32 = 1 << 2;

/// [`DeferredRecord::flags`] of a `NetNsAtFree`: the exit's network namespace had no reference
/// left when its task was freed.
pub const DEFERRED_NET_NS_RELEASED: u32 = 1 << 1;

/// A task whose free the kernel side awaits, and why: `FREE_SAMPLED`, for the delay of frees
/// (a `TaskFreed` record), and `FREE_NET_CHECK`, to look at its network namespace's count
/// again (a `NetNsAtFree` record).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AwaitedFree {
    /// The pid its exit had.
    pub pid: u32,
    /// `FREE_*` bits.
    pub why: u32,
    /// Its network namespace (with `FREE_NET_CHECK`).
    pub net_ns: u64,
}

/// [`AwaitedFree::why`] bits.
pub const FREE_SAMPLED: u32 = 1 << 0;
pub const FREE_NET_CHECK: u32 = 1 << 1;

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers without padding; any bit pattern is valid.
unsafe impl aya::Pod for DeferredRecord {}
