//! The state of each exit in progress, in a slot of a preallocated array: taken at the first
//! probe point of an exit, extended by every later point, sent to userspace and released at the
//! final switch-out.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_cgroup_id, bpf_get_smp_processor_id},
};
use exitprof_common::{
    counters,
    deferred::{AwaitedFree, FREE_NET_CHECK, FREE_SAMPLED, is_free_sampled},
    point::{Marker, marker_code},
    record::{
        ExitRecord, FLAG_GROUP_DEAD, FLAG_GROUP_DEAD_EXACT, FLAG_KIND_KNOWN, FLAG_LATE_START,
        FLAG_NET_NS_FREE_AWAITED, FLAG_NET_NS_RELEASED, FLAG_TRUNCATED, MAX_HITS, wire_len,
    },
};

use crate::{
    follow::{Following, following, forget_heir},
    free_watch::{current_address, is_watched, unwatch, watch},
    helpers::{
        EEXIST, current_ns_pid_tgid, current_pid_tgid, group_live, is_exiting, namespaces, now_ns,
        process_comm, read_at, real_parent, task_comm, task_pid_tgid,
    },
    maps::{
        AWAIT_FREES, EXIT_SLOT_MASK, EXIT_SLOTS, EXITS, EXITS_WAKEUP_BYTES, FREES_AWAITED,
        NET_REFS_OFFSET, count, epoch, stopped, wakeup_flag,
    },
    owners::{claim, clear, owner},
    refusals::{forget, refuse, was_refused},
    sched::{OffCpu, add_early_exits},
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

/// [`ExitState::flags`]: the exit opened before its task set `PF_EXITING`, and is counted among
/// the early exits (`crate::sched::add_early_exits`) until a probe sees the flag set. Exits
/// block before `exit_signals` sets the flag (a tracer's exit stop in `ptrace_event`, the wait
/// for a core dump in `coredump_task_exit`, cancelling io_uring requests), and in tracepoint mode
/// they open earlier still (the exit system call, a fatal `SIGKILL`): while any is, `sched_switch`
/// looks at every task it switches, not only those with `PF_EXITING`.
const EARLY: u32 = 1 << 0;

/// One exit's state, from its first probe point to its final switch-out. Kept by the kernel
/// side only: userspace receives its `record`, and its `block` once for each block whose stack
/// was taken.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExitState {
    /// The exit's time off a CPU so far (each hit takes a copy of its totals), and the stack of
    /// its block in progress.
    pub off: OffCpu,
    /// The `EARLY` bit.
    pub flags: u32,
    /// Padding, zero.
    pub pad: u32,
    /// The exit record.
    pub record: ExitRecord,
}

/// The exit's task has set `PF_EXITING` (or its exit is over): it no longer needs
/// `sched_switch` to look at every task.
#[inline(always)]
pub fn leave_early(state: &mut ExitState) {
    if state.flags & EARLY != 0 {
        state.flags &= !EARLY;
        add_early_exits(u64::MAX);
    }
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
        if clear(self.0) {
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
    slot_indexes(pid).into_iter().find(|&index| owner(index) == key).map(Slot)
}

/// The state of `task`'s exit, if it is in progress.
#[inline(always)]
pub fn exit_state(task: Task) -> Option<&'static mut ExitState> {
    exit_slot(task)?.state()
}

/// Takes a free slot for the current task's exit: each of its two slots is claimed atomically
/// (`crate::owners`), so that two exits claiming one slot from two CPUs at the same instant
/// never both take it. `None` when other exits in progress hold both.
#[inline(always)]
fn claim_slot(task: Task, address: u64) -> Option<&'static mut ExitState> {
    let claimed = key(task);
    let index = slot_indexes(task_pid_tgid(task).0)
        .into_iter()
        .find(|&index| owner(index) == 0 && claim(index, claimed))?;
    watch(address);
    Slot(index).state()
}

/// Records that the current task reached `point`; the state of its exit, if it is recorded.
#[inline(always)]
pub fn hit_current(point: u8, opens: Opens) -> Option<&'static mut ExitState> {
    let task = current_task();
    let now = now_ns();
    if let Some(state) = exit_state(task) {
        extend(task, state, point, opens, now);
        return Some(state);
    }
    if opens == Opens::Never || stopped() {
        return None;
    }
    let state = open_exit(task)?;
    start(task, state, opens != Opens::Start);
    push_hit(state, point, now);
    Some(state)
}

/// A slot for the current task's exit, if the exit is part of the target. An exit of the target
/// that cannot be recorded (no free slot, or its following cannot be decided) is counted lost
/// once, and remembered: a later point of it opens nothing and counts nothing.
#[inline(always)]
fn open_exit(task: Task) -> Option<&'static mut ExitState> {
    let address = current_address();
    if is_watched(address) && was_refused(address) {
        return None;
    }
    match following(task) {
        Following::Target => {}
        Following::NotTarget => return None,
        Following::Undecided => {
            refuse(address, counters::FOLLOW_UNKNOWN);
            return None;
        }
    }
    let state = claim_slot(task, address);
    if state.is_none() {
        refuse(address, counters::STATE_FULL);
    }
    state
}

/// A point of an exit whose record is open.
#[inline(always)]
fn extend(task: Task, state: &mut ExitState, point: u8, opens: Opens, now: u64) {
    returned_unseen(state, now);
    if opens == Opens::Start {
        // A task exits once: a second start means the first record lost its end.
        end_lost(state, counters::STALE_RECORD);
        start(task, state, false);
    } else if is_exiting(task) {
        leave_early(state);
    }
    push_hit(state, point, now);
}

/// Starts the current task's exit record.
#[inline(always)]
fn start(task: Task, state: &mut ExitState, late: bool) {
    let (pid, tgid) = current_pid_tgid();
    let (ns_pid, ns_tgid) = current_ns_pid_tgid();
    state.off.reset();
    state.flags = 0;
    let record = &mut state.record;
    record.pid = pid;
    record.tgid = tgid;
    record.ns_pid = ns_pid;
    record.ns_tgid = ns_tgid;
    record.n_hits = 0;
    record.lost_hits = 0;
    record.flags = if late { FLAG_LATE_START } else { 0 };
    record.epoch = epoch();
    record.blocks = 0;
    let namespaces = namespaces(task);
    record.ipc_ns = namespaces.ipc;
    record.net_ns = namespaces.net;
    record.user_ns = namespaces.user;
    // SAFETY: a helper without arguments or side effects.
    record.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    record.comm = task_comm(task);
    record.process_comm = if pid == tgid { record.comm } else { process_comm(task) };
    if !is_exiting(task) {
        state.flags |= EARLY;
        add_early_exits(1);
        // Before `PF_EXITING`, `do_exit` has not yet taken the task out of its group's live
        // threads: the only live one ends the group.
        if group_live(task) == Some(1) {
            record.flags |= FLAG_KIND_KNOWN | FLAG_GROUP_DEAD;
        }
    }
    count(counters::EXITS_OPENED);
}

/// The current task runs, so it is back on a CPU: if its state still says it is off-CPU, no
/// `sched_switch` showed its return, and its interval closes now, late.
#[inline(always)]
fn returned_unseen(state: &mut ExitState, now: u64) {
    if state.off.since_ns != 0 {
        count(counters::UNSEEN_RETURN);
        state.off.back(now);
    }
}

/// Appends one hit. The last slot is kept for the final switch-out: a record that runs out of
/// slots loses the hits in between, is flagged truncated, and still ends where the exit ended.
#[inline(always)]
fn push_hit(state: &mut ExitState, point: u8, now: u64) {
    let (off_cpu_ns, runq_ns) = (state.off.total_ns, state.off.runq_ns);
    let record = &mut state.record;
    let i = record.n_hits as usize;
    let last = point == marker_code(Marker::FinalSwitch);
    if i >= MAX_HITS || (i == MAX_HITS - 1 && !last) {
        record.lost_hits += 1;
        record.flags |= FLAG_TRUNCATED;
        return;
    }
    record.points[i] = point;
    record.hits[i].ts_ns = now;
    record.hits[i].off_cpu_ns = off_cpu_ns;
    record.hits[i].runq_ns = runq_ns;
    record.n_hits += 1;
}

/// Notes the kernel's own `group_dead` for an exit.
#[inline(always)]
pub fn note_group_dead(state: &mut ExitState, group_dead: bool) {
    state.record.flags |= FLAG_GROUP_DEAD_EXACT | FLAG_KIND_KNOWN;
    if group_dead {
        state.record.flags |= FLAG_GROUP_DEAD;
    } else {
        state.record.flags &= !FLAG_GROUP_DEAD;
    }
}

/// Where the kernel's `group_dead` was not seen and the exit's start did not settle it: a
/// thread of the group still alive at the exit's end (`signal->live`, which `do_exit`
/// decrements early on) makes it a thread's exit. With none alive the kind stays unknown: the
/// task may have been the last to leave, or only one of the last.
#[inline(always)]
fn classify_at_end(task: Task, record: &mut ExitRecord) {
    if record.flags & FLAG_KIND_KNOWN == 0 && group_live(task).is_some_and(|live| live > 0) {
        record.flags |= FLAG_KIND_KNOWN;
    }
}

/// The exit has ended in `state` without a record: counted lost under `cause` if it belongs to
/// this run, else as an end of an earlier run's exit.
#[inline(always)]
pub fn end_lost(state: &mut ExitState, cause: u32) {
    leave_early(state);
    if state.record.epoch == epoch() {
        count(cause);
        count(counters::EXITS_ENDED);
    } else {
        count(counters::STRAY_ENDS);
    }
}

/// Ends the exit of `task` at its final switch-out: sends its record and releases its slot.
/// Its free is awaited: where frees are reported ([`AWAIT_FREES`]), one task's in
/// [`exitprof_common::deferred::FREES_SAMPLED`]; and a task's whose network namespace is to be
/// looked at again then (`FLAG_NET_NS_FREE_AWAITED`).
#[inline(always)]
pub fn finish_exit(task: Task, slot: Slot, state: &mut ExitState, now: u64) {
    returned_unseen(state, now);
    push_hit(state, marker_code(Marker::FinalSwitch), now);
    leave_early(state);
    // Opened in an earlier run, which counted it unfinished: neither sent nor counted here.
    let this_run = state.record.epoch == epoch();
    if this_run {
        note_net_ns(task, &mut state.record);
        send(task, &mut state.record);
    }
    let pid = state.record.pid;
    forget_heir(task);
    // `task` is the current task: it is switching out.
    let address = current_address();
    slot.release(address);
    if !this_run {
        count(counters::STRAY_ENDS);
        return;
    }
    // After the record is in the ring buffer: userspace that sees the count also finds it.
    count(counters::EXITS_ENDED);
    let sampled = AWAIT_FREES.load() != 0 && is_free_sampled(pid);
    let net_check = state.record.flags & FLAG_NET_NS_FREE_AWAITED != 0;
    let why = if sampled { FREE_SAMPLED } else { 0 } | if net_check { FREE_NET_CHECK } else { 0 };
    if why != 0 {
        await_free(key(task), address, AwaitedFree { pid, why, net_ns: state.record.net_ns });
    }
}

/// The free of the task `key` (at `address`), whose exit was recorded, is awaited as `awaited`
/// says. An entry already there is an earlier task's at the same address, whose free went
/// unseen: it is replaced, and the address is watched once for both.
#[inline(always)]
fn await_free(key: u64, address: u64, awaited: AwaitedFree) {
    match FREES_AWAITED.insert(key, awaited, u64::from(BPF_NOEXIST)) {
        Ok(()) => watch(address),
        Err(e) if e == -EEXIST && FREES_AWAITED.insert(key, awaited, 0).is_ok() => {}
        Err(_) => count(counters::DEFERRED_STATE_FULL),
    }
}

/// The current task, `task`, at `address`, switches out for good, its exit not recorded
/// (refused, or not followed): nothing of it may outlive it, as nothing of a recorded exit does
/// ([`finish_exit`]). Its refusal, if it was refused, is forgotten now (no later point of its
/// exit can come); when it was its process's last live thread, a mark waiting for a thread to
/// take the process over by exec is dropped. (Its free forgets a refusal too, and releases a
/// slot: for exits whose end went unseen.)
#[inline(always)]
pub fn unrecorded_exit_ends(task: Task, address: u64) {
    if is_watched(address) && forget(address) {
        unwatch(address);
    }
    forget_heir(task);
}

/// Flags the exit whose network namespace has no reference left at its end: the namespace
/// died with it (`FLAG_NET_NS_RELEASED`). `do_exit` dropped the task's namespaces in
/// `exit_task_namespaces` and closed its files in `exit_task_work` by now, but sockets let go of
/// their namespace from RCU callbacks: where references are left and the parent (`task` is the
/// current task, which has no namespaces any more) is in another network namespace, the task's
/// free, after a grace period, looks again (`FLAG_NET_NS_FREE_AWAITED`). An exit whose parent
/// shares its namespace did not leave it. The namespace's memory is only freed at the end of its
/// teardown; a teardown that started before this read (whose count reads as anything) is told
/// from its start time, before the exit's end, and userspace judges it by that.
#[inline(always)]
fn note_net_ns(task: Task, record: &mut ExitRecord) {
    if record.net_ns == 0 {
        return;
    }
    match read_at::<u32>(record.net_ns as *const u8, NET_REFS_OFFSET.load()) {
        Some(0) => record.flags |= FLAG_NET_NS_RELEASED,
        Some(_) if namespaces(real_parent(task)).net != record.net_ns => {
            record.flags |= FLAG_NET_NS_FREE_AWAITED;
        }
        _ => {}
    }
}

/// Sends the record of an exit that has ended (or counts it lost, the ring buffer full).
#[inline(always)]
fn send(task: Task, record: &mut ExitRecord) {
    classify_at_end(task, record);
    // SAFETY: no side effects.
    record.cpu = unsafe { bpf_get_smp_processor_id() };
    let n = record.n_hits as usize;
    let len = wire_len(if n > MAX_HITS { MAX_HITS } else { n });
    // SAFETY: `len` never exceeds the size of the record it is read from.
    let bytes = unsafe { core::slice::from_raw_parts((&raw const *record).cast::<u8>(), len) };
    if EXITS.output::<[u8]>(bytes, wakeup_flag(&EXITS, &EXITS_WAKEUP_BYTES)).is_err() {
        count(counters::RINGBUF_FULL);
    }
}
