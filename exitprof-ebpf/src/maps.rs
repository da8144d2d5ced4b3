//! Maps and load-time settings shared by every program. Userspace finds the ones it reads or
//! sets by the names `exitprof_common::names` gives them, which are these statics' names.

use core::intrinsics::{AtomicOrdering::Relaxed, atomic_xadd};

use aya_ebpf::{
    Global,
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use exitprof_common::{counters, deferred::AwaitedFree, sizes::COMM_LEN};

use crate::exit_state::ExitState;

/// The state of every exit in progress, one slot each (`crate::exit_state`): nothing is
/// allocated, hashed or locked in the exit path. Sized by userspace at load, a power of two.
#[map]
pub static EXIT_SLOTS: Array<ExitState> = Array::with_max_entries(4096, 0);

/// The owner of each slot of `EXIT_SLOTS` (a task's address; 0: free). Sized as `EXIT_SLOTS`.
#[cfg(not(feature = "compat"))]
#[map]
pub static EXIT_OWNERS: Array<u64> = Array::with_max_entries(4096, 0);

/// The owners of the slots of `EXIT_SLOTS` held, by slot (kernels before 5.12 have no BPF
/// `cmpxchg`: a slot is claimed by inserting its owner with `BPF_NOEXIST`, which is atomic).
#[cfg(feature = "compat")]
#[map]
pub static EXIT_OWNERS: HashMap<u32, u64> = HashMap::with_max_entries(4096, 0);

/// `EXIT_SLOTS`' size less one: the mask that turns a pid into a slot index.
#[unsafe(no_mangle)]
pub static EXIT_SLOT_MASK: Global<u32> = Global::new(4095);

/// Tasks whose exits were recorded and which are not freed yet, whose free is reported
/// (`sched_process_free`): one in `FREES_SAMPLED`, and those whose network namespace is looked
/// at again then. Sized by userspace at load.
#[map]
pub static FREES_AWAITED: HashMap<u64, AwaitedFree> = HashMap::with_max_entries(4096, 0);

/// Non-zero where the frees of recorded exits are reported (a run's deferred work); zero where
/// nothing would read their records (`serve`), and none is awaited.
#[unsafe(no_mangle)]
pub static AWAIT_FREES: Global<u32> = Global::new(0);

/// Finished exit records, to userspace. Resized by userspace at load time.
#[map]
pub static EXITS: RingBuf = RingBuf::with_byte_size(16 * 1024 * 1024, 0);

/// Deferred-work records, to userspace.
#[map]
pub static DEFERRED: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

/// Kernel stacks of followed exits (on-CPU samples, blocks), to userspace.
#[map]
pub static STACKS: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

/// Unread bytes in each ring buffer above which a new record wakes userspace (a quarter of the
/// ring buffer's size, set at load). Below it records wait for userspace's periodic read: a
/// wakeup per exit would put exitprof on a CPU for every exit of the storm it measures.
#[unsafe(no_mangle)]
pub static EXITS_WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);
#[unsafe(no_mangle)]
pub static DEFERRED_WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);
#[unsafe(no_mangle)]
pub static STACKS_WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// `BPF_RB_NO_WAKEUP` and `BPF_RB_FORCE_WAKEUP` (include/uapi/linux/bpf.h).
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
/// `BPF_RB_AVAIL_DATA`: unread bytes, for `bpf_ringbuf_query`.
const BPF_RB_AVAIL_DATA: u64 = 0;

/// The wakeup flag for a record about to be written to `ring`: wake userspace only when it has
/// fallen behind by `threshold` bytes (one of the `*_WAKEUP_BYTES`).
#[inline(always)]
pub fn wakeup_flag(ring: &RingBuf, threshold: &Global<u64>) -> u64 {
    if ring.query(BPF_RB_AVAIL_DATA) >= threshold.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// Counters, indexed by `exitprof_common::counters`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counters::COUNT, 0);

/// Settings userspace changes while the programs run: slots [`STOPPED`] and [`EPOCH`].
#[map]
pub static CONTROL: Array<u32> = Array::with_max_entries(2, 0);

/// `CONTROL` slot: non-zero once the target has ended; exits that start from then on are not
/// part of the run and are not opened, so that userspace can wait for those in progress.
pub const STOPPED: u32 = 0;

/// `CONTROL` slot: the number of the run in progress. Each exit carries the one it opened in,
/// so that an exit that outlives its run (stuck, say) is neither recorded nor counted in the
/// next (`compare` runs one target after another on one loaded object).
const EPOCH: u32 = 1;

/// Record every exit on the machine, not only followed tasks (non-zero: on).
#[unsafe(no_mangle)]
pub static TRACE_ALL: Global<u32> = Global::new(0);

/// Record the exits of tasks with this name (comm, NUL-padded; all zero: off).
#[unsafe(no_mangle)]
pub static TARGET_COMM: Global<[u8; COMM_LEN]> = Global::new([0; COMM_LEN]);

/// Record the exits of tasks in the cgroup of the v2 hierarchy of this id, or below it (0: off).
#[unsafe(no_mangle)]
pub static TARGET_CGROUP: Global<u64> = Global::new(0);

/// `offsetof(struct task_struct, cgroups)`, `offsetof(struct css_set, dfl_cgrp)`,
/// `offsetof(struct cgroup, level)` and `offsetof(struct cgroup, ancestor_ids)`: the compat
/// object finds a task's v2 cgroup's ancestors without `bpf_get_current_ancestor_cgroup_id`,
/// which tracing programs have since 5.14.
#[cfg(feature = "compat")]
#[unsafe(no_mangle)]
pub static TASK_CGROUPS_OFFSET: Global<u32> = Global::new(0);
#[cfg(feature = "compat")]
#[unsafe(no_mangle)]
pub static CSS_SET_DFL_CGRP_OFFSET: Global<u32> = Global::new(0);
#[cfg(feature = "compat")]
#[unsafe(no_mangle)]
pub static CGROUP_LEVEL_OFFSET: Global<u32> = Global::new(0);
#[cfg(feature = "compat")]
#[unsafe(no_mangle)]
pub static CGROUP_ANCESTOR_IDS_OFFSET: Global<u32> = Global::new(0);

/// Kernel stacks walked per second and CPU, at most, where exits block (0: none). A walk costs
/// microseconds; the budget keeps that bounded however many exits block.
#[unsafe(no_mangle)]
pub static BLOCK_WALKS_PER_SEC: Global<u32> = Global::new(0);

/// The device and inode of exitprof's PID namespace (`/proc/self/ns/pid`); both 0 in the
/// initial namespace, where the kernel's pids are the ones exitprof sees.
#[unsafe(no_mangle)]
pub static PIDNS_DEV: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
pub static PIDNS_INO: Global<u64> = Global::new(0);

/// Non-zero where `sched_process_exit` carries `group_dead` (v6.16+).
#[unsafe(no_mangle)]
pub static EXIT_TP_GROUP_DEAD: Global<u32> = Global::new(0);

/// The number of the `exit_group` system call on this architecture.
#[unsafe(no_mangle)]
pub static SYS_EXIT_GROUP_NR: Global<u32> = Global::new(0);

// Kernel structure offsets, from the running kernel's BTF (Rust eBPF has no CO-RE relocations).
// They live in read-only data, which the verifier reads as constants: loads at these offsets
// from a trusted task pointer are checked against the kernel's BTF like any field access.

/// `offsetof(struct task_struct, pid)`.
#[unsafe(no_mangle)]
pub static TASK_PID_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, tgid)`.
#[unsafe(no_mangle)]
pub static TASK_TGID_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, flags)`.
#[unsafe(no_mangle)]
pub static TASK_FLAGS_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, group_leader)`.
#[unsafe(no_mangle)]
pub static TASK_GROUP_LEADER_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, real_parent)`.
#[unsafe(no_mangle)]
pub static TASK_REAL_PARENT_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, signal)`.
#[unsafe(no_mangle)]
pub static TASK_SIGNAL_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct signal_struct, live)`.
#[unsafe(no_mangle)]
pub static SIGNAL_LIVE_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct signal_struct, group_exec_task)` (v5.16+; 0: the kernel has none): the
/// thread that execs while `de_thread` ends the others.
#[unsafe(no_mangle)]
pub static SIGNAL_GROUP_EXEC_TASK_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, __state)` (`state` before 5.14): the compat object reads the
/// state of a task that switches out where `sched_switch` has no `prev_state` (before 5.18).
#[cfg(feature = "compat")]
#[unsafe(no_mangle)]
pub static TASK_STATE_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, start_boottime)`: which processes were created since the
/// target's marks were set (`crate::follow`), and the compat object checks a process's mark
/// against its start time.
#[unsafe(no_mangle)]
pub static TASK_START_BOOTTIME_OFFSET: Global<u32> = Global::new(0);

/// The nanoseconds of a clock tick (`USER_HZ`), as `/proc/PID/stat` counts start times.
#[cfg(feature = "compat")]
#[unsafe(no_mangle)]
pub static NS_PER_TICK: Global<u64> = Global::new(10_000_000);

/// `offsetof(struct task_struct, comm)`.
#[unsafe(no_mangle)]
pub static TASK_COMM_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, nsproxy)`.
#[unsafe(no_mangle)]
pub static TASK_NSPROXY_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct nsproxy, ipc_ns)`.
#[unsafe(no_mangle)]
pub static NSPROXY_IPC_NS_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct work_struct, func)`.
#[unsafe(no_mangle)]
pub static WORK_FUNC_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct cgroup, root)`, `offsetof(struct cgroup_root, hierarchy_id)`,
/// `offsetof(struct cgroup, kn)` and `offsetof(struct kernfs_node, id)`: a cgroup's hierarchy
/// and id (`cgroup_id()`, since v5.5 its kernfs node's id).
#[unsafe(no_mangle)]
pub static CGROUP_ROOT_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static CGROUP_ROOT_HIERARCHY_ID_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static CGROUP_KN_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static KERNFS_NODE_ID_OFFSET: Global<u32> = Global::new(0);

/// Address of `free_ipc` (kallsyms): the work function that frees IPC namespaces.
#[unsafe(no_mangle)]
pub static FREE_IPC_ADDR: Global<u64> = Global::new(0);

/// `offsetof(struct nsproxy, net_ns)`.
#[unsafe(no_mangle)]
pub static NSPROXY_NET_NS_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, real_cred)`.
#[unsafe(no_mangle)]
pub static TASK_REAL_CRED_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct cred, user_ns)`.
#[unsafe(no_mangle)]
pub static CRED_USER_NS_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct net, list)`: a network namespace's place in `net_namespace_list`.
#[unsafe(no_mangle)]
pub static NET_LIST_OFFSET: Global<u32> = Global::new(0);

/// Where `struct net` keeps its reference count: `ns.__ns_ref` (v6.18+), `ns.count` (v5.13+),
/// `count` before.
#[unsafe(no_mangle)]
pub static NET_REFS_OFFSET: Global<u32> = Global::new(0);

/// Where `struct net` keeps its inode number (`ns.inum`).
#[unsafe(no_mangle)]
pub static NET_INUM_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct net, exit_list)`: its place in `cleanup_net`'s `net_exit_list`.
#[unsafe(no_mangle)]
pub static NET_EXIT_LIST_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct user_namespace, work)`: the work item `__put_user_ns` schedules.
#[unsafe(no_mangle)]
pub static USER_NS_WORK_OFFSET: Global<u32> = Global::new(0);

/// Where `struct user_namespace` keeps its inode number (`ns.inum`).
#[unsafe(no_mangle)]
pub static USER_NS_INUM_OFFSET: Global<u32> = Global::new(0);

/// Address of `cleanup_net` (kallsyms): the work function that tears network namespaces down.
#[unsafe(no_mangle)]
pub static CLEANUP_NET_ADDR: Global<u64> = Global::new(0);

/// Address of `free_user_ns` (kallsyms): the work function that frees a user namespace.
#[unsafe(no_mangle)]
pub static FREE_USER_NS_ADDR: Global<u64> = Global::new(0);

/// The work functions whose runs `workqueue_execute_start` and `_end` time
/// (`exitprof_common::deferred::WORK_TIMED_*`): those not probed themselves.
#[unsafe(no_mangle)]
pub static WORK_TIMED: Global<u32> = Global::new(0);

/// Whether the runs of the work function `bit` names are timed by the workqueue tracepoints.
#[inline(always)]
pub fn work_timed(bit: u32) -> bool {
    WORK_TIMED.load() & bit != 0
}

/// Adds one to a counter.
#[inline(always)]
pub fn count(counter: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter) {
        // SAFETY: a per-CPU slot, changed only atomically: programs on one CPU can interleave
        // (a preemptible fentry program, `sched_process_free` in softirq), and a lost increment
        // would change the accounting.
        unsafe { add(slot, 1) };
    }
}

/// Adds `n` to the counter at `counter` atomically (`AtomicU64` has no read-modify-write
/// operations on the BPF target, whose ISA has an atomic add all the same).
///
/// # Safety
/// `counter` points into a map value, changed only atomically.
#[inline(always)]
pub unsafe fn add(counter: *mut u64, n: u64) {
    // SAFETY: as the caller promises.
    unsafe { atomic_xadd::<u64, u64, { Relaxed }>(counter, n) };
}

/// Whether userspace has stopped the run: no new exit is opened.
#[inline(always)]
pub fn stopped() -> bool {
    CONTROL.get(STOPPED).is_some_and(|&stop| stop != 0)
}

/// The number of the run in progress.
#[inline(always)]
pub fn epoch() -> u32 {
    CONTROL.get(EPOCH).copied().unwrap_or(0)
}
