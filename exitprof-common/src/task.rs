//! What the kernel side keeps in each task's local storage (`BPF_MAP_TYPE_TASK_STORAGE`): how
//! the task's exits are followed, and its exit record while it exits. The storage lives and dies
//! with the task, so nothing here is keyed by pid: PID namespaces and pid reuse do not matter.

use crate::record::{BLOCK_STACK_DEPTH, ExitRecord};

/// Not followed (the storage was created for an exit chosen by name, or `--all`).
pub const FOLLOW_NONE: u32 = 0;
/// A followed task: its exits are recorded, and the tasks it creates from then on are followed.
pub const FOLLOWED: u32 = 1;
/// A storm driver's main thread: the threads and processes it creates are followed, but its own
/// exit is not part of the storm it drives. Left out in the kernel, so that a full ring buffer
/// never counts it among the storm's lost exits.
pub const DRIVER: u32 = 2;
/// exitprof itself: never recorded, whatever else is followed (`--all`, `--comm`).
pub const EXCLUDED: u32 = 3;

/// The task is not exiting, or its exit is not recorded.
pub const PHASE_IDLE: u32 = 0;
/// The task is exiting and its record is open.
pub const PHASE_EXITING: u32 = 1;
/// The task's record was sent (or counted lost) at its final switch-out.
pub const PHASE_DONE: u32 = 2;

/// One task's local storage.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskState {
    /// How the task is followed: one of `FOLLOW_NONE`, `FOLLOWED`, `DRIVER`, `EXCLUDED`.
    /// Userspace sets it through a pidfd for the processes it starts or watches; the kernel side
    /// passes it on to the tasks they create.
    pub follow: u32,
    /// Where the task's exit stands: one of the `PHASE_*` values.
    pub phase: u32,
    /// Frames in `pending_stack` (0: the block in progress has no stack).
    pub pending_stack_len: u32,
    /// Padding, zero.
    pub pad: u32,
    /// The kernel stack where the exiting task blocked last, taken as it switched out; it
    /// becomes the record's `block_stack` if that block turns out to be the exit's longest.
    pub pending_stack: [u64; BLOCK_STACK_DEPTH],
    /// The exit record, valid from `PHASE_EXITING` on.
    pub record: ExitRecord,
}

impl TaskState {
    /// A state that only says how the task is followed, as userspace writes it.
    pub const fn marked(follow: u32) -> Self {
        // SAFETY: all-zero bytes are a valid `TaskState` (plain integers and arrays).
        let mut state: Self = unsafe { core::mem::zeroed() };
        state.follow = follow;
        state
    }
}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers and an `ExitRecord`, no padding.
unsafe impl aya::Pod for TaskState {}
