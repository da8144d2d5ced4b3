//! The per-task exit state, in the task's local storage: opened at the first probe point of an
//! exit, extended by every later point, sent to userspace at the final switch-out.

use aya_ebpf::helpers::{bpf_get_current_comm, bpf_get_smp_processor_id};
use exitprof_common::{
    counters,
    point::{Marker, marker_code},
    record::{
        ExitRecord, FLAG_GROUP_DEAD, FLAG_GROUP_DEAD_EXACT, FLAG_LATE_START, FLAG_TRUNCATED,
        MAX_HITS, wire_len,
    },
    sizes::COMM_LEN,
    task::{DRIVER, EXCLUDED, FOLLOW_NONE, FOLLOWED, PHASE_DONE, PHASE_EXITING, TaskState},
};

use crate::{
    helpers::{
        current_ipc_ns, current_ns_pid_tgid, current_pid_tgid, group_leader, now_ns, read_at,
        task_pid_tgid,
    },
    maps::{
        EXITS, SIGNAL_LIVE_OFFSET, TARGET_COMM, TASK_SIGNAL_OFFSET, TASKS, TRACE_ALL, count,
        stopped, wakeup_flag,
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

/// How a task without state of its own is followed: as its thread group's leader is (a thread
/// that existed before exitprof marked its process). A driver's threads are followed.
#[inline(always)]
pub fn inherited_follow(task: Task) -> u32 {
    let (pid, tgid) = task_pid_tgid(task);
    if pid == tgid {
        return FOLLOW_NONE;
    }
    match TASKS.get(group_leader(task)) {
        // SAFETY: a storage pointer from a successful lookup.
        Some(leader) => match unsafe { (*leader).follow } {
            DRIVER => FOLLOWED,
            follow => follow,
        },
        None => FOLLOW_NONE,
    }
}

/// Whether an exit of the current task, followed as `follow`, is recorded.
#[inline(always)]
fn is_target(follow: u32) -> bool {
    match follow {
        FOLLOWED => true,
        // A driver's own exit, and exitprof's, are never part of the target.
        DRIVER | EXCLUDED => false,
        _ => TRACE_ALL.load() != 0 || (follows_by_name() && current_comm_is_target()),
    }
}

/// Whether exits are also chosen by task name (`TARGET_COMM` is set).
#[inline(always)]
pub fn follows_by_name() -> bool {
    TARGET_COMM.load()[0] != 0
}

#[inline(always)]
fn current_comm_is_target() -> bool {
    bpf_get_current_comm().is_ok_and(is_target_comm)
}

/// Whether a task name is `TARGET_COMM`.
#[inline(always)]
fn is_target_comm(comm: [u8; COMM_LEN]) -> bool {
    // Both names are NUL-padded to the full length, so equal names are equal arrays; compared
    // as two words, which needs no memcmp (eBPF has none).
    // SAFETY: [u8; 16] and [u64; 2] have the same size, and every bit pattern is valid for both.
    let (a, b) = unsafe {
        (
            core::mem::transmute::<[u8; COMM_LEN], [u64; 2]>(comm),
            core::mem::transmute::<[u8; COMM_LEN], [u64; 2]>(TARGET_COMM.load()),
        )
    };
    a == b
}

/// Records that the current task reached `point`.
#[inline(always)]
pub fn hit_current(point: u8, opens: Opens) {
    let task = current_task();
    let now = now_ns();
    let state = match TASKS.get(task) {
        Some(state) => {
            // SAFETY: the current task's own storage; a task runs on one CPU at a time.
            let state = unsafe { &mut *state };
            if state.phase == PHASE_EXITING {
                extend(state, point, opens, now);
                return;
            }
            if opens == Opens::Never || state.phase == PHASE_DONE || !is_target(state.follow) {
                return;
            }
            state
        }
        None => {
            if opens == Opens::Never {
                return;
            }
            let follow = inherited_follow(task);
            if !is_target(follow) || stopped() {
                return;
            }
            let Some(state) = TASKS.get_or_create(task) else {
                count(counters::STATE_FULL);
                return;
            };
            // SAFETY: created for the current task just now.
            let state = unsafe { &mut *state };
            state.follow = follow;
            state
        }
    };
    if stopped() {
        return;
    }
    open(state, opens != Opens::Start);
    push_hit(&mut state.record, point, now);
}

/// A point of an exit whose record is open.
#[inline(always)]
fn extend(state: &mut TaskState, point: u8, opens: Opens, now: u64) {
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
fn open(state: &mut TaskState, late: bool) {
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
    state.phase = PHASE_EXITING;
    count(counters::EXITS_OPENED);
}

/// The current task runs, so it is back on a CPU: if its record still says it is off-CPU, no
/// `sched_switch` showed its return, and its interval closes now, late.
#[inline(always)]
fn returned_unseen(state: &mut TaskState, now: u64) {
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

/// Notes the kernel's own `group_dead` for the current task's exit, if it is being recorded.
#[inline(always)]
pub fn group_dead_current(group_dead: bool) {
    if let Some(state) = TASKS.get(current_task()) {
        // SAFETY: the current task's own storage.
        let state = unsafe { &mut *state };
        if state.phase == PHASE_EXITING {
            state.record.flags |= FLAG_GROUP_DEAD_EXACT;
            if group_dead {
                state.record.flags |= FLAG_GROUP_DEAD;
            }
        }
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

/// Ends the exit of `task` at its final switch-out: sends its record.
#[inline(always)]
pub fn finish_exit(task: Task, state: &mut TaskState, now: u64) {
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
    state.phase = PHASE_DONE;
    // After the record is in the ring buffer: userspace that sees the count also finds it.
    count(counters::EXITS_ENDED);
}
