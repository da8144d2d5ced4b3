//! Scheduler probes: the end of an exit, off-CPU time inside it, and which processes to follow.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::btf_tracepoint,
    programs::{BtfTracePointContext, tracing::StackIdContext as _},
};
use exitprof_common::{
    counters,
    point::{Marker, marker_code},
    record::{ExitRecord, FLAG_OFF_RUNNABLE},
    tracked,
};

use crate::{
    exit_state::finish_exit,
    helpers::{now_ns, read_at},
    maps::{
        BLOCK_STACKS, BLOCK_STACKS_ON, EXITING, OFF_CPU_EXITS, ON_CPU_EXIT, TASK_PID_OFFSET,
        TRACKED, count_loss,
    },
};

/// `TASK_DEAD` in `task_struct::__state` (include/linux/sched.h, unchanged since v4.14).
const TASK_DEAD: u32 = 0x80;
/// `TASK_RUNNING`: switched out while runnable, i.e. preempted.
const TASK_RUNNING: u32 = 0;
/// `BPF_F_REUSE_STACKID`: a new stack whose hash collides replaces the old one (stacks are only
/// read at the end of a run; a lost old one costs a name, not a count).
const BPF_F_REUSE_STACKID: u64 = 1 << 10;
/// `CLONE_THREAD` (include/uapi/linux/sched.h).
const CLONE_THREAD: u64 = 0x0001_0000;

/// `task->pid`.
#[inline(always)]
fn task_pid(task: *const u8) -> Option<u32> {
    read_at(task, TASK_PID_OFFSET.load())
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)` (the `prev_state` argument exists since v5.18).
///
/// `prev` is the current task. An exiting task leaving in `TASK_DEAD` ends its exit; any other
/// switch-out of an exiting task starts an off-CPU interval, which its next switch-in closes.
///
/// This runs on every context switch of the machine, so it looks at its maps only when this
/// CPU runs a followed exit, a task leaves for good (a followed exit may have come back to
/// this CPU unseen), or some followed exit is switched out and may come back now.
#[btf_tracepoint]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let Some(on_cpu) = ON_CPU_EXIT.get_ptr_mut(0) else { return 0 };
    // SAFETY: a per-CPU slot, touched only by programs on this CPU.
    let on_cpu = unsafe { &mut *on_cpu };
    let prev_state: u32 = ctx.arg(3);
    let dead = prev_state & TASK_DEAD != 0;
    let mut now = 0;
    if *on_cpu != 0 || dead {
        let prev_pid = bpf_get_current_pid_tgid() as u32;
        // The slot names the task running here, which leaves now; any other name is stale.
        let followed = *on_cpu == prev_pid;
        *on_cpu = 0;
        if (followed || dead)
            && let Some(record) = EXITING.get_ptr_mut(prev_pid)
        {
            now = now_ns();
            switch_out(&ctx, prev_pid, record, prev_state, now);
        }
    }
    if off_cpu_exits() > 0 {
        let next: *const u8 = ctx.arg(2);
        if let Some(next_pid) = task_pid(next)
            && let Some(record) = EXITING.get_ptr_mut(next_pid)
        {
            // SAFETY: the entry belongs to the task being switched in on this CPU.
            let record = unsafe { &mut *record };
            if record.off_since_ns != 0 {
                if now == 0 {
                    now = now_ns();
                }
                back_on_cpu(record, now);
            }
            *on_cpu = next_pid;
        }
    }
    0
}

/// The followed, exiting task `pid`, whose entry is `record`, leaves this CPU: for good in
/// `TASK_DEAD`, else for a while.
#[inline(always)]
fn switch_out(
    ctx: &BtfTracePointContext,
    pid: u32,
    record: *mut ExitRecord,
    prev_state: u32,
    now: u64,
) {
    if prev_state & TASK_DEAD != 0 {
        finish_exit(pid, record, marker_code(Marker::FinalSwitch), now);
    } else {
        // SAFETY: the entry belongs to the task being switched out on this CPU.
        let record = unsafe { &mut *record };
        record.off_since_ns = now;
        // Still runnable (TASK_RUNNING, 0): preempted, it waits for a CPU, not for an event.
        // Otherwise it blocks: where, the kernel stack says (unless stacks are off: -1).
        if prev_state == TASK_RUNNING {
            record.flags |= FLAG_OFF_RUNNABLE;
        } else {
            record.pending_stack = if BLOCK_STACKS_ON.load() != 0 {
                ctx.get_stackid(&BLOCK_STACKS, BPF_F_REUSE_STACKID).map_or(-1, |id| id as i32)
            } else {
                -1
            };
        }
        add_off_cpu_exits(1);
    }
}

/// Closes the off-CPU interval of a followed exit that is back on a CPU at `now`.
#[inline(always)]
pub fn back_on_cpu(record: &mut ExitRecord, now: u64) {
    let off = now - record.off_since_ns;
    record.off_cpu_ns += off;
    if record.flags & FLAG_OFF_RUNNABLE != 0 {
        record.runq_ns += off;
        record.flags &= !FLAG_OFF_RUNNABLE;
    } else if off > record.longest_block_ns {
        record.longest_block_ns = off;
        record.block_stack = record.pending_stack;
    }
    record.off_since_ns = 0;
    add_off_cpu_exits(-1);
}

#[inline(always)]
fn off_cpu_exits() -> i64 {
    // SAFETY: an aligned i64 in a map value, read whole.
    OFF_CPU_EXITS.get_ptr(0).map_or(0, |n| unsafe { core::ptr::read_volatile(n) })
}

#[inline(always)]
fn add_off_cpu_exits(delta: i64) {
    if let Some(n) = OFF_CPU_EXITS.get_ptr_mut(0) {
        // SAFETY: an aligned i64 in a map value, shared by all CPUs: updated atomically (the
        // BPF target has no stable atomic read-modify-write, the intrinsic is its `lock add`).
        unsafe { atomic_xadd::<i64, i64, { AtomicOrdering::Relaxed }>(n, delta) };
    }
}

/// `task_newtask(struct task_struct *task, u64 clone_flags)`, in the parent's context: a new
/// process forked by a tracked one is tracked too (new threads share their tracked tgid); any
/// other new process is not, whatever process had its pid before.
#[btf_tracepoint]
pub fn task_newtask(ctx: BtfTracePointContext) -> i32 {
    let clone_flags: u64 = ctx.arg(1);
    if clone_flags & CLONE_THREAD != 0 {
        return 0;
    }
    // A new process's tgid is its pid.
    let Some(child) = task_pid(ctx.arg(0)) else { return 0 };
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if TRACKED.get_ptr(parent_tgid).is_none() {
        // Pids are reused: an entry for this one belongs to a followed process that has ended.
        if TRACKED.get_ptr(child).is_some() {
            let _ = TRACKED.remove(child);
        }
        return 0;
    }
    if TRACKED.insert(child, tracked::FOLLOWED, 0).is_err() {
        count_loss(counters::TRACKED_FULL);
    }
    0
}
