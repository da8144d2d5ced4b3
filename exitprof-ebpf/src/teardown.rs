//! Namespace teardowns that exits set off, timed where they run: a network namespace's in
//! `cleanup_net`, a user namespace's in `free_user_ns`, each in a kworker.
//!
//! - `__put_net` puts a network namespace whose last reference went on `cleanup_list` and
//!   queues `net_cleanup_work` on the ordered `netns` workqueue (v5.10 to v7.3). One run of its
//!   function, `cleanup_net`, takes the whole list at its start (`llist_del_all`) and tears down
//!   every namespace on it, which stay in `net_namespace_list`, without a reference left, until
//!   that run unlinks them. So the run's start walks `net_namespace_list` for the namespaces
//!   whose count is zero: those are the ones it tears down. (The list's head and `cleanup_list`
//!   are data symbols, which kallsyms lacks without `CONFIG_KALLSYMS_ALL`; the list is reached
//!   through the kworker's own namespace, `init_net`, its first entry since boot.)
//! - `__put_user_ns` schedules the namespace's own work item (`user_namespace.work`), whose
//!   function, `free_user_ns`, frees it, and its parents where it held their last reference.
//!
//! A run is timed from its function's entry to its return (kprobe or fentry), or from
//! `workqueue_execute_start` to `workqueue_execute_end` of its work item; its kworker's time off
//! a CPU and the stacks it blocks in come from `sched_switch`, where it computes from the
//! sampling clock.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::{HashMap, PerCpuArray},
    programs::{BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use exitprof_common::{
    counters,
    deferred::{
        DEFERRED_BATCH_MEMBER, DEFERRED_WALK_TRUNCATED, DeferredKind, DeferredRecord,
        WORK_TIMED_CLEANUP_NET, WORK_TIMED_FREE_USER_NS,
    },
    stack::{STACK_TEARDOWN_BLOCKED, STACK_TEARDOWN_ON_CPU},
};

use crate::{
    deferred::emit_record,
    helpers::{self, Walk, current_pid, namespaces, now_ns, read_at, task_pid_tgid},
    maps::{
        CLEANUP_NET_ADDR, FREE_USER_NS_ADDR, NET_EXIT_LIST_OFFSET, NET_INUM_OFFSET,
        NET_LIST_OFFSET, NET_REFS_OFFSET, USER_NS_INUM_OFFSET, USER_NS_WORK_OFFSET, count,
        work_timed,
    },
    sampler::{Sampled, send_sample},
    sched::{OffCpu, StackOwner, add_teardown_runs, teardown_runs},
    task_storage::{Task, current_task},
};

/// Network namespaces a `cleanup_net` run looks through for those it tears down: every
/// namespace of the machine is one step (two reads), so a node with thousands of containers is
/// looked through whole, in some tens of microseconds a run.
#[cfg(not(feature = "compat"))]
const NETS_WALKED: u32 = 1 << 16;

/// Without `bpf_loop` (before 5.17) the walk is a bounded loop, which the verifier follows step
/// by step: fewer of them.
#[cfg(feature = "compat")]
const NETS_WALKED: u32 = 256;

/// A teardown in progress in a kworker.
#[repr(C)]
#[derive(Clone, Copy)]
struct Run {
    /// `DeferredKind::NetTeardownRun` or `DeferredKind::UserNsTeardown`.
    kind: u32,
    /// The namespaces it tears down (a `cleanup_net` run).
    count: u32,
    start_ns: u64,
    /// The namespace it frees, and its inode number (a `free_user_ns` run).
    object: u64,
    inum: u32,
    /// `DEFERRED_*` bits.
    flags: u32,
    /// A network namespace the run's start found (0: none), and whether the run's own list of
    /// them was walked yet (see `walk_batch`).
    first_net: u64,
    batch_walked: u32,
    /// Padding, zero.
    pad: u32,
    off: OffCpu,
}

/// Teardowns in progress, by their kworker's pid (a kworker runs one work item at a time).
#[map]
static TEARDOWN_RUNS: HashMap<u32, Run> = HashMap::with_max_entries(64, 0);

/// Per CPU: where a run is put together before it goes into `TEARDOWN_RUNS` (it is larger than
/// a program's stack should hold).
#[map]
static RUN_SCRATCH: PerCpuArray<Run> = PerCpuArray::with_max_entries(1, 0);

/// A teardown's work function starts in the current kworker: `kind`, freeing `object`.
#[inline(always)]
fn open_run(kind: DeferredKind, object: u64, inum: u32) {
    let Some(run) = RUN_SCRATCH.get_ptr_mut(0) else { return };
    // SAFETY: a per-CPU slot, used only within this program's run.
    let run = unsafe { &mut *run };
    run.kind = kind as u32;
    run.start_ns = now_ns();
    run.object = object;
    run.inum = inum;
    run.count = 0;
    run.flags = 0;
    run.off.reset();
    run.first_net = 0;
    run.batch_walked = 0;
    if kind == DeferredKind::NetTeardownRun {
        let (count, first_net, truncated) = walk_dying_nets(run.start_ns);
        run.count = count;
        run.first_net = first_net;
        if truncated {
            run.flags |= DEFERRED_WALK_TRUNCATED;
        }
    }
    let pid = current_pid();
    // SAFETY: the value is only looked at.
    let replaced = unsafe { TEARDOWN_RUNS.get(pid) }.is_some();
    if TEARDOWN_RUNS.insert(pid, run, 0).is_err() {
        count(counters::DEFERRED_STATE_FULL);
        return;
    }
    // A run whose end was never seen (exitprof attached in its middle) is replaced, counted once.
    if !replaced {
        add_teardown_runs(1);
    }
}

/// The current kworker's teardown, if it runs one, ends: sent with its time off a CPU.
#[inline(always)]
fn close_run() {
    let pid = current_pid();
    let Some(run) = TEARDOWN_RUNS.get_ptr_mut(pid) else { return };
    // SAFETY: the entry belongs to the current task, which runs this program.
    let run = unsafe { &mut *run };
    let now = now_ns();
    // Running, so back on a CPU, whether or not its return was seen.
    run.off.back(now);
    emit_record(DeferredRecord {
        kind: run.kind,
        pid,
        start_ns: run.start_ns,
        end_ns: now,
        object: run.object,
        wait_ns: run.off.total_ns,
        runq_ns: run.off.runq_ns,
        inum: run.inum,
        count: run.count,
        flags: run.flags,
        pad: 0,
    });
    if TEARDOWN_RUNS.remove(pid).is_ok() {
        add_teardown_runs(u64::MAX);
    }
}

/// A work item starts in the current kworker (`workqueue_execute_start`): a teardown if its
/// function is one. Returns whether it was.
#[inline(always)]
pub fn work_started(work: *const u8, func: u64) -> bool {
    if func == CLEANUP_NET_ADDR.load() && work_timed(WORK_TIMED_CLEANUP_NET) {
        open_run(DeferredKind::NetTeardownRun, 0, 0);
        return true;
    }
    if func == FREE_USER_NS_ADDR.load() && work_timed(WORK_TIMED_FREE_USER_NS) {
        user_ns_run(work);
        return true;
    }
    false
}

/// A work item of the current kworker ends (`workqueue_execute_end`).
#[inline(always)]
pub fn work_ended() {
    if teardown_runs() {
        close_run();
    }
}

/// `free_user_ns(work)` starts: `work` is the namespace's own.
#[inline(always)]
fn user_ns_run(work: *const u8) {
    let ns = (work as u64).wrapping_sub(u64::from(USER_NS_WORK_OFFSET.load()));
    let inum = read_at::<u32>(ns as *const u8, USER_NS_INUM_OFFSET.load()).unwrap_or(0);
    open_run(DeferredKind::UserNsTeardown, ns, inum);
}

/// A walk of a list of network namespaces, for those a `cleanup_net` run tears down.
#[repr(C)]
struct NetWalk {
    /// The entry to look at next.
    node: u64,
    /// Where the list comes back around: in `net_namespace_list`, `init_net.list` (the head,
    /// not a namespace, is the entry before it); in `net_exit_list`, the entry it began at.
    first: u64,
    /// The start of the run, which the records of what it tears down carry.
    run_start_ns: u64,
    /// In `net_exit_list`: what `list_del_rcu` leaves in the `list.prev` of each namespace the
    /// run unlinked (`LIST_POISON2`), which tells them from the list's head on the kworker's
    /// stack. 0 in `net_namespace_list`, where a count of zero tells them.
    poison: u64,
    /// Non-zero once the list's end was reached.
    done: u32,
    /// Padding, zero.
    pad: u32,
}

/// What a walk found: how many namespaces, and the first. Kept in a map, not in the walk: a
/// count the verifier can follow exactly (from zero, one more each step) made each step of the
/// loop a new state to it, and the loop one it could not bound.
#[repr(C)]
#[derive(Clone, Copy)]
struct Found {
    count: u32,
    pad: u32,
    first: u64,
}

/// Per CPU: what the walk in progress on it found (programs do not nest on a CPU).
#[map]
static FOUND: PerCpuArray<Found> = PerCpuArray::with_max_entries(1, 0);

/// Runs `walk` over its list; what it found.
#[inline(always)]
fn walk_counting(walk: &mut NetWalk) -> Found {
    let Some(found) = FOUND.get_ptr_mut(0) else { return Found { count: 0, pad: 0, first: 0 } };
    // SAFETY: a per-CPU slot, used by this program's run alone.
    unsafe { *found = Found { count: 0, pad: 0, first: 0 } };
    helpers::walk(NETS_WALKED, walk);
    // SAFETY: as above.
    unsafe { *found }
}

/// Sends a record of each network namespace the `cleanup_net` run starting at `run_start_ns`
/// tears down, found by their count in `net_namespace_list`; returns how many, the first, and
/// whether the walk stopped at its bound before the list's end.
#[inline(always)]
fn walk_dying_nets(run_start_ns: u64) -> (u32, u64, bool) {
    // A kworker's namespace is `init_net`.
    let first = namespaces(current_task()).net.wrapping_add(u64::from(NET_LIST_OFFSET.load()));
    let Some(node) = read_at::<u64>(first as *const u8, 0) else { return (0, 0, true) };
    let mut walk = NetWalk { node, first, run_start_ns, poison: 0, done: 0, pad: 0 };
    let found = walk_counting(&mut walk);
    (found.count, found.first, walk.done == 0)
}

/// Once the run has taken its namespaces and built its list of them (`net_exit_list`, linked
/// through `net.exit_list`), sends a record of each, found there: those whose last reference went
/// as the run began, between the walk of its start and its `llist_del_all`, are only found so.
/// `first_net` is a namespace the start found. Returns how many, or `None` while the list is
/// not built yet (the kworker blocked on a lock before it).
#[inline(always)]
fn walk_batch(first_net: u64, run_start_ns: u64) -> Option<(u32, bool)> {
    let first = first_net.wrapping_add(u64::from(NET_EXIT_LIST_OFFSET.load()));
    // Zero (a new namespace's) until the run links it.
    if read_at::<u64>(first as *const u8, 0).is_none_or(|next| next == 0) {
        return None;
    }
    let unlinked = first_net.wrapping_add(u64::from(NET_LIST_OFFSET.load()) + 8);
    let poison = read_at::<u64>(unlinked as *const u8, 0)?;
    let mut walk = NetWalk { node: first, first, run_start_ns, poison, done: 0, pad: 0 };
    let found = walk_counting(&mut walk);
    Some((found.count, walk.done == 0))
}

impl Walk for NetWalk {
    fn step(&mut self) -> bool {
        step(self)
    }
}

/// One entry of the walk; true at the list's end.
#[inline(always)]
fn step(walk: &mut NetWalk) -> bool {
    let Some(next) = read_at::<u64>(walk.node as *const u8, 0) else {
        walk.done = 1;
        return true;
    };
    let in_batch = walk.poison != 0;
    let (net, torn_down, flags) = if in_batch {
        let net = walk.node.wrapping_sub(u64::from(NET_EXIT_LIST_OFFSET.load()));
        let prev = net.wrapping_add(u64::from(NET_LIST_OFFSET.load()) + 8);
        (net, read_at::<u64>(prev as *const u8, 0) == Some(walk.poison), DEFERRED_BATCH_MEMBER)
    } else {
        // Back around to the first namespace: this entry is the list's head.
        if walk.node == walk.first || next == walk.first {
            walk.done = 1;
            return true;
        }
        let net = walk.node.wrapping_sub(u64::from(NET_LIST_OFFSET.load()));
        (net, read_at::<u32>(net as *const u8, NET_REFS_OFFSET.load()) == Some(0), 0)
    };
    if torn_down {
        let inum = read_at::<u32>(net as *const u8, NET_INUM_OFFSET.load()).unwrap_or(0);
        emit_record(DeferredRecord {
            kind: DeferredKind::NetNsTornDown as u32,
            pid: current_pid(),
            start_ns: walk.run_start_ns,
            end_ns: now_ns(),
            object: net,
            wait_ns: 0,
            runq_ns: 0,
            inum,
            count: 0,
            flags,
            pad: 0,
        });
        if let Some(found) = FOUND.get_ptr_mut(0) {
            // SAFETY: a per-CPU slot, used by this program's run alone.
            let found = unsafe { &mut *found };
            if found.count == 0 {
                found.first = net;
            }
            found.count += 1;
        }
    }
    walk.node = next;
    if in_batch && next == walk.first {
        walk.done = 1;
        return true;
    }
    false
}

/// A switch of the machine while teardowns run: their kworkers' time off a CPU, and the stacks
/// they block in.
#[inline(always)]
pub fn switched(
    ctx: &BtfTracePointContext,
    prev: Task,
    next: Task,
    preempt: bool,
    prev_state: u32,
    now: u64,
) {
    let prev_pid = task_pid_tgid(prev).0;
    if let Some(run) = TEARDOWN_RUNS.get_ptr_mut(prev_pid) {
        // SAFETY: the entry of the kworker switching out, which only this CPU changes now.
        let run = unsafe { &mut *run };
        let owner = StackOwner {
            kind: STACK_TEARDOWN_BLOCKED,
            pid: prev_pid,
            start_ns: run.start_ns,
            n_hits: 0,
        };
        run.off.leave(ctx, preempt, prev_state, now, owner);
        // Every run waits for RCU (`synchronize_rcu`, `rcu_barrier`) once its list is built.
        if run.batch_walked == 0
            && run.first_net != 0
            && let Some((count, truncated)) = walk_batch(run.first_net, run.start_ns)
        {
            run.batch_walked = 1;
            run.count = run.count.max(count);
            if truncated {
                run.flags |= DEFERRED_WALK_TRUNCATED;
            }
        }
    }
    if let Some(run) = TEARDOWN_RUNS.get_ptr_mut(task_pid_tgid(next).0) {
        // SAFETY: the entry of the kworker switching in, which only this CPU changes now.
        unsafe { (*run).off.back(now) };
    }
}

/// A tick of the sampling clock that did not catch an exit: it may have caught a teardown.
#[inline(always)]
pub fn sampled(ctx: &aya_ebpf::programs::PerfEventContext) {
    if !teardown_runs() {
        return;
    }
    let pid = current_pid();
    // SAFETY: the value is copied out at once.
    let Some(start_ns) = (unsafe { TEARDOWN_RUNS.get(pid) }).map(|run| run.start_ns) else {
        return;
    };
    send_sample(ctx, Sampled { kind: STACK_TEARDOWN_ON_CPU, pid, start_ns, n_hits: 0 });
}

/// `static void cleanup_net(struct work_struct *work)`.
#[kprobe]
pub fn kprobe_enter_cleanup_net(_ctx: ProbeContext) -> u32 {
    open_run(DeferredKind::NetTeardownRun, 0, 0);
    0
}

#[kretprobe]
pub fn kretprobe_exit_cleanup_net(_ctx: RetProbeContext) -> u32 {
    close_run();
    0
}

#[fentry]
pub fn fentry_enter_cleanup_net(_ctx: FEntryContext) -> u32 {
    open_run(DeferredKind::NetTeardownRun, 0, 0);
    0
}

#[fexit]
pub fn fexit_exit_cleanup_net(_ctx: FExitContext) -> u32 {
    close_run();
    0
}

/// `static void free_user_ns(struct work_struct *work)`.
#[kprobe]
pub fn kprobe_enter_free_user_ns(ctx: ProbeContext) -> u32 {
    if let Some(work) = ctx.arg::<*const u8>(0) {
        user_ns_run(work);
    }
    0
}

#[kretprobe]
pub fn kretprobe_exit_free_user_ns(_ctx: RetProbeContext) -> u32 {
    close_run();
    0
}

#[fentry]
pub fn fentry_enter_free_user_ns(ctx: FEntryContext) -> u32 {
    user_ns_run(ctx.arg::<*const u8>(0));
    0
}

#[fexit]
pub fn fexit_exit_free_user_ns(_ctx: FExitContext) -> u32 {
    close_run();
    0
}
