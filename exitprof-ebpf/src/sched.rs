//! Scheduler probes: the end of an exit, off-CPU time inside it, and where it blocked.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_smp_processor_id, generated::bpf_get_stack},
    macros::btf_tracepoint,
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};
use exitprof_common::{
    counters,
    stack::{STACK_BLOCKED, STACK_DEPTH, stack_wire_len},
};

use crate::{
    exit_state::{
        ExitState, OFF_RUNNABLE, early_exits, exit_slot, exit_state, finish_exit, leave_early,
        unrecorded_exit_ends,
    },
    free_watch::current_address,
    helpers::{is_exiting, now_ns},
    maps::{BLOCK_WALKS_PER_SEC, STACKS, STACKS_WAKEUP_BYTES, count, wakeup_flag},
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
/// two tasks' flags and one shared word: a task that is not exiting (`PF_EXITING`, set by
/// `exit_signals` early in `do_exit`) costs no map access at all while no exit is in its first
/// instants, before `exit_signals` (see `EARLY_EXITS`).
#[btf_tracepoint]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev: Task = ctx.arg(1);
    let next: Task = ctx.arg(2);
    if !is_exiting(prev) && !is_exiting(next) && !early_exits() {
        return 0;
    }
    let now = now_ns();
    let preempt: u64 = ctx.arg(0);
    #[cfg(not(feature = "compat"))]
    let prev_state: u32 = ctx.arg(3);
    #[cfg(feature = "compat")]
    let prev_state = crate::helpers::task_state(prev);
    switch_out(&ctx, prev, preempt != 0, prev_state, now);
    switch_in(next, now);
    0
}

/// An empty program on `sched_switch`, attached alone by `exitprof __floor`: what any program
/// there costs each context switch of the machine (the tracepoint's dispatch and a program's
/// call), the floor the benchmark shows beside [`sched_switch`]'s own cost.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_floor(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// The task `prev` (the current task) leaves its CPU; if it is exiting: for good in `TASK_DEAD`,
/// else for a while. A block's kernel stack is taken now, while the task is current: walked
/// later, from another task, the kernel's unwinder would leave out the lock and wait functions
/// (`__sched` code), which say where it waits.
#[inline(always)]
fn switch_out(ctx: &BtfTracePointContext, prev: Task, preempt: bool, prev_state: u32, now: u64) {
    let dead = prev_state & TASK_DEAD != 0;
    let slot = exit_slot(prev);
    let Some((slot, state)) = slot.and_then(|slot| Some((slot, slot.state()?))) else {
        // An exit not recorded (refused, or not followed) ends too.
        if dead {
            unrecorded_exit_ends(prev, current_address());
        }
        return;
    };
    if dead {
        finish_exit(prev, slot, state, now);
        return;
    }
    if is_exiting(prev) {
        leave_early(state);
    }
    state.off_since_ns = now;
    state.block.stack_len = 0;
    // Preempted (even after setting a sleeping state, as the kernel's `preempt` says), it waits
    // for a CPU, not for an event: no stack to take.
    if preempt || prev_state == TASK_RUNNING {
        state.flags |= OFF_RUNNABLE;
        return;
    }
    state.record.blocks += 1;
    if !take_walk(now) {
        count(counters::STACKS_SKIPPED);
        return;
    }
    let block = &mut state.block;
    // SAFETY: the buffer is the block record's own array, of the size given.
    let bytes = unsafe {
        bpf_get_stack(ctx.as_ptr(), block.stack.as_mut_ptr().cast(), (STACK_DEPTH * 8) as u32, 0)
    };
    if bytes <= 0 {
        return;
    }
    block.kind = STACK_BLOCKED;
    block.pid = state.record.pid;
    block.exit_start_ns = state.record.hits[0].ts_ns;
    block.ts_ns = now;
    block.n_hits = state.record.n_hits;
    // SAFETY: no side effects.
    block.cpu = unsafe { bpf_get_smp_processor_id() };
    block.stack_len = (bytes / 8) as u32;
    count(counters::STACKS_WALKED);
}

/// The task `next` comes back to a CPU.
#[inline(always)]
fn switch_in(next: Task, now: u64) {
    let Some(state) = exit_state(next) else { return };
    if is_exiting(next) {
        leave_early(state);
    }
    if state.off_since_ns != 0 {
        back_on_cpu(state, now);
    }
}

/// Closes the off-CPU interval of a followed exit that is back on a CPU at `now`. A block whose
/// stack was taken goes to userspace with its length: every block of an exit is accounted to
/// where it waited, not only its longest.
#[inline(always)]
pub fn back_on_cpu(state: &mut ExitState, now: u64) {
    // The interval may have opened on another CPU, whose clock can read a little ahead of this
    // one's (bpf_ktime_get_ns is the NMI-safe fast clock): behind, it is an instant, not 2^64 ns.
    let off = now.saturating_sub(state.off_since_ns);
    state.off_cpu_ns += off;
    state.off_since_ns = 0;
    if state.flags & OFF_RUNNABLE != 0 {
        state.runq_ns += off;
        state.flags &= !OFF_RUNNABLE;
        return;
    }
    let frames = state.block.stack_len as usize;
    if frames == 0 {
        return;
    }
    state.block.ns = off;
    let len = stack_wire_len(if frames > STACK_DEPTH { STACK_DEPTH } else { frames });
    // SAFETY: `len` never exceeds the size of the record it is read from.
    let bytes = unsafe { core::slice::from_raw_parts((&raw const state.block).cast::<u8>(), len) };
    if STACKS.output::<[u8]>(bytes, wakeup_flag(&STACKS, &STACKS_WAKEUP_BYTES)).is_err() {
        count(counters::BLOCK_STACKS_LOST);
    }
    state.block.stack_len = 0;
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
    let elapsed = now.saturating_sub(budget.refilled_ns).min(1_000_000_000);
    let refill = elapsed * rate / 1_000_000;
    budget.milli_walks = (budget.milli_walks + refill).min(WALK_BURST * 1000);
    budget.refilled_ns = now;
    if budget.milli_walks < 1000 {
        return false;
    }
    budget.milli_walks -= 1000;
    true
}
