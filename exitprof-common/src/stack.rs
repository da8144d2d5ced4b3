//! Kernel stacks taken inside followed exits: an on-CPU sample of the sampling clock, or the
//! stack where an exit blocked, sent when the block ends with how long it lasted.

/// Frames kept of a kernel stack.
pub const STACK_DEPTH: usize = 32;

/// [`StackRecord::kind`]: the sampling clock caught the exit on a CPU.
pub const STACK_ON_CPU: u32 = 1;
/// [`StackRecord::kind`]: the exit blocked here (switched out asleep) for [`StackRecord::ns`].
pub const STACK_BLOCKED: u32 = 2;
/// [`StackRecord::kind`]: the sampling clock caught a namespace teardown's kworker on a CPU
/// (`pid` is the kworker's, `exit_start_ns` the start of its run).
pub const STACK_TEARDOWN_ON_CPU: u32 = 3;
/// [`StackRecord::kind`]: a namespace teardown's kworker blocked here, as `STACK_BLOCKED`.
pub const STACK_TEARDOWN_BLOCKED: u32 = 4;

/// One kernel stack of a followed exit, or of a namespace teardown's run. Only the first `STACK_HEADER_LEN + stack_len * 8`
/// bytes are sent for a block; a sample is sent whole.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackRecord {
    /// `STACK_ON_CPU`, `STACK_BLOCKED`, or their `STACK_TEARDOWN_*` counterparts.
    pub kind: u32,
    /// Thread id of the exiting task (initial PID namespace, as in its exit record).
    pub pid: u32,
    /// When the exit started (its first hit): with `pid`, names the exit the stack belongs to.
    pub exit_start_ns: u64,
    /// When the stack was taken: the sample's tick, or the switch-out that began the block.
    pub ts_ns: u64,
    /// A block's length, from its switch-out to the task's return to a CPU (0 for a sample).
    pub ns: u64,
    /// Hits its exit record held when the stack was taken: it lies in the stage between hit
    /// `n_hits - 1` and the next one.
    pub n_hits: u32,
    /// Frames in `stack`.
    pub stack_len: u32,
    /// CPU the stack was taken on.
    pub cpu: u32,
    /// Padding, zero.
    pub pad: u32,
    /// Return addresses, innermost first (the interrupted or switching code's own first).
    pub stack: [u64; STACK_DEPTH],
}

/// Bytes of a [`StackRecord`] before its `stack`.
pub const STACK_HEADER_LEN: usize = core::mem::offset_of!(StackRecord, stack);

/// Size on the wire of a block's record holding `frames` frames.
pub const fn stack_wire_len(frames: usize) -> usize {
    STACK_HEADER_LEN + frames * 8
}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers and an array of them, no padding.
unsafe impl aya::Pod for StackRecord {}

const _: () = assert!(STACK_HEADER_LEN == 48);
const _: () = assert!(size_of::<StackRecord>() == STACK_HEADER_LEN + STACK_DEPTH * 8);
