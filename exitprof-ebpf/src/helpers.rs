//! Small helpers every probe family uses.

use aya_ebpf::{
    bindings::bpf_pidns_info,
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        generated::bpf_get_ns_current_pid_tgid,
    },
};
#[cfg(not(feature = "compat"))]
use aya_ebpf::{cty::c_void, helpers::generated::bpf_loop};

use exitprof_common::record::COMM_LEN;

use crate::{
    maps::{
        CRED_USER_NS_OFFSET, NSPROXY_IPC_NS_OFFSET, NSPROXY_NET_NS_OFFSET, PIDNS_DEV, PIDNS_INO,
        SIGNAL_GROUP_EXEC_TASK_OFFSET, SIGNAL_LIVE_OFFSET, TASK_COMM_OFFSET, TASK_FLAGS_OFFSET,
        TASK_GROUP_LEADER_OFFSET, TASK_NSPROXY_OFFSET, TASK_PID_OFFSET, TASK_REAL_CRED_OFFSET,
        TASK_REAL_PARENT_OFFSET, TASK_SIGNAL_OFFSET, TASK_TGID_OFFSET,
    },
    task_storage::Task,
};

/// `PF_EXITING` in `task_struct::flags` (include/linux/sched.h): set by `exit_signals`, after
/// `do_exit`'s first steps (which can block: a tracer's exit stop, the wait for a core dump).
pub const PF_EXITING: u32 = 0x0000_0004;

/// `EEXIST` (include/uapi/asm-generic/errno-base.h), as a map update with `BPF_NOEXIST`
/// returns it for a key that is there already.
pub const EEXIST: i32 = 17;

/// CLOCK_MONOTONIC now, in ns: the clock of every timestamp exitprof records.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: a helper without arguments or side effects.
    unsafe { bpf_ktime_get_ns() }
}

/// Thread id and thread-group id of the current task.
#[inline(always)]
pub fn current_pid_tgid() -> (u32, u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    (pid_tgid as u32, (pid_tgid >> 32) as u32)
}

/// Thread id of the current task.
#[inline(always)]
pub fn current_pid() -> u32 {
    current_pid_tgid().0
}

/// The current task's thread id and thread-group id as exitprof's PID namespace sees them
/// (`(0, 0)` when the task is not in it).
#[inline(always)]
pub fn current_ns_pid_tgid() -> (u32, u32) {
    let ino = PIDNS_INO.load();
    if ino == 0 {
        return current_pid_tgid();
    }
    let mut info = bpf_pidns_info { pid: 0, tgid: 0 };
    // SAFETY: `info` is a valid buffer of the size given.
    let found = unsafe {
        bpf_get_ns_current_pid_tgid(
            PIDNS_DEV.load(),
            ino,
            &raw mut info,
            size_of::<bpf_pidns_info>() as u32,
        )
    };
    if found == 0 { (info.pid, info.tgid) } else { (0, 0) }
}

/// A walk that goes one step at a time (up an ancestry, along a list).
pub trait Walk {
    /// One step; true when the walk is over.
    fn step(&mut self) -> bool;
}

/// Runs `walk` for at most `steps` steps, as a `bpf_loop` of one step a call: the verifier
/// checks the step until its states converge (a couple of times), where it would check every
/// step of an unrolled loop (looking the trust of each pointer loaded up by name in the kernel's
/// BTF: some 2 ms a step on 6.18). A walk's state must not be a count the verifier can follow
/// exactly: each step would be a new state to it, and the loop one it cannot bound.
#[cfg(not(feature = "compat"))]
#[inline(always)]
pub fn walk<W: Walk>(steps: u32, walk: &mut W) {
    // SAFETY: the callback is a BPF function of the signature bpf_loop expects, and its context
    // the caller's `walk`, which outlives the call.
    unsafe {
        bpf_loop(steps, walk_step::<W> as *mut c_void, core::ptr::from_mut(walk).cast(), 0);
    }
}

/// One step of [`walk`] as `bpf_loop` calls it: 1 stops the loop.
#[cfg(not(feature = "compat"))]
extern "C" fn walk_step<W: Walk>(_index: u32, walk: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the context `walk` gave it, a `W`.
    i64::from(unsafe { &mut *walk.cast::<W>() }.step())
}

/// Without `bpf_loop` (before 5.17) a walk is a bounded loop, which the verifier follows step by
/// step: callers give it fewer steps.
#[cfg(feature = "compat")]
#[inline(always)]
pub fn walk<W: Walk>(steps: u32, walk: &mut W) {
    for _ in 0..steps {
        if walk.step() {
            break;
        }
    }
}

/// Reads a `T` at `base + offset` in kernel memory; `None` when the read faults.
#[inline(always)]
pub fn read_at<T>(base: *const u8, offset: u32) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly on a bad one.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize).cast::<T>()) }.ok()
}

/// A field of a kernel object the verifier has typed by BTF (a trusted task pointer, or a
/// pointer loaded from one of its fields), at an offset from read-only data: the verifier knows
/// the offset and checks the load against the kernel's BTF, and the JIT guards it against a
/// fault (a null or stale pointer reads as zero). No helper call is needed, where
/// `bpf_probe_read_kernel` costs one per field.
#[cfg(not(feature = "compat"))]
#[inline(always)]
fn field<T: Copy>(object: *const u8, offset: u32) -> T {
    // SAFETY: `object` is a BTF-typed kernel pointer and `offset` a field's offset in its type,
    // from the running kernel's BTF; the verifier rejects any other access. Volatile, so that
    // the compiler does not merge neighbouring fields into one load that spans both.
    unsafe { core::ptr::read_volatile(object.add(offset as usize).cast::<T>()) }
}

/// A field of a kernel object at an offset from read-only data, read with
/// `bpf_probe_read_kernel` (zero when the read faults): kernels before 5.11 give the current
/// task only as an address, which the verifier does not type.
#[cfg(feature = "compat")]
#[inline(always)]
fn field<T: Copy>(object: *const u8, offset: u32) -> T {
    // SAFETY: an all-zero integer, pointer or byte array is a valid `T` for every field read here.
    read_at(object, offset).unwrap_or(unsafe { core::mem::zeroed() })
}

#[inline(always)]
fn task_field<T: Copy>(task: Task, offset: u32) -> T {
    field(task.cast(), offset)
}

/// The hierarchy and id of a cgroup (`cgrp->root->hierarchy_id`, and `cgroup_id(cgrp)`:
/// `cgrp->kn->id` since v5.5), as the `cgroup:` tracepoints' `root` and `id`.
#[inline(always)]
pub fn cgroup_hierarchy_and_id(cgroup: *const u8) -> (i32, u64) {
    use crate::maps::{
        CGROUP_KN_OFFSET, CGROUP_ROOT_HIERARCHY_ID_OFFSET, CGROUP_ROOT_OFFSET,
        KERNFS_NODE_ID_OFFSET,
    };
    let root: *const u8 = field(cgroup, CGROUP_ROOT_OFFSET.load());
    let kn: *const u8 = field(cgroup, CGROUP_KN_OFFSET.load());
    (field(root, CGROUP_ROOT_HIERARCHY_ID_OFFSET.load()), field(kn, KERNFS_NODE_ID_OFFSET.load()))
}

/// The id of the ancestor at `level` of `task`'s cgroup of the v2 hierarchy
/// (`task->cgroups->dfl_cgrp->ancestor_ids[level]`, v4.x to v5.19); 0 past its own level.
#[cfg(feature = "compat")]
#[inline(always)]
pub fn dfl_cgroup_ancestor_id(task: Task, level: i32) -> u64 {
    use crate::maps::{
        CGROUP_ANCESTOR_IDS_OFFSET, CGROUP_LEVEL_OFFSET, CSS_SET_DFL_CGRP_OFFSET,
        TASK_CGROUPS_OFFSET,
    };
    let css_set: *const u8 = task_field(task, TASK_CGROUPS_OFFSET.load());
    let cgroup: *const u8 = field(css_set, CSS_SET_DFL_CGRP_OFFSET.load());
    let own: i32 = field(cgroup, CGROUP_LEVEL_OFFSET.load());
    if cgroup.is_null() || level < 0 || level > own {
        return 0;
    }
    field(cgroup, CGROUP_ANCESTOR_IDS_OFFSET.load() + 8 * level as u32)
}

/// `task->__state` (`state` before 5.14), for `sched_switch` where it has no `prev_state`
/// argument (before 5.18).
#[cfg(feature = "compat")]
#[inline(always)]
pub fn task_state(task: Task) -> u32 {
    task_field(task, crate::maps::TASK_STATE_OFFSET.load())
}

/// When `task` started (`task->start_boottime`), in ns of the boot-time clock; a thread that
/// takes its process over by exec gets its leader's (`de_thread`).
#[inline(always)]
pub fn start_boottime(task: Task) -> u64 {
    task_field(task, crate::maps::TASK_START_BOOTTIME_OFFSET.load())
}

/// When `task` started, in clock ticks since boot, as `/proc/PID/stat` says it.
#[cfg(feature = "compat")]
#[inline(always)]
pub fn start_ticks(task: Task) -> u64 {
    start_boottime(task) / crate::maps::NS_PER_TICK.load().max(1)
}

/// `task->signal`'s address, which the threads of a process share and keep across an exec.
#[inline(always)]
pub fn signal_of(task: Task) -> Option<u64> {
    read_at::<u64>(task.cast(), TASK_SIGNAL_OFFSET.load())
}

/// The live threads of `task`'s group (`signal->live`): `do_exit` takes each exiting thread
/// out of it right after `exit_signals`.
#[inline(always)]
pub fn group_live(task: Task) -> Option<i32> {
    let signal: *const u8 = task_field(task, TASK_SIGNAL_OFFSET.load());
    (!signal.is_null()).then(|| field(signal, SIGNAL_LIVE_OFFSET.load()))
}

/// The pid of the thread of a process that execs while `de_thread` ends its other threads
/// (`signal->group_exec_task`), if one does.
#[inline(always)]
pub fn exec_thread_pid(signal: u64) -> Option<u32> {
    let offset = SIGNAL_GROUP_EXEC_TASK_OFFSET.load();
    if offset == 0 {
        return None;
    }
    let thread = read_at::<u64>(signal as *const u8, offset).filter(|&thread| thread != 0)?;
    read_at::<u32>(thread as *const u8, TASK_PID_OFFSET.load())
}

/// `task->flags`.
#[inline(always)]
pub fn task_flags(task: Task) -> u32 {
    task_field(task, TASK_FLAGS_OFFSET.load())
}

/// Whether `task` is exiting (`PF_EXITING`).
#[inline(always)]
pub fn is_exiting(task: Task) -> bool {
    task_flags(task) & PF_EXITING != 0
}

/// `task->pid` and `task->tgid`.
#[inline(always)]
pub fn task_pid_tgid(task: Task) -> (u32, u32) {
    (task_field(task, TASK_PID_OFFSET.load()), task_field(task, TASK_TGID_OFFSET.load()))
}

/// `task->group_leader`: trusted (or RCU-protected) like `task` itself.
#[inline(always)]
pub fn group_leader(task: Task) -> Task {
    task_field(task, TASK_GROUP_LEADER_OFFSET.load())
}

/// `task->real_parent`: the task that created it (or that it was reparented to), trusted as
/// far as the verifier lets a walked pointer be (under RCU, as tracing programs run).
#[inline(always)]
pub fn real_parent(task: Task) -> Task {
    task_field(task, TASK_REAL_PARENT_OFFSET.load())
}

/// `task->comm`, NUL-padded (the kernel keeps the bytes after the name zero).
#[inline(always)]
pub fn task_comm(task: Task) -> [u8; COMM_LEN] {
    // Two 8-byte loads: a byte array would be read a byte at a time.
    let words: [u64; COMM_LEN / 8] = task_field(task, TASK_COMM_OFFSET.load());
    // SAFETY: [u64; 2] and [u8; 16] have the same size, and every bit pattern is valid for both.
    unsafe { core::mem::transmute::<[u64; COMM_LEN / 8], [u8; COMM_LEN]>(words) }
}

/// The name (`comm`) of `task`'s process: its group leader's.
#[inline(always)]
pub fn process_comm(task: Task) -> [u8; COMM_LEN] {
    task_comm(group_leader(task))
}

/// The namespaces of `task` whose teardowns exitprof joins to its exit (0 where unknown).
#[derive(Clone, Copy)]
pub struct Namespaces {
    /// `task->nsproxy->ipc_ns`.
    pub ipc: u64,
    /// `task->nsproxy->net_ns`.
    pub net: u64,
    /// `task->real_cred->user_ns`: the user namespace its credentials belong to.
    pub user: u64,
}

/// The namespaces `task` belongs to.
#[inline(always)]
pub fn namespaces(task: Task) -> Namespaces {
    let nsproxy: *const u8 = task_field(task, TASK_NSPROXY_OFFSET.load());
    let (ipc, net) = if nsproxy.is_null() {
        (0, 0)
    } else {
        (field(nsproxy, NSPROXY_IPC_NS_OFFSET.load()), field(nsproxy, NSPROXY_NET_NS_OFFSET.load()))
    };
    let cred: *const u8 = task_field(task, TASK_REAL_CRED_OFFSET.load());
    let user = if cred.is_null() { 0 } else { field(cred, CRED_USER_NS_OFFSET.load()) };
    Namespaces { ipc, net, user }
}
