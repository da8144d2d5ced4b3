//! Maps and load-time settings shared by every program. Userspace finds the ones it reads or
//! sets by the names `exitprof_common::names` gives them, which are these statics' names.

use aya_ebpf::{
    Global,
    macros::{btf_map, map},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use exitprof_common::{counters, sizes::COMM_LEN, task::TaskMark};

use crate::{exit_state::ExitState, task_storage::TaskStorage};

/// The marks of the tasks userspace follows (see `crate::follow`).
#[btf_map]
pub static TASKS: TaskStorage<TaskMark> = TaskStorage::new();

/// The state of every exit in progress, one slot each (`crate::exit_state`): nothing is
/// allocated, hashed or locked in the exit path. Sized by userspace at load, a power of two.
#[map]
pub static EXIT_SLOTS: Array<ExitState> = Array::with_max_entries(4096, 0);

/// The owner of each slot of `EXIT_SLOTS` (a task's address; 0: free). Sized as `EXIT_SLOTS`.
#[map]
pub static EXIT_OWNERS: Array<u64> = Array::with_max_entries(4096, 0);

/// `EXIT_SLOTS`' size less one: the mask that turns a pid into a slot index.
#[unsafe(no_mangle)]
pub static EXIT_SLOT_MASK: Global<u32> = Global::new(4095);

/// Tasks whose exits were recorded (one in `FREES_SAMPLED`) and which are not freed yet:
/// task -> pid, for the report of the free (`sched_process_free`). Sized by userspace at load.
#[map]
pub static FREES_AWAITED: HashMap<u64, u32> = HashMap::with_max_entries(4096, 0);

/// Finished exit records, to userspace. Resized by userspace at load time.
#[map]
pub static EXITS: RingBuf = RingBuf::with_byte_size(16 * 1024 * 1024, 0);

/// Deferred-work records, to userspace.
#[map]
pub static DEFERRED: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

/// On-CPU samples of followed exits, to userspace.
#[map]
pub static SAMPLES: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

/// Unread bytes in a ring buffer above which a new record wakes userspace (the exit ring
/// buffer's size / 4, set at load). Below it records wait for userspace's periodic read: a
/// wakeup per exit would put exitprof on a CPU for every exit of the storm it measures.
#[unsafe(no_mangle)]
pub static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// `BPF_RB_NO_WAKEUP` and `BPF_RB_FORCE_WAKEUP` (include/uapi/linux/bpf.h).
pub const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
/// `BPF_RB_AVAIL_DATA`: unread bytes, for `bpf_ringbuf_query`.
const BPF_RB_AVAIL_DATA: u64 = 0;

/// The wakeup flag for a record about to be written to `ring`: wake userspace only when it has
/// fallen behind.
#[inline(always)]
pub fn wakeup_flag(ring: &RingBuf) -> u64 {
    if ring.query(BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// Counters, indexed by `exitprof_common::counters`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counters::COUNT, 0);

/// Settings userspace changes while the programs run: slot [`STOPPED`].
#[map]
pub static CONTROL: Array<u32> = Array::with_max_entries(1, 0);

/// `CONTROL` slot: non-zero once the target has ended; exits that start from then on are not
/// part of the run and are not opened, so that userspace can wait for those in progress.
pub const STOPPED: u32 = 0;

/// Record every exit on the machine, not only followed tasks (non-zero: on).
#[unsafe(no_mangle)]
pub static TRACE_ALL: Global<u32> = Global::new(0);

/// Record the exits of tasks with this name (comm, NUL-padded; all zero: off).
#[unsafe(no_mangle)]
pub static TARGET_COMM: Global<[u8; COMM_LEN]> = Global::new([0; COMM_LEN]);

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

/// Address of `free_ipc` (kallsyms): the work function that frees IPC namespaces.
#[unsafe(no_mangle)]
pub static FREE_IPC_ADDR: Global<u64> = Global::new(0);

/// Adds one to a counter.
#[inline(always)]
pub fn count(counter: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter) {
        // SAFETY: a per-CPU slot is only touched by programs running on this CPU, which do not
        // preempt each other.
        unsafe { *slot += 1 };
    }
}

/// Whether userspace has stopped the run: no new exit is opened.
#[inline(always)]
pub fn stopped() -> bool {
    CONTROL.get(STOPPED).is_some_and(|&stop| stop != 0)
}
