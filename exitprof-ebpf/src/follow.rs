//! Which exits are recorded. Userspace marks the tasks it follows in their local storage; an
//! exit is followed as its nearest marked ancestor says, found by a walk up the ancestry where
//! the exit starts. The walk is bounded ([`ANCESTRY_DEPTH`]): a process deeper than that below
//! every mark could not be told followed or not. So, while a target is followed by its marks
//! (`--pid`, a workload: not `--all` nor `--comm`), the processes created since its marks were
//! set ([`DECIDED_SINCE`]; for a workload, marked before it creates anything, every process)
//! are kept decided as they are created ([`sched_process_fork`]): a followed one always has a
//! mark within [`MARK_EVERY`] generations (its own where its nearest is further), so one with
//! none that near is not followed, however deep its tree. A storm's processes, a generation
//! below their driver's mark, carry none; threads need nothing (marks are on leaders), and a
//! thread storm's creation pays one tracepoint program that returns at once. The kernel side
//! also marks a thread that takes its process over by exec.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap},
    programs::BtfTracePointContext,
};
use exitprof_common::{
    counters,
    sizes::COMM_LEN,
    task::{DRIVER, EXCLUDED, FOLLOW_NONE, FOLLOWED, UNDECIDED, inherited},
};

use crate::{
    cgroups::{follows_by_cgroup, in_target_cgroup},
    helpers::{
        self, EEXIST, exec_thread_pid, group_leader, group_live, is_exiting, real_parent,
        signal_of, start_boottime, task_comm, task_pid_tgid,
    },
    maps::{TARGET_COMM, TRACE_ALL, add, count},
    marks::{mark, set_mark},
    task_storage::Task,
};

/// Generations of parents looked through for a mark: many times what a storm (1), a build under
/// a shell (some 5) or a container's tree (some 10) needs. The walk stops at the first mark or at
/// the root, or at a process decided as it was created, so only a tree this deep that was there
/// before the run costs this many steps. A walk that runs out leaves its exit undecided:
/// counted lost (`FOLLOW_UNKNOWN`) unless something else chooses it.
#[cfg(not(feature = "compat"))]
const ANCESTRY_DEPTH: u32 = 64;

/// Without `bpf_loop` (before 5.17) the walk is a bounded loop, which the verifier follows
/// generation by generation: fewer of them.
#[cfg(feature = "compat")]
const ANCESTRY_DEPTH: u32 = 24;

/// Generations within which every followed process created since [`DECIDED_SINCE`] has a mark
/// (its own, or an ancestor's): [`sched_process_fork`] marks a new process only when its nearest
/// mark is this far up. A walk from such a process looks at this many leaders at most; a
/// storm's processes (a generation below their driver's mark) and a build's (a few) carry no
/// mark of their own.
const MARK_EVERY: u32 = 8;

/// Whether an exit is part of the target.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Following {
    Target,
    NotTarget,
    /// No mark was found within [`ANCESTRY_DEPTH`] generations (here or, for a process created
    /// during the run, where its creation was decided: `UNDECIDED`), and neither `--all`,
    /// `--comm` nor `--cgroup` chose it (`--comm` and `--cgroup` decide every exit): it may have
    /// descended from a followed process.
    Undecided,
}

/// Whether the exit of `task`, which is opening, is part of the target.
#[inline(always)]
pub fn following(task: Task) -> Following {
    let by_name = follows_by_name() && TRACE_ALL.load() == 0;
    // Chosen by name, a task of another name is not the target, whatever its ancestry: it is
    // known at once, never undecided, and the exits of the rest of the machine pay no walk.
    if by_name && !is_target_comm(task_comm(task)) {
        return Following::NotTarget;
    }
    // Chosen by cgroup, alike: a task outside the cgroup's subtree is not the target.
    let by_cgroup = follows_by_cgroup() && TRACE_ALL.load() == 0;
    if by_cgroup && !in_target_cgroup(task) {
        return Following::NotTarget;
    }
    let (follow, decided) = follow_of(task);
    match follow {
        FOLLOWED => Following::Target,
        // A driver's own exit, and exitprof's, are never part of the target.
        DRIVER | EXCLUDED => Following::NotTarget,
        // Its name (or cgroup) is the target's: the walk only looked for exitprof's own mark.
        _ if TRACE_ALL.load() != 0 || by_name || by_cgroup => Following::Target,
        UNDECIDED => Following::Undecided,
        _ if decided => Following::NotTarget,
        _ => Following::Undecided,
    }
}

/// How `task` is followed: by its own mark, else as its thread-group leader's mark or the one of
/// the nearest marked ancestor of that leader says; and whether that was decided (a mark, the
/// root of every tree, or, from a leader created since [`DECIDED_SINCE`], [`MARK_EVERY`]
/// leaders without one, was reached). Marks are on leaders only (userspace marks processes through
/// pidfds, which name leaders), so only leaders are looked at: the parent (`real_parent`, the
/// thread that created the process) counts through its leader. An orphan that was reparented
/// outside the marked tree is not followed any more.
#[inline(always)]
fn follow_of(task: Task) -> (u32, bool) {
    let (pid, tgid) = task_pid_tgid(task);
    if pid == tgid
        && let Some(mark) = mark(task)
    {
        if others_live(task) {
            note_heir(task, mark);
        }
        return (mark, true);
    }
    let walk = walk_from(group_leader(task), decided_since());
    (walk.follow, walk.done != 0)
}

/// The walk from `leader` up its ancestry to the nearest mark; `since` is [`decided_since`]. A
/// leader created since then is followed only if a mark is within [`MARK_EVERY`] leaders.
#[inline(always)]
fn walk_from(leader: Task, since: u64) -> Walk {
    let decided_at_creation = since != 0 && start_boottime(leader) >= since;
    let bound = if decided_at_creation { MARK_EVERY } else { u32::MAX };
    let mut walk = Walk { leader, follow: FOLLOW_NONE, done: 0, seen: 0, bound };
    // Most walks have their answer at once (a storm's threads in their process's mark, its
    // processes in their driver's): that one is looked at without the loop's call.
    if !step(&mut walk) {
        helpers::walk(ANCESTRY_DEPTH, &mut walk);
    }
    walk
}

/// A walk up the ancestry, one leader at a time.
#[repr(C)]
struct Walk {
    /// The leader to look at next.
    leader: Task,
    /// What the walk found (`FOLLOW_NONE` until it finds a mark).
    follow: u32,
    /// Non-zero once the walk has its answer: a mark, the root of every tree, or `bound`.
    done: u32,
    /// Leaders looked at without a mark: the generations between the first and the mark found.
    seen: u32,
    /// Leaders without a mark after which the walk has its answer, not followed
    /// ([`MARK_EVERY`] from a leader created since [`DECIDED_SINCE`]); unbounded otherwise.
    bound: u32,
}

impl helpers::Walk for Walk {
    fn step(&mut self) -> bool {
        step(self)
    }
}

/// One generation of [`follow_of`]'s walk; true when it has its answer.
#[inline(always)]
fn step(walk: &mut Walk) -> bool {
    if let Some(mark) = mark(walk.leader) {
        walk.follow = inherited(mark);
        walk.done = 1;
        return true;
    }
    walk.seen += 1;
    if walk.seen >= walk.bound {
        walk.done = 1;
        return true;
    }
    let parent = real_parent(walk.leader);
    // The idle task (pid 0) is its own parent, the root of every tree.
    if task_pid_tgid(parent).0 == 0 {
        walk.done = 1;
        return true;
    }
    walk.leader = group_leader(parent);
    false
}

/// Since when (the kernel's boot-time clock, `start_boottime`'s, in ns) every process created is
/// decided as it is created ([`sched_process_fork`]): unmarked, it is not followed; 0: none is.
/// Userspace sets it once the target's marks are set: to that time for `--pid` (a process
/// created before then may have been created by an unmarked parent about to be marked, or lie
/// deep below the target), to 1 for a workload (marked before it creates anything: every
/// process is decided), and clears it as a run begins; the kernel side clears it when a
/// decision cannot be kept (a mark not made): from then on exits walk up their ancestry, as
/// before, and a walk that runs out counts its exit lost.
#[map]
static DECIDED_SINCE: Array<u64> = Array::with_max_entries(1, 0);

/// [`DECIDED_SINCE`].
#[inline(always)]
fn decided_since() -> u64 {
    // SAFETY: an array slot; an aligned 8-byte load is atomic.
    DECIDED_SINCE.get_ptr(0).map_or(0, |since| unsafe { core::ptr::read_volatile(since) })
}

/// `sched_process_fork(struct task_struct *parent, struct task_struct *child)` (after
/// `copy_process`, which stamped the child's `start_boottime`, and before the child first
/// runs): while processes are decided as they are created ([`DECIDED_SINCE`]), a new process is
/// followed as its parent (`real_parent`'s leader, which `CLONE_PARENT` makes the creator's
/// parent) is: it takes the parent's nearest mark (as [`inherited`] passes it on) where that is
/// [`MARK_EVERY`] generations up or more, and `UNDECIDED` where the parent's walk runs out (a
/// parent older than `DECIDED_SINCE`, deep below every mark), so that a walk from it or its
/// descendants is decided within `MARK_EVERY` leaders. A new thread needs nothing: it is
/// followed as its leader is.
#[btf_tracepoint]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    let since = decided_since();
    if since == 0 {
        return 0;
    }
    let child: Task = ctx.arg(1);
    let (pid, tgid) = task_pid_tgid(child);
    if pid != tgid {
        return 0;
    }
    let walk = walk_from(group_leader(real_parent(child)), since);
    let follow = match walk {
        Walk { done: 0, .. } => UNDECIDED,
        // The mark is `seen` generations above the parent, one more above the child.
        Walk { follow, seen, .. } if follow != FOLLOW_NONE && seen + 1 >= MARK_EVERY => follow,
        _ => return 0,
    };
    if !set_mark(child, follow) {
        // Left unmarked, the child would be taken for one not followed: creation no longer
        // decides, and its exit (and every later one) walks up its ancestry instead.
        stop_deciding();
        count(counters::MARKS_NOT_INHERITED);
    }
    0
}

/// Clears [`DECIDED_SINCE`].
#[inline(always)]
fn stop_deciding() {
    if let Some(since) = DECIDED_SINCE.get_ptr_mut(0) {
        // SAFETY: an array slot; an aligned 8-byte store is atomic.
        unsafe { core::ptr::write_volatile(since, 0) };
    }
}

/// Whether a thread of `task`'s group other than `task` (which is exiting) may be alive: only
/// one can take the process over by exec. `signal->live` counts `task` until `do_exit` takes
/// it out, right after setting `PF_EXITING` (in that instant it counts `task` twice over:
/// harmless, a mark noted for nothing is dropped at the exit's end). Most marked leaders that
/// exit lead processes of one thread (a command, a checkpoint of a deep tree): no mark waits
/// for them.
#[inline(always)]
fn others_live(task: Task) -> bool {
    let own = i32::from(!is_exiting(task));
    group_live(task).is_none_or(|live| live > own)
}

/// A marked leader exits. Its process may live on in its other threads, and one of them may
/// exec: it then becomes the leader, with no mark of its own and no longer descending from the
/// old leader (whether the old leader exits because of that exec, or had called `pthread_exit`
/// earlier). The leader's mark is noted for that thread, to be passed on as it finishes its
/// exec ([`sched_process_exec`]); it is dropped when the process has no live thread left
/// ([`forget_heir`]).
#[inline(always)]
fn note_heir(task: Task, follow: u32) {
    let Some(signal) = signal_of(task) else { return };
    // The thread whose exec ends the leader, if one does; any thread that execs later if not.
    let pid = exec_thread_pid(signal).unwrap_or(0);
    match HEIRS.insert(signal, Heir { pid, follow }, u64::from(BPF_NOEXIST)) {
        Ok(()) => add_heirs(1),
        Err(e) if e == -EEXIST => {}
        Err(_) => count(counters::MARKS_NOT_PASSED),
    }
}

/// A mark waiting for the thread that takes its process over by exec.
#[derive(Clone, Copy)]
pub struct Heir {
    /// The pid, before its exec, of the thread whose exec ends the leader; 0 for any thread
    /// (the leader exited on its own).
    pid: u32,
    follow: u32,
}

/// Marks waiting for their heirs, by the process's `signal` address.
#[map]
static HEIRS: HashMap<u64, Heir> = HashMap::with_max_entries(4096, 0);

/// How many marks wait in `HEIRS`: while none does, an exit's end has nothing to forget there.
#[map]
static HEIRS_WAITING: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
fn add_heirs(n: u64) {
    if let Some(waiting) = HEIRS_WAITING.get_ptr_mut(0) {
        // SAFETY: an array slot, changed only atomically.
        unsafe { add(waiting, n) };
    }
}

/// Whether any mark waits in `HEIRS`.
#[inline(always)]
fn heirs_waiting() -> bool {
    // SAFETY: an array slot; an aligned 8-byte load is atomic.
    HEIRS_WAITING.get_ptr(0).is_some_and(|n| unsafe { core::ptr::read_volatile(n) } != 0)
}

#[inline(always)]
fn remove_heir(signal: u64) {
    if HEIRS.remove(signal).is_ok() {
        add_heirs(u64::MAX);
    }
}

/// The exit of `task` ends: when no thread of its process is left alive, nothing can take the
/// process over by exec any more, and a mark waiting for that is dropped (a later process
/// could have the same `signal` address).
#[inline(always)]
pub fn forget_heir(task: Task) {
    if heirs_waiting()
        && group_live(task) == Some(0)
        && let Some(signal) = signal_of(task)
    {
        remove_heir(signal);
    }
}

/// `sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)`: a task
/// finished an exec; if it took its process over from a marked leader, it takes the mark too.
#[btf_tracepoint]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    // Most execs of the machine come while no mark waits: one shared word read, no lookup.
    if !heirs_waiting() {
        return 0;
    }
    let task: Task = ctx.arg(0);
    let old_pid: u32 = ctx.arg(1);
    let Some(signal) = signal_of(task) else { return 0 };
    // SAFETY: the value is copied out at once.
    let Some(&heir) = (unsafe { HEIRS.get(signal) }) else { return 0 };
    // A leader that execs keeps its own task and mark; a thread that takes the process over
    // had the pid `old_pid` until now.
    let (pid, _) = task_pid_tgid(task);
    if old_pid == pid || (heir.pid != 0 && heir.pid != old_pid) {
        return 0;
    }
    remove_heir(signal);
    if !set_mark(task, heir.follow) {
        count(counters::MARKS_NOT_PASSED);
    }
    0
}

/// Whether exits are also chosen by task name (`TARGET_COMM` is set).
#[inline(always)]
fn follows_by_name() -> bool {
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
