//! Indices into the kernel side's per-CPU loss counters. Every record or hit the kernel could not
//! keep is counted under one of these; userspace reports them all.

/// The ring buffer had no room for an exit record.
pub const RINGBUF_FULL: u32 = 0;
/// The per-task state map was full when an exit started.
pub const STATE_FULL: u32 = 1;
/// The tracked-process map was full when a tracked process forked.
pub const TRACKED_FULL: u32 = 2;
/// The ring buffer had no room for a deferred-work record.
pub const DEFERRED_RINGBUF_FULL: u32 = 3;
/// An exit started for a thread id that still had an open record: the previous task with that
/// id never reached its final switch-out while exitprof watched, and its record is dropped.
pub const STALE_RECORD: u32 = 4;
/// A followed exit was back on a CPU without a `sched_switch` naming it as the next task (seen on
/// v6.18 after blocking on a rwsem): its off-CPU interval was closed at its next probe point or
/// at its final switch-out, so that interval's end is late. Not a loss: the exit is recorded.
pub const UNSEEN_RETURN: u32 = 5;
/// Number of counters.
pub const COUNT: u32 = 6;
