//! The per-exit record: the kernel keeps one per exiting task while it exits and sends it to
//! userspace, trimmed to the hits it holds, at the task's final switch-out.

/// Most probe hits one exit can hold; later hits are counted in
/// [`ExitRecord::lost_hits`] instead.
pub const MAX_HITS: usize = 48;

/// The task had no start marker: its first hit was a later point (its exit began before
/// exitprof attached, or on a path no start probe covers).
pub const FLAG_LATE_START: u32 = 1 << 0;

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
    /// Thread id of the exiting task (the kernel's `pid`).
    pub pid: u32,
    /// Thread-group id (the userspace process id).
    pub tgid: u32,
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
    /// Kernel stack (an id in the `BLOCK_STACKS` map) where that longest block began; -1 when
    /// the task never blocked or the stack was not taken.
    pub block_stack: i32,
    /// Kernel-side bookkeeping: the stack of the block in progress.
    pub pending_stack: i32,
    /// When the task last switched out while exiting (ns, 0 while on a CPU). Kernel-side
    /// bookkeeping, meaningless in userspace.
    pub off_since_ns: u64,
    /// Address of the task's IPC namespace when its exit started (joins deferred IPC work).
    pub ipc_ns: u64,
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
