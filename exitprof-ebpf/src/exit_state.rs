//! The state of each exit in progress, in a slot of a preallocated array: taken at the first
//! probe point of an exit, extended by every later point, sent to userspace and released at the
//! final switch-out.

use aya_ebpf::helpers::bpf_get_smp_processor_id;
use exitprof_common::{
    counters,
    deferred::is_free_sampled,
    point::{Marker, marker_code},
    record::{
        BLOCK_STACK_DEPTH, ExitRecord, FLAG_GROUP_DEAD, FLAG_GROUP_DEAD_EXACT, FLAG_LATE_START,
        FLAG_TRUNCATED, MAX_HITS, wire_len,
    },
};

use crate::{
    follow::{follow_of, is_target},
    free_watch::{current_address, unwatch, watch},
    helpers::{
        current_ipc_ns, current_ns_pid_tgid, current_pid_tgid, now_ns, read_at, task_pid_tgid,
    },
    maps::{
        EXIT_OWNERS, EXIT_SLOT_MASK, EXIT_SLOTS, EXITS, FREES_AWAITED, SIGNAL_LIVE_OFFSET,
        TASK_SIGNAL_OFFSET, count, stopped, wakeup_flag,
    },
    sched::back_on_cpu,
    task_storage::{Task, current_task},
};

/// Whether a probe point may open a task's exit record.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Opens {
    /// A start point: opens the record (and replaces a stale one).
    Start,
    /// A point only exits reach: opens the record, flagged late, when no start was seen.
    Late,
    /// A point tasks also reach outside their exit (callees of `do_exit` run on other paths
    /// too: `task_work_run` on every return to userspace, `put_ipc_ns` in `unshare`, ...):
    /// only extends an open record.
    Never,
}

/// One exit's state, from its first probe point to its final switch-out. Kept by the kernel
/// side only: userspace receives its `record`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExitState {
    /// Frames in `pending_stack` (0: the block in progress has no stack).
    pub pending_stack_len: u32,
    /// Padding, zero.
    pub pad: u32,
    /// The kernel stack where the exiting task blocked last, taken as it switched out; it
    /// becomes the record's `block_stack` if that block turns out to be the exit's longest.
    pub pending_stack: [u64; BLOCK_STACK_DEPTH],
    /// The exit record.
    pub record: ExitRecord,
}

/// An exit's slot: its index in `EXIT_OWNERS` and `EXIT_SLOTS`. Owners are kept apart from the
/// states, eight to a cache line, so that looking for a slot that is not there (a free, an
/// exiting task that is not followed) reads little memory.
#[derive(Clone, Copy)]
pub struct Slot(u32);

impl Slot {
    /// The exit's state.
    #[inline(always)]
    pub fn state(self) -> Option<&'static mut ExitState> {
        // SAFETY: a slot is only written by the programs of the task that holds it (or of the
        // CPU switching that task), one at a time.
        EXIT_SLOTS.get_ptr_mut(self.0).map(|state| unsafe { &mut *state })
    }

    /// Frees the slot of the task at `address`: the exit it held has ended.
    #[inline(always)]
    pub fn release(self, address: u64) {
        if let Some(owner) = owner(self.0) {
            *owner = 0;
            unwatch(address);
        }
    }
}

/// A task as a slot's owner: its `task_struct`'s address, unique while the task lives (its
/// slot is released at its final switch-out, or at the latest when it is freed).
#[inline(always)]
pub fn key(task: Task) -> u64 {
    task as u64
}

/// The two slots an exit of the task with pid `pid` may take: its pid's low bits (pids are
/// handed out in turn, so the exits of a storm take neighbouring slots), and a mix of all its
/// bits, for when another exit holds the first.
#[inline(always)]
fn slot_indexes(pid: u32) -> [u32; 2] {
    let mask = EXIT_SLOT_MASK.load();
    [pid & mask, (pid.wrapping_mul(0x9E37_79B1) >> 12) & mask]
}

/// The owner of slot `index` (0: free).
#[inline(always)]
fn owner(index: u32) -> Option<&'static mut u64> {
    // SAFETY: as [`Slot::state`]; claiming a free slot is the exception (see `claim_slot`).
    EXIT_OWNERS.get_ptr_mut(index).map(|owner| unsafe { &mut *owner })
}

/// The slot of `task`'s exit, if it is in progress. Array slots are found without a hash or a
/// lock: this runs at every probe hit of an exit and every switch of an exiting task.
///
/// A task's pid changes once in one case: a thread-group leader that exits because another
/// thread execs takes that thread's pid (`de_thread`'s `exchange_tids`), possibly after its
/// slot was claimed by its own pid, which is the group's tgid. So the tgid's slots are looked
/// at too.
#[inline(always)]
pub fn exit_slot(task: Task) -> Option<Slot> {
    let (pid, tgid) = task_pid_tgid(task);
    slot_of(key(task), pid, tgid)
}

/// [`exit_slot`] of the task `key` whose pid and tgid the caller has read already.
#[inline(always)]
pub fn slot_of(key: u64, pid: u32, tgid: u32) -> Option<Slot> {
    owned_slot(pid, key).or_else(|| if pid == tgid { None } else { owned_slot(tgid, key) })
}

/// The slot among those of `pid` that `key` owns.
#[inline(always)]
fn owned_slot(pid: u32, key: u64) -> Option<Slot> {
    slot_indexes(pid).into_iter().find(|&index| owner(index).is_some_and(|o| *o == key)).map(Slot)
}

/// The state of `task`'s exit, if it is in progress.
#[inline(always)]
pub fn exit_state(task: Task) -> Option<&'static mut ExitState> {
    exit_slot(task)?.state()
}

/// Takes a free slot for the current task's exit; `None` when both of its slots are held by
/// other exits in progress: the exit is counted lost. Two exits claiming one slot at the same
/// instant from two CPUs both take it and the later one keeps it; the other's record never
/// ends, and userspace counts it unfinished, a loss.
#[inline(always)]
fn claim_slot(task: Task) -> Option<&'static mut ExitState> {
    let (index, owner) = slot_indexes(task_pid_tgid(task).0)
        .into_iter()
        .find_map(|index| owner(index).filter(|o| **o == 0).map(|o| (index, o)))?;
    *owner = key(task);
    watch(current_address());
    Slot(index).state()
}

/// Records that the current task reached `point`; the state of its exit, if it is recorded.
#[inline(always)]
pub fn hit_current(point: u8, opens: Opens) -> Option<&'static mut ExitState> {
    let task = current_task();
    let now = now_ns();
    if let Some(state) = exit_state(task) {
        extend(state, point, opens, now);
        return Some(state);
    }
    if opens == Opens::Never || stopped() || !is_target(follow_of(task)) {
        return None;
    }
    let Some(state) = claim_slot(task) else {
        count(counters::STATE_FULL);
        return None;
    };
    open(state, opens != Opens::Start);
    push_hit(&mut state.record, point, now);
    Some(state)
}

/// A point of an exit whose record is open.
#[inline(always)]
fn extend(state: &mut ExitState, point: u8, opens: Opens, now: u64) {
    returned_unseen(state, now);
    if opens == Opens::Start {
        // A task exits once: a second start means the first record lost its end.
        count(counters::STALE_RECORD);
        count(counters::EXITS_ENDED);
        open(state, false);
    }
    push_hit(&mut state.record, point, now);
}

/// Starts the current task's exit record.
#[inline(always)]
fn open(state: &mut ExitState, late: bool) {
    let (pid, tgid) = current_pid_tgid();
    let (ns_pid, ns_tgid) = current_ns_pid_tgid();
    let record = &mut state.record;
    record.pid = pid;
    record.tgid = tgid;
    record.ns_pid = ns_pid;
    record.ns_tgid = ns_tgid;
    record.n_hits = 0;
    record.lost_hits = 0;
    record.flags = if late { FLAG_LATE_START } else { 0 };
    record.off_cpu_ns = 0;
    record.runq_ns = 0;
    record.longest_block_ns = 0;
    record.block_stack_ns = 0;
    record.off_since_ns = 0;
    record.block_stack_len = 0;
    record.block_stack_hit = 0;
    record.ipc_ns = current_ipc_ns();
    count(counters::EXITS_OPENED);
}

/// The current task runs, so it is back on a CPU: if its record still says it is off-CPU, no
/// `sched_switch` showed its return, and its interval closes now, late.
#[inline(always)]
fn returned_unseen(state: &mut ExitState, now: u64) {
    if state.record.off_since_ns != 0 {
        count(counters::UNSEEN_RETURN);
        back_on_cpu(state, now);
    }
}

/// Appends one hit. The last slot is kept for the final switch-out: a record that runs out of
/// slots loses the hits in between, is flagged truncated, and still ends where the exit ended.
#[inline(always)]
fn push_hit(record: &mut ExitRecord, point: u8, now: u64) {
    let i = record.n_hits as usize;
    let last = point == marker_code(Marker::FinalSwitch);
    if i >= MAX_HITS || (i == MAX_HITS - 1 && !last) {
        record.lost_hits += 1;
        record.flags |= FLAG_TRUNCATED;
        return;
    }
    record.points[i] = point;
    record.hits[i].ts_ns = now;
    record.hits[i].off_cpu_ns = record.off_cpu_ns;
    record.hits[i].runq_ns = record.runq_ns;
    record.n_hits += 1;
}

/// Notes the kernel's own `group_dead` for an exit.
#[inline(always)]
pub fn note_group_dead(state: &mut ExitState, group_dead: bool) {
    state.record.flags |= FLAG_GROUP_DEAD_EXACT;
    if group_dead {
        state.record.flags |= FLAG_GROUP_DEAD;
    }
}

/// Where the kernel's `group_dead` was not seen: the exit ended its group if no thread of it is
/// still alive at its end (`signal->live`, which `do_exit` decrements early on). Two threads
/// ending their exits at once may both see 0.
#[inline(always)]
fn classify_group_dead(task: Task, record: &mut ExitRecord) {
    if record.flags & FLAG_GROUP_DEAD_EXACT != 0 {
        return;
    }
    let signal = read_at::<u64>(task.cast(), TASK_SIGNAL_OFFSET.load()).unwrap_or(0);
    if signal != 0 && read_at::<i32>(signal as *const u8, SIGNAL_LIVE_OFFSET.load()) == Some(0) {
        record.flags |= FLAG_GROUP_DEAD;
    }
}

/// Ends the exit of `task` at its final switch-out: sends its record and releases its slot.
/// The free of one task in [`FREES_SAMPLED`] is awaited, to be reported.
#[inline(always)]
pub fn finish_exit(task: Task, slot: Slot, state: &mut ExitState, now: u64) {
    returned_unseen(state, now);
    let record = &mut state.record;
    push_hit(record, marker_code(Marker::FinalSwitch), now);
    classify_group_dead(task, record);
    // SAFETY: no side effects.
    record.cpu = unsafe { bpf_get_smp_processor_id() };
    let n = record.n_hits as usize;
    let len = wire_len(if n > MAX_HITS { MAX_HITS } else { n });
    // SAFETY: `len` never exceeds the size of the record it is read from.
    let bytes = unsafe { core::slice::from_raw_parts((&raw const *record).cast::<u8>(), len) };
    if EXITS.output::<[u8]>(bytes, wakeup_flag(&EXITS)).is_err() {
        count(counters::RINGBUF_FULL);
    }
    let pid = record.pid;
    // `task` is the current task: it is switching out.
    let address = current_address();
    slot.release(address);
    // After the record is in the ring buffer: userspace that sees the count also finds it.
    count(counters::EXITS_ENDED);
    if is_free_sampled(pid) {
        if FREES_AWAITED.insert(key(task), pid, 0).is_ok() {
            watch(address);
        } else {
            count(counters::DEFERRED_STATE_FULL);
        }
    }
}
