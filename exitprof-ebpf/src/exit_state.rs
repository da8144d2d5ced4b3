//! The per-task exit state: created at the first probe point of an exit, extended by every later
//! point, sent to userspace at the final switch-out.

use aya_ebpf::helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id};
use exitprof_common::{
    counters,
    record::{ExitRecord, FLAG_LATE_START, MAX_HITS, wire_len},
    sizes::COMM_LEN,
    tracked,
};

use crate::{
    helpers::{current_ipc_ns, now_ns, read_at},
    maps::{
        EMPTY_RECORD, EXITING, EXITS, ON_CPU_EXIT, TARGET_COMM, TASK_COMM_OFFSET, TRACE_ALL,
        TRACKED, count_loss, wakeup_flag,
    },
    sched::back_on_cpu,
};

/// Whether exits of the current task, of thread group `tgid`, are recorded.
#[inline(always)]
pub fn is_target(tgid: u32) -> bool {
    is_followed(tgid) || (follows_by_name() && bpf_get_current_comm().is_ok_and(is_target_comm))
}

/// Whether exits of `task` (not the current task), of thread group `tgid`, are recorded.
#[inline(always)]
pub fn is_target_task(task: *const u8, tgid: u32) -> bool {
    is_followed(tgid)
        || (follows_by_name()
            && read_at::<[u8; COMM_LEN]>(task, TASK_COMM_OFFSET.load()).is_some_and(is_target_comm))
}

/// Whether thread group `tgid` is followed: every exit, or a tracked process.
#[inline(always)]
pub fn is_followed(tgid: u32) -> bool {
    TRACE_ALL.load() != 0 || TRACKED.get_ptr(tgid).is_some()
}

/// Whether exits are also chosen by task name (`TARGET_COMM` is set).
#[inline(always)]
pub fn follows_by_name() -> bool {
    TARGET_COMM.load()[0] != 0
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

/// Whether task `pid` of thread group `tgid` is the main thread of a storm driver, whose exit
/// is not part of the storm.
#[inline(always)]
fn is_driver(pid: u32, tgid: u32) -> bool {
    pid == tgid
        && TRACKED.get_ptr(tgid).is_some_and(|value| {
            // SAFETY: a map value pointer from a successful lookup.
            unsafe { *value == tracked::DRIVER }
        })
}

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

/// Records that the current task reached `point`.
#[inline(always)]
pub fn hit_current(point: u8, opens: Opens) {
    let is_start = opens == Opens::Start;
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    let now = now_ns();
    if let Some(record) = EXITING.get_ptr_mut(pid) {
        // SAFETY: the entry belongs to the current task, and a task runs on one CPU at a time.
        let record = unsafe { &mut *record };
        if returned_unseen(record, now) {
            set_on_cpu_exit(pid);
        }
        if is_start {
            count_loss(counters::STALE_RECORD);
            restart(record, tgid);
        }
        push_hit(record, point, now);
        return;
    }
    if opens == Opens::Never || !is_target(tgid) || is_driver(pid, tgid) {
        return;
    }
    let Some(record) = open_exit(pid, tgid) else {
        return;
    };
    // SAFETY: as above; the entry was created for the current task just now.
    let record = unsafe { &mut *record };
    if !is_start {
        record.flags |= FLAG_LATE_START;
    }
    push_hit(record, point, now);
}

/// The current task runs, so it is back on this CPU: if its record still says it is off-CPU,
/// no `sched_switch` showed its return, and its interval closes now, late. Whether it did.
#[inline(always)]
fn returned_unseen(record: &mut ExitRecord, now: u64) -> bool {
    if record.off_since_ns == 0 {
        return false;
    }
    count_loss(counters::UNSEEN_RETURN);
    back_on_cpu(record, now);
    true
}

/// Creates the `EXITING` entry of a task.
#[inline(always)]
fn open_exit(pid: u32, tgid: u32) -> Option<*mut ExitRecord> {
    let empty = EMPTY_RECORD.get(0)?;
    if EXITING.insert(pid, empty, 0).is_err() {
        count_loss(counters::STATE_FULL);
        return None;
    }
    let record = EXITING.get_ptr_mut(pid)?;
    // SAFETY: the entry was created for this task just now.
    unsafe {
        (*record).pid = pid;
        (*record).tgid = tgid;
        (*record).block_stack = -1;
        (*record).ipc_ns = current_ipc_ns();
    }
    set_on_cpu_exit(pid);
    Some(record)
}

/// Notes which followed exit runs on this CPU now (0: none).
#[inline(always)]
pub fn set_on_cpu_exit(pid: u32) {
    if let Some(slot) = ON_CPU_EXIT.get_ptr_mut(0) {
        // SAFETY: a per-CPU slot, written only by programs on this CPU.
        unsafe { *slot = pid };
    }
}

/// Starts a record over for a new exit.
#[inline(always)]
fn restart(record: &mut ExitRecord, tgid: u32) {
    record.tgid = tgid;
    record.n_hits = 0;
    record.lost_hits = 0;
    record.flags = 0;
    record.off_cpu_ns = 0;
    record.runq_ns = 0;
    record.longest_block_ns = 0;
    record.block_stack = -1;
    record.off_since_ns = 0;
    record.ipc_ns = current_ipc_ns();
    set_on_cpu_exit(record.pid);
}

/// Appends one hit, or counts it as lost when the record is full.
#[inline(always)]
pub fn push_hit(record: &mut ExitRecord, point: u8, now: u64) {
    let i = record.n_hits as usize;
    if i >= MAX_HITS {
        record.lost_hits += 1;
        return;
    }
    record.points[i] = point;
    record.hits[i].ts_ns = now;
    record.hits[i].off_cpu_ns = record.off_cpu_ns;
    record.hits[i].runq_ns = record.runq_ns;
    record.n_hits += 1;
}

/// Ends the exit of task `pid` at its final switch-out: sends its record and forgets it.
#[inline(always)]
pub fn finish_exit(pid: u32, record: *mut ExitRecord, point: u8, now: u64) {
    // SAFETY: `record` is `pid`'s entry, and `pid` is the task being switched out on this CPU.
    let rec = unsafe { &mut *record };
    returned_unseen(rec, now);
    push_hit(rec, point, now);
    // SAFETY: no side effects.
    rec.cpu = unsafe { bpf_get_smp_processor_id() };
    let n = rec.n_hits as usize;
    let len = wire_len(if n > MAX_HITS { MAX_HITS } else { n });
    // SAFETY: `len` never exceeds the size of the record it is read from.
    let bytes = unsafe { core::slice::from_raw_parts(record.cast::<u8>(), len) };
    if EXITS.output::<[u8]>(bytes, wakeup_flag(&EXITS)).is_err() {
        count_loss(counters::RINGBUF_FULL);
    }
    let _ = EXITING.remove(pid);
}
