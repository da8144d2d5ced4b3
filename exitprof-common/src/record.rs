//! The per-exit record: the kernel keeps one in each exiting task's local storage while it exits
//! and sends it to userspace, trimmed to the hits it holds, at the task's final switch-out.

/// Most probe hits one exit can hold. The last slot is kept for the final switch-out, so that a
/// record that runs out of slots still ends where the exit ended; hits that find no slot are
/// counted in [`ExitRecord::lost_hits`] and the record is flagged [`FLAG_TRUNCATED`].
pub const MAX_HITS: usize = 48;

/// Frames kept of the kernel stack where an exit blocked longest.
pub const BLOCK_STACK_DEPTH: usize = 16;

/// The task had no start marker: its first hit was a later point (its exit began before
/// exitprof attached, or on a path no start probe covers).
pub const FLAG_LATE_START: u32 = 1 << 0;

/// The exit ended its thread group (the kernel's `group_dead`): the last thread of a process,
/// or a single-threaded process. Otherwise a thread of a process that lives on exited.
pub const FLAG_GROUP_DEAD: u32 = 1 << 1;

/// Where `FLAG_GROUP_DEAD` came from: the kernel's own `group_dead` (the `sched_process_exit`
/// tracepoint of v6.16+, or `taskstats_exit`'s argument). Without it, the record was classified
/// at its end by whether any thread of its group was still alive.
pub const FLAG_GROUP_DEAD_EXACT: u32 = 1 << 2;

/// Hits were lost for want of slots: the stages between the last kept hit and the final
/// switch-out are unknown.
pub const FLAG_TRUNCATED: u32 = 1 << 3;

/// Kernel-side bookkeeping: the task was switched out while still runnable (preempted), so the
/// time until it runs again is spent waiting for a CPU.
pub const FLAG_OFF_RUNNABLE: u32 = 1 << 31;

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
    /// Off-CPU time of the whole exit (ns): switched out, preempted or blocked.
    pub off_cpu_ns: u64,
    /// The part of `off_cpu_ns` spent runnable, waiting for a CPU.
    pub runq_ns: u64,
    /// The longest time the task was blocked (switched out, not runnable) during its exit.
    pub longest_block_ns: u64,
    /// The length of the block whose kernel stack is in `block_stack` (the longest one whose
    /// stack was walked; 0 when none was).
    pub block_stack_ns: u64,
    /// Kernel-side bookkeeping: when the task last switched out while exiting (ns, 0 while on a
    /// CPU). Meaningless in userspace.
    pub off_since_ns: u64,
    /// Address of the task's IPC namespace when its exit started (joins deferred IPC work).
    pub ipc_ns: u64,
    /// Kernel stack where the exit blocked longest (of the blocks whose stack was walked), as
    /// the task switched out: innermost first, the scheduler's and the probe's own frames
    /// included.
    pub block_stack: [u64; BLOCK_STACK_DEPTH],
    /// Frames (return addresses) in `block_stack`.
    pub block_stack_len: u32,
    /// Hits the record held when that block began: it lies between hit `block_stack_hit - 1`
    /// and the next one.
    pub block_stack_hit: u32,
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
const _: () = assert!(HEADER_LEN == 8 * 4 + 6 * 8 + BLOCK_STACK_DEPTH * 8 + 2 * 4 + MAX_HITS);
const _: () = assert!(size_of::<ExitRecord>() == HEADER_LEN + MAX_HITS * size_of::<Hit>());
