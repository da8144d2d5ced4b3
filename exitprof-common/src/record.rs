//! The per-exit record: the kernel keeps one in each exit's slot while the task exits and sends
//! it to userspace, trimmed to the hits it holds, at the task's final switch-out. Where the exit
//! blocked goes separately, one [`crate::stack::StackRecord`] per block whose stack was taken.

/// Most probe hits one exit can hold. The last slot is kept for the final switch-out, so that a
/// record that runs out of slots still ends where the exit ended; hits that find no slot are
/// counted in [`ExitRecord::lost_hits`] and the record is flagged [`FLAG_TRUNCATED`].
pub const MAX_HITS: usize = 48;

/// The task had no start marker: its first hit was a later point (its exit began before
/// exitprof attached, or on a path no start probe covers).
pub const FLAG_LATE_START: u32 = 1 << 0;

/// The exit ended its thread group (the kernel's `group_dead`): the last thread of a process,
/// or a single-threaded process. Meaningful with [`FLAG_KIND_KNOWN`].
pub const FLAG_GROUP_DEAD: u32 = 1 << 1;

/// Where `FLAG_GROUP_DEAD` came from: the kernel's own `group_dead` (the `sched_process_exit`
/// tracepoint of v6.16+, or `taskstats_exit`'s argument).
pub const FLAG_GROUP_DEAD_EXACT: u32 = 1 << 2;

/// Hits were lost for want of slots: the stages between the last kept hit and the final
/// switch-out are unknown.
pub const FLAG_TRUNCATED: u32 = 1 << 3;

/// Whether the exit ended its thread group is known: from the kernel's `group_dead`, or, where
/// that was not seen, because the task was the group's only live thread as its exit began
/// (a process exit), or a thread of the group was still alive at its end (a thread exit).
/// Without it the kind of the exit is unknown.
pub const FLAG_KIND_KNOWN: u32 = 1 << 4;

/// The exit's network namespace ([`ExitRecord::net_ns`]) had no reference left at the exit's
/// final switch-out: the namespace died with the exit (its last holders were the exit's task,
/// its sockets, or others that let go meanwhile), and its teardown in `cleanup_net` is the
/// exit's doing. Without it the namespace outlived the exit (other tasks, sockets, bind mounts
/// of `/proc/PID/ns/net` or devices still held it), or the exit was in no namespace of its own.
pub const FLAG_NET_NS_RELEASED: u32 = 1 << 5;

/// The exit's network namespace still had references at its end, but none from its parent's
/// side (the parent is in another network namespace): its task's free, an RCU grace period
/// later, looks at the count again (a `NetNsAtFree` deferred-work record): the exit's sockets,
/// closed by it, let go of the namespace from RCU callbacks.
pub const FLAG_NET_NS_FREE_AWAITED: u32 = 1 << 6;

/// Bytes of a task's name (`TASK_COMM_LEN`), its NUL included.
pub const COMM_LEN: usize = 16;

/// One probe hit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hit {
    /// `bpf_ktime_get_ns()` at the hit (CLOCK_MONOTONIC, ns).
    pub ts_ns: u64,
    /// Off-CPU time the task had accumulated since its exit started, at this hit (ns).
    pub off_cpu_ns: u64,
    /// The part of `off_cpu_ns` the task spent runnable, waiting for a CPU (preempted), rather
    /// than blocked.
    pub runq_ns: u64,
}

/// Everything the kernel side recorded about one task's exit.
///
/// Only the first `HEADER_LEN + n_hits * size_of::<Hit>()` bytes are sent.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExitRecord {
    /// Thread id of the exiting task in the initial PID namespace (the kernel's `pid`).
    pub pid: u32,
    /// Thread-group id (the userspace process id), in the initial PID namespace.
    pub tgid: u32,
    /// Thread id as exitprof's PID namespace sees it (equal to `pid` in the initial namespace;
    /// 0 when the task is not visible there).
    pub ns_pid: u32,
    /// Thread-group id as exitprof's PID namespace sees it (see `ns_pid`).
    pub ns_tgid: u32,
    /// Hits stored in `points` and `hits`.
    pub n_hits: u32,
    /// Hits that did not fit into `hits`.
    pub lost_hits: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// CPU the task was on at its final switch-out.
    pub cpu: u32,
    /// The run the exit began in (userspace numbers its runs): an exit that outlives its run is
    /// not counted in the next one.
    pub epoch: u32,
    /// Times the task was switched out asleep (blocked) during its exit.
    pub blocks: u32,
    /// Address of the task's IPC namespace when its exit started (joins deferred IPC work).
    pub ipc_ns: u64,
    /// Address of the task's network namespace when its exit started (joins its teardown in
    /// `cleanup_net`; see [`FLAG_NET_NS_RELEASED`]).
    pub net_ns: u64,
    /// Address of the task's user namespace (its credentials') when its exit started (joins
    /// its teardown in `free_user_ns`).
    pub user_ns: u64,
    /// The task's cgroup in the cgroup v2 hierarchy as its exit started (its id: the inode
    /// number of the cgroup's directory; the root's on a host that keeps tasks in v1 only).
    pub cgroup_id: u64,
    /// The thread's name (`comm`, NUL-padded) as its exit started.
    pub comm: [u8; COMM_LEN],
    /// The name of its process (the group leader's `comm`): the thread's own for a leader.
    pub process_comm: [u8; COMM_LEN],
    /// Point code of each hit (see [`crate::point`]), in the order they fired.
    pub points: [u8; MAX_HITS],
    /// The hits; only the first `n_hits` are valid.
    pub hits: [Hit; MAX_HITS],
}

/// Bytes of an [`ExitRecord`] before its `hits` array.
pub const HEADER_LEN: usize = core::mem::offset_of!(ExitRecord, hits);

/// Size on the wire of a record holding `n_hits` hits.
pub const fn wire_len(n_hits: usize) -> usize {
    HEADER_LEN + n_hits * size_of::<Hit>()
}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers and arrays of them, no padding, any bit pattern is valid.
unsafe impl aya::Pod for ExitRecord {}

// The layout userspace decodes: no padding anywhere (a `Pod` needs every byte initialised).
const _: () = assert!(HEADER_LEN == 10 * 4 + 4 * 8 + 2 * COMM_LEN + MAX_HITS);
const _: () = assert!(size_of::<ExitRecord>() == HEADER_LEN + MAX_HITS * size_of::<Hit>());
