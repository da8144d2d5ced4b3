//! Scheduler probes: the end of an exit, off-CPU time inside it, and where it blocked.

use aya_ebpf::{
    EbpfContext as _, helpers::generated::bpf_get_stack, macros::btf_tracepoint, maps::PerCpuArray,
    programs::BtfTracePointContext,
};
use exitprof_common::{
    counters,
    record::{BLOCK_STACK_DEPTH, FLAG_OFF_RUNNABLE},
};

use crate::{
    exit_state::{ExitState, exit_slot, exit_state, finish_exit},
    helpers::{is_exiting, now_ns},
    maps::{BLOCK_WALKS_PER_SEC, count},
    task_storage::Task,
};

/// `TASK_DEAD` in `task_struct::__state` (include/linux/sched.h, unchanged since v4.14).
const TASK_DEAD: u32 = 0x80;
/// `TASK_RUNNING`: switched out while runnable.
const TASK_RUNNING: u32 = 0;

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)` (the `prev_state` argument exists since v5.18).
///
/// `prev` is the current task. An exiting task leaving in `TASK_DEAD` ends its exit; any other
/// switch-out of an exiting task starts an off-CPU interval, which its next switch-in closes.
///
/// This runs on every context switch of the machine, so before anything else it reads only the
/// two tasks' flags: a task that is not exiting (`PF_EXITING`, set by `exit_signals` at the start
/// of `do_exit`) costs no map access at all.
#[btf_tracepoint]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev: Task = ctx.arg(1);
    let next: Task = ctx.arg(2);
    let prev_exiting = is_exiting(prev);
    let next_exiting = is_exiting(next);
    if !prev_exiting && !next_exiting {
        return 0;
    }
    let now = now_ns();
    if prev_exiting {
        let preempt: u64 = ctx.arg(0);
        let prev_state: u32 = ctx.arg(3);
        switch_out(&ctx, prev, preempt != 0, prev_state, now);
    }
    if next_exiting {
        switch_in(next, now);
    }
    0
}

/// An empty program on `sched_switch`, attached alone by `exitprof __floor`: what any program
/// there costs each context switch of the machine (the tracepoint's dispatch and a program's
/// call), the floor the benchmark shows beside [`sched_switch`]'s own cost.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_floor(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// The exiting task `prev` (the current task) leaves its CPU: for good in `TASK_DEAD`, else for
/// a while. A block's kernel stack is taken now, while the task is current: walked later, from
/// another task, the kernel's unwinder would leave out the lock and wait functions (`__sched`
/// code), which say where it waits.
#[inline(always)]
fn switch_out(ctx: &BtfTracePointContext, prev: Task, preempt: bool, prev_state: u32, now: u64) {
    let Some(slot) = exit_slot(prev) else { return };
    let Some(state) = slot.state() else { return };
    if prev_state & TASK_DEAD != 0 {
        finish_exit(prev, slot, state, now);
        return;
    }
    state.record.off_since_ns = now;
    state.pending_stack_len = 0;
    // Preempted (even after setting a sleeping state, as the kernel's `preempt` says), it waits
    // for a CPU, not for an event: no stack to take.
    if preempt || prev_state == TASK_RUNNING {
        state.record.flags |= FLAG_OFF_RUNNABLE;
        return;
    }
    if !take_walk(now) {
        count(counters::STACKS_SKIPPED);
        return;
    }
    // SAFETY: the buffer is the task state's own array, of the size given.
    let bytes = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            state.pending_stack.as_mut_ptr().cast(),
            (BLOCK_STACK_DEPTH * 8) as u32,
            0,
        )
    };
    if bytes > 0 {
        state.pending_stack_len = (bytes / 8) as u32;
        count(counters::STACKS_WALKED);
    }
}

/// The exiting task `next` comes back to a CPU.
#[inline(always)]
fn switch_in(next: Task, now: u64) {
    let Some(state) = exit_state(next) else { return };
    if state.record.off_since_ns != 0 {
        back_on_cpu(state, now);
    }
}

/// Closes the off-CPU interval of a followed exit that is back on a CPU at `now`. A block that
/// is the exit's longest so far keeps the stack taken when it began.
#[inline(always)]
pub fn back_on_cpu(state: &mut ExitState, now: u64) {
    let record = &mut state.record;
    let off = now - record.off_since_ns;
    record.off_cpu_ns += off;
    record.off_since_ns = 0;
    if record.flags & FLAG_OFF_RUNNABLE != 0 {
        record.runq_ns += off;
        record.flags &= !FLAG_OFF_RUNNABLE;
        return;
    }
    if off <= record.longest_block_ns {
        return;
    }
    record.longest_block_ns = off;
    let frames = state.pending_stack_len as usize;
    if frames == 0 {
        return;
    }
    record.block_stack = state.pending_stack;
    record.block_stack_len = frames.min(BLOCK_STACK_DEPTH) as u32;
    record.block_stack_ns = off;
    record.block_stack_hit = record.n_hits;
}

/// Walks a CPU may still make before its budget refills, in thousandths, and when it was last
/// topped up.
#[derive(Clone, Copy)]
struct WalkBudget {
    milli_walks: u64,
    refilled_ns: u64,
}

/// Per CPU: the budget of kernel stack walks ([`BLOCK_WALKS_PER_SEC`]).
#[aya_ebpf::macros::map]
static WALK_BUDGET: PerCpuArray<WalkBudget> = PerCpuArray::with_max_entries(1, 0);

/// Walks one CPU may save up: a burst of blocks after a quiet spell all get their stacks.
const WALK_BURST: u64 = 16;

/// Whether this CPU may walk a stack now (and spends one walk of its budget if so).
#[inline(always)]
fn take_walk(now: u64) -> bool {
    let rate = u64::from(BLOCK_WALKS_PER_SEC.load());
    if rate == 0 {
        return false;
    }
    let Some(budget) = WALK_BUDGET.get_ptr_mut(0) else { return false };
    // SAFETY: a per-CPU slot, touched only by programs on this CPU.
    let budget = unsafe { &mut *budget };
    // Capped first, so that the product cannot overflow after a long quiet spell.
    let elapsed = (now - budget.refilled_ns).min(1_000_000_000);
    let refill = elapsed * rate / 1_000_000;
    budget.milli_walks = (budget.milli_walks + refill).min(WALK_BURST * 1000);
    budget.refilled_ns = now;
    if budget.milli_walks < 1000 {
        return false;
    }
    budget.milli_walks -= 1000;
    true
}
