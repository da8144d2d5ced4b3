//! Indices into the kernel side's per-CPU counters: every record or hit the kernel could not
//! keep is counted under one of these, and so are the exits it opened and ended, so that
//! userspace knows how many are still in progress. Userspace reports them all.

/// The ring buffer had no room for an exit record.
pub const RINGBUF_FULL: u32 = 0;
/// Both slots an exit could take were held by other exits in progress: the exit is not recorded.
pub const STATE_FULL: u32 = 1;
/// Whether a task is followed could not be decided: an exit's task had no mark within the
/// generations of ancestors looked through, or a followed process's mark could not be passed on
/// to the thread that took the process over by exec. Its exits are not recorded.
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
/// Exit records ended: sent, or dropped and counted under `RINGBUF_FULL` or `STALE_RECORD`.
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
/// Number of counters.
pub const COUNT: u32 = 13;
