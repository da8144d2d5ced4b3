//! Deferred work an exit causes in other contexts, recorded where it runs.
//!
//! - IPC namespace teardown: since v5.7 `put_ipc_ns` hands the last reference to the `free_ipc`
//!   work item; since v6.3 each run frees a batch after one `synchronize_rcu`. `free_ipc_ns` is
//!   inlined into `free_ipc` on current kernels; `shm_exit_ns(ns)` runs once per namespace inside
//!   it and names the namespace.
//! - reaping: a parent's `release_task` of a zombie child.
//! - the final free: `sched_process_free`, from the RCU callback `delayed_put_task_struct`.

use aya_ebpf::{
    EbpfContext as _,
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::{HashMap, PerCpuArray},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext,
    },
};
use exitprof_common::{
    counters,
    deferred::{
        DEFERRED_NET_NS_RELEASED, DeferredKind, DeferredRecord, FREE_NET_CHECK, FREE_SAMPLED,
        WORK_TIMED_FREE_IPC,
    },
};

use crate::{
    exit_state::{end_lost, key, slot_of},
    free_watch::{is_watched, unwatch},
    helpers::{current_pid, now_ns, read_at, task_pid_tgid},
    maps::{
        DEFERRED, DEFERRED_WAKEUP_BYTES, FREE_IPC_ADDR, FREES_AWAITED, NET_REFS_OFFSET,
        TASK_PID_OFFSET, WORK_FUNC_OFFSET, count, stopped, wakeup_flag, work_timed,
    },
    marks, refusals,
    task_storage::Task,
    teardown,
};

/// A `free_ipc` run in progress, keyed by the kworker's pid.
#[derive(Clone, Copy)]
#[expect(clippy::struct_field_names, reason = "times, in ns like every time of exitprof")]
struct IpcRun {
    start_ns: u64,
    rcu_since_ns: u64,
    rcu_ns: u64,
}

#[map]
static IPC_RUNS: HashMap<u32, IpcRun> = HashMap::with_max_entries(256, 0);

/// Per CPU: the pid of the kworker running `free_ipc` there (0: none). `kfree` and
/// `workqueue_execute_end` fire for everything on the machine; this spares them a hash lookup.
/// (`free_ipc_work` is queued with `schedule_work`, on per-CPU workers that do not migrate.)
#[map]
static IPC_RUN_ON_CPU: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Whether the current task is running `free_ipc` on this CPU.
#[inline(always)]
fn in_ipc_run() -> bool {
    IPC_RUN_ON_CPU.get(0).is_some_and(|&pid| pid != 0 && pid == current_pid())
}

fn set_ipc_run_on_cpu(pid: u32) {
    if let Some(slot) = IPC_RUN_ON_CPU.get_ptr_mut(0) {
        // SAFETY: a per-CPU slot, written only by programs on this CPU.
        unsafe { *slot = pid };
    }
}

/// Parents inside `release_task` of a tracked child: parent pid -> (child pid, start).
#[map]
static REAPING: HashMap<u32, (u32, u64)> = HashMap::with_max_entries(4096, 0);

fn emit(kind: DeferredKind, start_ns: u64, end_ns: u64, object: u64, wait_ns: u64) {
    emit_record(DeferredRecord {
        kind: kind as u32,
        pid: current_pid(),
        start_ns,
        end_ns,
        object,
        wait_ns,
        runq_ns: 0,
        inum: 0,
        count: 0,
        flags: 0,
        pad: 0,
    });
}

/// Sends a deferred-work record (or counts it lost, the ring buffer full). It is written into
/// its place in the ring buffer field by field, each store volatile: written whole, or stored
/// together, neighbouring zero fields became a call of `memset`, a byte loop that the verifier
/// follows store by store (past its bound, inside the loop of a namespace walk).
#[inline(always)]
pub fn emit_record(record: DeferredRecord) {
    let flags = wakeup_flag(&DEFERRED, &DEFERRED_WAKEUP_BYTES);
    let Some(mut entry) = DEFERRED.reserve::<DeferredRecord>(0) else {
        count(counters::DEFERRED_RINGBUF_FULL);
        return;
    };
    let r = entry.as_mut_ptr();
    // SAFETY: the reserved entry, written whole before it is submitted.
    unsafe {
        use core::ptr::write_volatile as put;
        put(&raw mut (*r).kind, record.kind);
        put(&raw mut (*r).pid, record.pid);
        put(&raw mut (*r).start_ns, record.start_ns);
        put(&raw mut (*r).end_ns, record.end_ns);
        put(&raw mut (*r).object, record.object);
        put(&raw mut (*r).wait_ns, record.wait_ns);
        put(&raw mut (*r).runq_ns, record.runq_ns);
        put(&raw mut (*r).inum, record.inum);
        put(&raw mut (*r).count, record.count);
        put(&raw mut (*r).flags, record.flags);
        put(&raw mut (*r).pad, 0);
    }
    entry.submit(flags);
}

fn open_ipc_run() {
    let run = IpcRun { start_ns: now_ns(), rcu_since_ns: 0, rcu_ns: 0 };
    if IPC_RUNS.insert(current_pid(), run, 0).is_err() {
        count(counters::DEFERRED_STATE_FULL);
        return;
    }
    set_ipc_run_on_cpu(current_pid());
}

fn close_ipc_run() {
    let pid = current_pid();
    set_ipc_run_on_cpu(0);
    // SAFETY: the entry belongs to the current task.
    if let Some(run) = unsafe { IPC_RUNS.get(pid) } {
        emit(DeferredKind::IpcFreeRun, run.start_ns, now_ns(), 0, run.rcu_ns);
        let _ = IPC_RUNS.remove(pid);
    }
}

/// Inside a `free_ipc` run, one namespace (`ns`) is being freed.
fn ipc_ns_freed(ns: u64) {
    // SAFETY: the entry belongs to the current task.
    if let Some(run) = unsafe { IPC_RUNS.get(current_pid()) } {
        emit(DeferredKind::IpcNsFreed, run.start_ns, now_ns(), ns, 0);
    }
}

fn rcu_wait(entering: bool) {
    if let Some(run) = IPC_RUNS.get_ptr_mut(current_pid()) {
        // SAFETY: the entry belongs to the current task.
        let run = unsafe { &mut *run };
        let now = now_ns();
        if entering {
            run.rcu_since_ns = now;
        } else if run.rcu_since_ns != 0 {
            run.rcu_ns += now.saturating_sub(run.rcu_since_ns);
            run.rcu_since_ns = 0;
        }
    }
}

/// `static void free_ipc(struct work_struct *unused)`.
#[kprobe]
pub fn kprobe_enter_free_ipc(_ctx: ProbeContext) -> u32 {
    open_ipc_run();
    0
}

#[kretprobe]
pub fn kretprobe_exit_free_ipc(_ctx: RetProbeContext) -> u32 {
    close_ipc_run();
    0
}

#[fentry]
pub fn fentry_enter_free_ipc(_ctx: FEntryContext) -> u32 {
    open_ipc_run();
    0
}

#[fexit]
pub fn fexit_exit_free_ipc(_ctx: FExitContext) -> u32 {
    close_ipc_run();
    0
}

/// `void shm_exit_ns(struct ipc_namespace *ns)`, once per namespace in `free_ipc_ns`.
#[kprobe]
pub fn kprobe_enter_shm_exit_ns(ctx: ProbeContext) -> u32 {
    if let Some(ns) = ctx.arg::<u64>(0) {
        ipc_ns_freed(ns);
    }
    0
}

#[fentry]
pub fn fentry_enter_shm_exit_ns(ctx: FEntryContext) -> u32 {
    ipc_ns_freed(ctx.arg::<u64>(0));
    0
}

/// `void synchronize_rcu(void)`: the grace period a `free_ipc` run waits for.
#[kprobe]
pub fn kprobe_enter_synchronize_rcu(_ctx: ProbeContext) -> u32 {
    rcu_wait(true);
    0
}

#[kretprobe]
pub fn kretprobe_exit_synchronize_rcu(_ctx: RetProbeContext) -> u32 {
    rcu_wait(false);
    0
}

#[fentry]
pub fn fentry_enter_synchronize_rcu(_ctx: FEntryContext) -> u32 {
    rcu_wait(true);
    0
}

#[fexit]
pub fn fexit_exit_synchronize_rcu(_ctx: FExitContext) -> u32 {
    rcu_wait(false);
    0
}

/// `workqueue_queue_work(int req_cpu, struct pool_workqueue *pwq, struct work_struct *work)`:
/// `put_ipc_ns` queued the `free_ipc` work item (only when it was not pending already).
#[btf_tracepoint]
pub fn workqueue_queue_work(ctx: BtfTracePointContext) -> i32 {
    let work: *const u8 = ctx.arg(2);
    if read_at::<u64>(work, WORK_FUNC_OFFSET.load()) == Some(FREE_IPC_ADDR.load()) {
        let now = now_ns();
        emit(DeferredKind::IpcFreeQueued, now, now, 0, 0);
    }
    0
}

/// `workqueue_execute_start(struct work_struct *work)`: in tracepoint mode, a run of the work
/// item whose function is `free_ipc` (address from kallsyms), or of a namespace teardown's
/// (`crate::teardown`). Each address is set only where its function is not probed itself.
#[btf_tracepoint]
pub fn workqueue_execute_start(ctx: BtfTracePointContext) -> i32 {
    let work: *const u8 = ctx.arg(0);
    let Some(func) = read_at::<u64>(work, WORK_FUNC_OFFSET.load()) else { return 0 };
    if func == FREE_IPC_ADDR.load() && work_timed(WORK_TIMED_FREE_IPC) {
        open_ipc_run();
    } else {
        teardown::work_started(work, func);
    }
    0
}

/// `workqueue_execute_end(struct work_struct *work, work_func_t function)`: a kworker runs one
/// work item at a time, so the end after a `free_ipc` start (or a teardown's) is that run's end.
/// (The verifier does not let a BTF tracepoint read `function`, a pointer to a function
/// prototype.)
#[btf_tracepoint]
pub fn workqueue_execute_end(_ctx: BtfTracePointContext) -> i32 {
    if in_ipc_run() {
        close_ipc_run();
    }
    teardown::work_ended();
    0
}

/// `kfree(unsigned long call_site, const void *ptr)`: in tracepoint mode, what a `free_ipc` run
/// frees; userspace keeps the pointers that were an exiting task's IPC namespace.
#[btf_tracepoint]
pub fn kfree(ctx: BtfTracePointContext) -> i32 {
    if in_ipc_run() {
        ipc_ns_freed(ctx.arg(1));
    }
    0
}

/// A parent enters `release_task(struct task_struct *p)` for a child that is not itself
/// (threads release themselves at the end of their exit). Every reap is noted while a run
/// collects (deciding whether the parent is followed would cost a walk of its ancestry here,
/// and each program with that walk costs the verifier tens of milliseconds); those of children
/// whose exits were not recorded join none in userspace.
fn reap_start(task: *const u8) {
    let Some(child) = read_at::<u32>(task, TASK_PID_OFFSET.load()) else { return };
    let parent = current_pid();
    if child == parent || stopped() {
        return;
    }
    if REAPING.insert(parent, (child, now_ns()), 0).is_err() {
        count(counters::DEFERRED_STATE_FULL);
    }
}

fn reap_end() {
    let parent = current_pid();
    // SAFETY: the entry belongs to the current task.
    if let Some(&(child, start)) = unsafe { REAPING.get(parent) } {
        emit(DeferredKind::Reap, start, now_ns(), u64::from(child), 0);
        let _ = REAPING.remove(parent);
    }
}

#[kprobe]
pub fn kprobe_enter_reap(ctx: ProbeContext) -> u32 {
    if let Some(task) = ctx.arg::<*const u8>(0) {
        reap_start(task);
    }
    0
}

#[kretprobe]
pub fn kretprobe_exit_reap(_ctx: RetProbeContext) -> u32 {
    reap_end();
    0
}

#[fentry]
pub fn fentry_enter_reap(ctx: FEntryContext) -> u32 {
    reap_start(ctx.arg::<*const u8>(0));
    0
}

#[fexit]
pub fn fexit_exit_reap(_ctx: FExitContext) -> u32 {
    reap_end();
    0
}

/// `syscalls:sys_exit_wait4`: in tracepoint mode, the moment a parent has reaped a child
/// (the syscall returns the child's pid, as the parent's PID namespace sees it).
#[tracepoint]
pub fn sys_exit_wait4(ctx: TracePointContext) -> u32 {
    // Field `long ret` at offset 16 (after the common header and `__syscall_nr`), stable across
    // kernels for syscall exit events.
    // SAFETY: a bounded read of the tracepoint record.
    let ret: i64 = unsafe { ctx.read_at(16) }.unwrap_or(-1);
    if ret > 0 && !stopped() {
        let now = now_ns();
        emit(DeferredKind::WaitReaped, now, now, ret as u64, 0);
    }
    0
}

/// `sched_process_free(struct task_struct *p)`, from the RCU callback that frees a task (after
/// its final switch-out: `delayed_put_task_struct`, called once the task is dead and reaped).
/// The free of a task whose exit was recorded, and is awaited, is reported: one in
/// `FREES_SAMPLED` where frees are reported, and those whose network namespace is looked at
/// again then, a grace period after their sockets let go of it. The rest is for exits whose
/// final switch-out went unseen: an exit still open when its task is freed never showed its end
/// (it began before a probe it needed was attached, say), it is counted lost and its slot
/// released, for the next exit that needs it; a refused exit's task is forgotten. Each is looked
/// for: nothing kept for a task may outlive it.
#[btf_tracepoint]
pub fn sched_process_free(ctx: BtfTracePointContext) -> i32 {
    // The task's address as a number: the context's first argument read as plain memory.
    let Some(address) = read_at::<u64>(ctx.as_ptr().cast(), 0) else { return 0 };
    marks::forget_freed(ctx.arg(0));
    if !is_watched(address) {
        return 0;
    }
    let task: Task = ctx.arg(0);
    let key = key(task);
    // SAFETY: the value is copied out at once.
    if let Some(awaited) = unsafe { FREES_AWAITED.get(key) }.copied() {
        let now = now_ns();
        if awaited.why & FREE_SAMPLED != 0 {
            emit(DeferredKind::TaskFreed, now, now, u64::from(awaited.pid), 0);
        }
        if awaited.why & FREE_NET_CHECK != 0 {
            let refs = read_at::<u32>(awaited.net_ns as *const u8, NET_REFS_OFFSET.load());
            emit_record(DeferredRecord {
                kind: DeferredKind::NetNsAtFree as u32,
                pid: current_pid(),
                start_ns: now,
                end_ns: now,
                object: u64::from(awaited.pid),
                wait_ns: 0,
                runq_ns: 0,
                inum: 0,
                count: 0,
                flags: if refs == Some(0) { DEFERRED_NET_NS_RELEASED } else { 0 },
                pad: 0,
            });
        }
        if FREES_AWAITED.remove(key).is_ok() {
            unwatch(address);
        }
    }
    let (pid, tgid) = task_pid_tgid(task);
    if let Some(slot) = slot_of(key, pid, tgid) {
        if let Some(state) = slot.state() {
            end_lost(state, counters::STALE_RECORD);
        }
        slot.release(address);
    }
    if refusals::forget(key) {
        unwatch(address);
    }
    0
}
