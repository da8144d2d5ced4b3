//! Which exits are recorded. Userspace marks the tasks it follows in their local storage; an
//! exit is followed as its nearest marked ancestor says. Nothing is done when tasks are created:
//! the fork path of a storm pays nothing, and the walk happens once, where an exit starts. The
//! kernel side marks a task in one case only: a thread that takes its process over by exec.

use aya_ebpf::{
    cty::c_void,
    helpers::{bpf_get_current_comm, generated::bpf_loop},
    macros::{btf_tracepoint, map},
    maps::HashMap,
    programs::BtfTracePointContext,
};
use exitprof_common::{
    counters,
    sizes::COMM_LEN,
    task::{DRIVER, EXCLUDED, FOLLOW_NONE, FOLLOWED, inherited},
};

use crate::{
    helpers::{exec_thread_pid, group_leader, real_parent, signal_of, task_pid_tgid},
    maps::{TARGET_COMM, TASKS, TRACE_ALL, count},
    task_storage::Task,
};

/// Generations of parents looked through for a mark: more than a storm (1), a build under a
/// shell (some 5) or a service's tree needs. A walk that runs out is counted
/// (`FOLLOW_UNKNOWN`): its exit may have been followed.
const ANCESTRY_DEPTH: u32 = 12;

/// How `task` is followed: by its own mark, else as its thread-group leader's mark or the one of
/// the nearest marked ancestor of that leader says. Marks are on leaders only (userspace marks
/// processes through pidfds, which name leaders), so only leaders are looked at: the parent
/// (`real_parent`, the thread that created the process) counts through its leader. An orphan
/// that was reparented outside the marked tree is not followed any more. Called as `task`'s exit
/// opens.
#[inline(always)]
pub fn follow_of(task: Task) -> u32 {
    if let Some(mark) = mark(task) {
        note_exec_heir(task, mark);
        return mark;
    }
    // The walk is a `bpf_loop` of one generation a step, not an unrolled loop: the verifier
    // checks the step until its states converge (a couple of times), where it checked every
    // generation of an unrolled walk, in each program that opens exits, looking the trust of
    // every pointer loaded up by name in the kernel's BTF (some 2 ms a generation on 6.18).
    let mut walk = Walk { leader: group_leader(task), follow: FOLLOW_NONE, done: 0 };
    // SAFETY: the callback is a BPF function of the signature bpf_loop expects, and its context
    // this stack frame's `walk`, which outlives the call.
    unsafe {
        bpf_loop(ANCESTRY_DEPTH, ancestry_step as *mut c_void, (&raw mut walk).cast(), 0);
    }
    if walk.done == 0 {
        count(counters::FOLLOW_UNKNOWN);
    }
    walk.follow
}

/// A walk up the ancestry, one leader at a time.
#[repr(C)]
struct Walk {
    /// The leader to look at next.
    leader: Task,
    /// What the walk found (`FOLLOW_NONE` until it finds a mark).
    follow: u32,
    /// Non-zero once the walk has its answer: a mark, or the root of every tree.
    done: u32,
}

/// One generation of [`follow_of`]'s walk: 1 stops the loop.
extern "C" fn ancestry_step(_index: u32, walk: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the context `follow_of` gave it, a `Walk`.
    let walk = unsafe { &mut *walk.cast::<Walk>() };
    if let Some(mark) = mark(walk.leader) {
        walk.follow = inherited(mark);
        walk.done = 1;
        return 1;
    }
    let parent = real_parent(walk.leader);
    // The idle task (pid 0) is its own parent, the root of every tree.
    if task_pid_tgid(parent).0 == 0 {
        walk.done = 1;
        return 1;
    }
    walk.leader = group_leader(parent);
    0
}

/// A process whose leader exits because another of its threads execs lives on in that thread,
/// which becomes its leader and no longer descends from the old one: the exiting leader's own
/// mark is noted for it, to be passed on as it finishes its exec ([`sched_process_exec`]).
#[inline(always)]
fn note_exec_heir(task: Task, follow: u32) {
    let Some(signal) = signal_of(task) else { return };
    let Some(pid) = exec_thread_pid(signal) else { return };
    if HEIRS.insert(signal, Heir { pid, follow }, 0).is_err() {
        count(counters::FOLLOW_UNKNOWN);
    }
}

/// A mark waiting for the thread that takes its process over by exec.
#[derive(Clone, Copy)]
pub struct Heir {
    /// The thread's pid before its exec took the leader's.
    pid: u32,
    follow: u32,
}

/// Marks waiting for their heirs, by the process's `signal` address.
#[map]
static HEIRS: HashMap<u64, Heir> = HashMap::with_max_entries(256, 0);

/// `sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)`: a task
/// finished an exec; if it took its process over from a marked leader, it takes the mark too.
#[btf_tracepoint]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    let task: Task = ctx.arg(0);
    let old_pid: u32 = ctx.arg(1);
    let Some(signal) = signal_of(task) else { return 0 };
    // SAFETY: the value is copied out at once.
    let Some(&heir) = (unsafe { HEIRS.get(signal) }) else { return 0 };
    if heir.pid != old_pid {
        return 0;
    }
    let _ = HEIRS.remove(signal);
    match TASKS.get_or_create(task) {
        // SAFETY: the current task's storage.
        Some(mark) => unsafe { (*mark).follow = heir.follow },
        None => count(counters::FOLLOW_UNKNOWN),
    }
    0
}

#[inline(always)]
fn mark(task: Task) -> Option<u32> {
    // SAFETY: a storage pointer from a successful lookup.
    TASKS.get(task).map(|mark| unsafe { (*mark).follow })
}

/// Whether an exit of a task followed as `follow` is recorded.
#[inline(always)]
pub fn is_target(follow: u32) -> bool {
    match follow {
        FOLLOWED => true,
        // A driver's own exit, and exitprof's, are never part of the target.
        DRIVER | EXCLUDED => false,
        _ => TRACE_ALL.load() != 0 || (follows_by_name() && current_comm_is_target()),
    }
}

/// Whether exits are also chosen by task name (`TARGET_COMM` is set).
#[inline(always)]
fn follows_by_name() -> bool {
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
