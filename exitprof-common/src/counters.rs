//! Indices into the kernel side's per-CPU counters: every record or hit the kernel could not
//! keep is counted under one of these, and so are the exits it opened and ended, so that
//! userspace knows how many are still in progress. Userspace reports them all.

/// The ring buffer had no room for an exit record.
pub const RINGBUF_FULL: u32 = 0;
/// Both slots an exit could take were held by other exits in progress: the exit is not recorded.
/// Counted once per exit (the exit is remembered as refused, and not opened again later).
pub const STATE_FULL: u32 = 1;
/// Whether an exit is part of the target could not be decided (its task had no mark within the
/// generations of ancestors looked through), and nothing else chose it: it is not recorded.
/// Counted once per exit, as `STATE_FULL`.
pub const FOLLOW_UNKNOWN: u32 = 2;
/// The ring buffer had no room for a deferred-work record.
pub const DEFERRED_RINGBUF_FULL: u32 = 3;
/// An exit started again for a task whose record was still open: the earlier record never
/// reached its final switch-out, and is dropped.
pub const STALE_RECORD: u32 = 4;
/// A followed exit was back on a CPU without a `sched_switch` naming it as the next task (seen on
/// v6.18 after blocking on a rwsem): its off-CPU interval was closed at its next probe point or
/// at its final switch-out, so that interval's end is late. Not a loss: the exit is recorded.
pub const UNSEEN_RETURN: u32 = 5;
/// Exit records opened.
pub const EXITS_OPENED: u32 = 6;
/// Exit records of the current run ended: sent, or dropped and counted under `RINGBUF_FULL` or
/// `STALE_RECORD` (exits opened in an earlier run end under `STRAY_ENDS`).
pub const EXITS_ENDED: u32 = 7;
/// Blocks whose kernel stack was walked.
pub const STACKS_WALKED: u32 = 8;
/// Blocks that would have been the longest of their exit so far, whose stack was not walked
/// because this CPU had used its budget of walks.
pub const STACKS_SKIPPED: u32 = 9;
/// On-CPU samples of followed exits sent.
pub const SAMPLES: u32 = 10;
/// On-CPU samples dropped because the ring buffer was full.
pub const SAMPLES_LOST: u32 = 11;
/// Deferred work in progress that could not be noted (its map was full): a `free_ipc` run or a
/// reap that goes unreported.
pub const DEFERRED_STATE_FULL: u32 = 12;
/// Kernel stacks of blocks dropped because their ring buffer was full: the exit is recorded, the
/// block's time goes without its stack.
pub const BLOCK_STACKS_LOST: u32 = 13;
/// Exits refused (`STATE_FULL`, `FOLLOW_UNKNOWN`) that could not be remembered as such (the map
/// of refused exits was full): each may have been counted again, or recorded, at a later point.
pub const REFUSALS_FORGOTTEN: u32 = 14;
/// Exits opened in an earlier run that ended in this one: neither recorded nor lost here (their
/// run counted them unfinished).
pub const STRAY_ENDS: u32 = 15;
/// Followed processes whose mark could not be kept for a thread that takes them over by exec
/// (the map of such marks was full): their exits after the exec may go unrecorded, uncounted.
pub const MARKS_NOT_PASSED: u32 = 16;
/// Cgroups made or removed whose path could not be sent (the ring buffer was full): exits in
/// them are grouped under their cgroup's id, not its name. Not a loss of exits.
pub const CGROUP_NAMES_LOST: u32 = 17;
/// Refusals (`STATE_FULL`, `FOLLOW_UNKNOWN`) found at the address of a task other than the one
/// refused: the refused task was freed without its free being seen. Forgotten when found, so
/// that the exit now at that address is recorded or counted lost. Not a loss.
pub const STALE_REFUSALS: u32 = 18;
/// Number of counters.
pub const COUNT: u32 = 19;
