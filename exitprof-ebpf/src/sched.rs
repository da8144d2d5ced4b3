//! Scheduler probes: the end of an exit, off-CPU time inside it, and where it blocked.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_smp_processor_id, generated::bpf_get_stack},
    macros::{btf_tracepoint, map},
    maps::{Array, PerCpuArray},
    programs::BtfTracePointContext,
};
use exitprof_common::{
    counters,
    stack::{STACK_BLOCKED, STACK_DEPTH, StackRecord, stack_wire_len},
};

use crate::{
    exit_state::{exit_slot, exit_state, finish_exit, leave_early, unrecorded_exit_ends},
    free_watch::current_address,
    helpers::{is_exiting, now_ns},
    maps::{BLOCK_WALKS_PER_SEC, STACKS, STACKS_WAKEUP_BYTES, add, count, wakeup_flag},
    task_storage::Task,
    teardown,
};

/// `TASK_DEAD` in `task_struct::__state` (include/linux/sched.h, unchanged since v4.14).
const TASK_DEAD: u32 = 0x80;
/// `TASK_RUNNING`: switched out while runnable.
const TASK_RUNNING: u32 = 0;

/// What makes `sched_switch` look at tasks that are not exiting: exits opened before their task
/// set `PF_EXITING` (see `crate::exit_state::EARLY`), and namespace teardowns running in their
/// kworkers (`crate::teardown`). One value, so that a switch with neither reads one line.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SwitchWatch {
    early_exits: u64,
    teardown_runs: u64,
}

#[map]
static SWITCH_WATCH: Array<SwitchWatch> = Array::with_max_entries(1, 0);

/// The watch, if the map gives it.
#[inline(always)]
fn switch_watch() -> Option<*mut SwitchWatch> {
    SWITCH_WATCH.get_ptr_mut(0)
}

/// Whether `sched_switch` must look at every task it switches.
#[inline(always)]
fn watching_every_switch() -> bool {
    switch_watch().is_some_and(|watch| {
        // SAFETY: an array slot; aligned 8-byte loads are atomic.
        unsafe {
            core::ptr::read_volatile(&raw const (*watch).early_exits)
                | core::ptr::read_volatile(&raw const (*watch).teardown_runs)
                != 0
        }
    })
}

/// Whether any namespace teardown is running in a kworker.
#[inline(always)]
pub fn teardown_runs() -> bool {
    switch_watch().is_some_and(|watch| {
        // SAFETY: as in `watching_every_switch`.
        unsafe { core::ptr::read_volatile(&raw const (*watch).teardown_runs) != 0 }
    })
}

/// Adds `n` (wrapping: `u64::MAX` takes one away) to the exits opened before `PF_EXITING`.
#[inline(always)]
pub fn add_early_exits(n: u64) {
    if let Some(watch) = switch_watch() {
        // SAFETY: an array slot, changed only atomically.
        unsafe { add(&raw mut (*watch).early_exits, n) };
    }
}

/// Adds `n` (wrapping, as `add_early_exits`) to the teardown runs in progress.
#[inline(always)]
pub fn add_teardown_runs(n: u64) {
    if let Some(watch) = switch_watch() {
        // SAFETY: an array slot, changed only atomically.
        unsafe { add(&raw mut (*watch).teardown_runs, n) };
    }
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)` (the `prev_state` argument exists since v5.18).
///
/// `prev` is the current task. An exiting task leaving in `TASK_DEAD` ends its exit; any other
/// switch-out of an exiting task starts an off-CPU interval, which its next switch-in closes.
/// The kworker of a namespace teardown in progress is timed alike.
///
/// This runs on every context switch of the machine, so before anything else it reads only the
/// two tasks' flags and one shared line: a task that is not exiting (`PF_EXITING`, set by
/// `exit_signals` early in `do_exit`) costs no map access at all while no exit is in its first
/// instants, before `exit_signals`, and no teardown runs (see [`SwitchWatch`]).
#[btf_tracepoint]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev: Task = ctx.arg(1);
    let next: Task = ctx.arg(2);
    if !is_exiting(prev) && !is_exiting(next) && !watching_every_switch() {
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
    if teardown_runs() {
        teardown::switched(&ctx, prev, next, preempt != 0, prev_state, now);
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

/// The time off a CPU of a task exitprof times (an exiting task, a teardown's kworker): when it
/// last switched out, what it has spent off a CPU so far, and where it blocks.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OffCpu {
    /// When the task last switched out (0 while it is on a CPU).
    pub since_ns: u64,
    /// Off-CPU time so far, and the part of it spent runnable.
    pub total_ns: u64,
    pub runq_ns: u64,
    /// Non-zero while the task is switched out runnable (preempted): it waits for a CPU, not
    /// for an event.
    pub runnable: u32,
    /// Padding, zero.
    pub pad: u32,
    /// The kernel stack where the task blocked last, taken as it switched out (`stack_len` 0:
    /// none was taken); sent with the block's length when the task is back on a CPU.
    pub block: StackRecord,
}

/// Who a block's stack belongs to, as its record names it.
#[derive(Clone, Copy)]
pub struct StackOwner {
    /// `STACK_BLOCKED` or `STACK_TEARDOWN_BLOCKED`.
    pub kind: u32,
    pub pid: u32,
    /// The exit's, or the teardown run's, start.
    pub start_ns: u64,
    /// Hits the exit's record holds (0 for a teardown).
    pub n_hits: u32,
}

impl OffCpu {
    /// Nothing spent off a CPU yet.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.since_ns = 0;
        self.total_ns = 0;
        self.runq_ns = 0;
        self.runnable = 0;
        self.block.stack_len = 0;
    }

    /// The task (the current one) leaves its CPU at `now`, not for good. A block's kernel stack
    /// is taken now, while the task is current: walked later, from another task, the kernel's
    /// unwinder would leave out the lock and wait functions (`__sched` code), which say where
    /// it waits. Returns whether it blocked (switched out asleep).
    #[inline(always)]
    pub fn leave(
        &mut self,
        ctx: &BtfTracePointContext,
        preempt: bool,
        prev_state: u32,
        now: u64,
        owner: StackOwner,
    ) -> bool {
        self.since_ns = now;
        self.block.stack_len = 0;
        // Preempted (even after setting a sleeping state, as the kernel's `preempt` says), it
        // waits for a CPU, not for an event: no stack to take.
        if preempt || prev_state == TASK_RUNNING {
            self.runnable = 1;
            return false;
        }
        if !take_walk(now) {
            count(counters::STACKS_SKIPPED);
            return true;
        }
        let block = &mut self.block;
        // SAFETY: the buffer is the block record's own array, of the size given.
        let bytes = unsafe {
            bpf_get_stack(
                ctx.as_ptr(),
                block.stack.as_mut_ptr().cast(),
                (STACK_DEPTH * 8) as u32,
                0,
            )
        };
        if bytes <= 0 {
            return true;
        }
        block.kind = owner.kind;
        block.pid = owner.pid;
        block.exit_start_ns = owner.start_ns;
        block.ts_ns = now;
        block.n_hits = owner.n_hits;
        // SAFETY: no side effects.
        block.cpu = unsafe { bpf_get_smp_processor_id() };
        block.stack_len = (bytes / 8) as u32;
        count(counters::STACKS_WALKED);
        true
    }

    /// Closes the off-CPU interval of a task back on a CPU at `now`, if one is open. A block
    /// whose stack was taken goes to userspace with its length: every block is accounted to
    /// where it waited, not only the longest.
    #[inline(always)]
    pub fn back(&mut self, now: u64) {
        if self.since_ns == 0 {
            return;
        }
        // The interval may have opened on another CPU, whose clock can read a little ahead of
        // this one's (bpf_ktime_get_ns is the NMI-safe fast clock): behind, it is an instant,
        // not 2^64 ns.
        let off = now.saturating_sub(self.since_ns);
        self.total_ns += off;
        self.since_ns = 0;
        if self.runnable != 0 {
            self.runq_ns += off;
            self.runnable = 0;
            return;
        }
        let frames = self.block.stack_len as usize;
        if frames == 0 {
            return;
        }
        self.block.ns = off;
        let len = stack_wire_len(if frames > STACK_DEPTH { STACK_DEPTH } else { frames });
        // SAFETY: `len` never exceeds the size of the record it is read from.
        let bytes =
            unsafe { core::slice::from_raw_parts((&raw const self.block).cast::<u8>(), len) };
        if STACKS.output::<[u8]>(bytes, wakeup_flag(&STACKS, &STACKS_WAKEUP_BYTES)).is_err() {
            count(counters::BLOCK_STACKS_LOST);
        }
        self.block.stack_len = 0;
    }
}

/// The task `prev` (the current task) leaves its CPU; if it is exiting: for good in `TASK_DEAD`,
/// else for a while.
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
    let owner = StackOwner {
        kind: STACK_BLOCKED,
        pid: state.record.pid,
        start_ns: state.record.hits[0].ts_ns,
        n_hits: state.record.n_hits,
    };
    if state.off.leave(ctx, preempt, prev_state, now, owner) {
        state.record.blocks += 1;
    }
}

/// The task `next` comes back to a CPU.
#[inline(always)]
fn switch_in(next: Task, now: u64) {
    let Some(state) = exit_state(next) else { return };
    if is_exiting(next) {
        leave_early(state);
    }
    state.off.back(now);
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
