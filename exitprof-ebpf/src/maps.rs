//! Maps and load-time settings shared by every program. Userspace finds the ones it reads or
//! sets by the names `exitprof_common::names` gives them, which are these statics' names.

use aya_ebpf::{
    Global,
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf, StackTrace},
};
use exitprof_common::{
    counters,
    record::ExitRecord,
    sizes::{COMM_LEN, TRACKED_PROCESSES},
};

/// Exits in progress, keyed by thread id.
#[map]
pub static EXITING: HashMap<u32, ExitRecord> = HashMap::with_max_entries(8_192, 0);

/// A zeroed record, the initial value of every new `EXITING` entry (a record is too large for the
/// 512-byte eBPF stack).
#[map]
pub static EMPTY_RECORD: Array<ExitRecord> = Array::with_max_entries(1, 0);

/// Per CPU: the thread id of the exiting task running there, when exitprof follows its exit
/// (0: none). Lets `sched_switch`, which runs on every context switch of the machine, skip its
/// map lookups for every other task.
#[map]
pub static ON_CPU_EXIT: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Followed exits whose task is switched out right now (slot 0; signed, so that a count that
/// went wrong shows as not positive and only costs lookups).
#[map]
pub static OFF_CPU_EXITS: Array<i64> = Array::with_max_entries(1, 0);

/// Kernel stacks where exiting tasks blocked, by id (the longest block of each exit names
/// one).
#[map]
pub static BLOCK_STACKS: StackTrace = StackTrace::with_max_entries(4096, 0);

/// Take the stack of each block in `BLOCK_STACKS` (non-zero: on).
#[unsafe(no_mangle)]
pub static BLOCK_STACKS_ON: Global<u32> = Global::new(1);

/// Thread-group ids whose exits are recorded (unless `TRACE_ALL` is set); the workload's, then
/// its descendants' as they fork.
#[map]
pub static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(TRACKED_PROCESSES, 0);

/// Finished exit records, to userspace. Resized by userspace at load time.
#[map]
pub static EXITS: RingBuf = RingBuf::with_byte_size(16 * 1024 * 1024, 0);

/// Unread bytes in a ring buffer above which a new record wakes userspace (the exit ring
/// buffer's size / 4, set at load). Below it records wait for userspace's periodic read: a
/// wakeup per exit would put exitprof on a CPU for every exit of the storm it measures.
#[unsafe(no_mangle)]
pub static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// `BPF_RB_NO_WAKEUP` and `BPF_RB_FORCE_WAKEUP` (include/uapi/linux/bpf.h).
const BPF_RB_NO_WAKEUP: u64 = 1;
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

/// Loss counters, indexed by `exitprof_common::counters`.
#[map]
pub static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(counters::COUNT, 0);

/// Record every exit on the machine, not only tracked thread groups (non-zero: on).
#[unsafe(no_mangle)]
pub static TRACE_ALL: Global<u32> = Global::new(0);

/// Deferred-work records, to userspace.
#[map]
pub static DEFERRED: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

/// Record the exits of tasks with this name (comm, NUL-padded; all zero: off).
#[unsafe(no_mangle)]
pub static TARGET_COMM: Global<[u8; COMM_LEN]> = Global::new([0; COMM_LEN]);

// Kernel structure offsets, from the running kernel's BTF (Rust eBPF has no CO-RE relocations).

/// `offsetof(struct task_struct, pid)`.
#[unsafe(no_mangle)]
pub static TASK_PID_OFFSET: Global<u32> = Global::new(0);

/// `offsetof(struct task_struct, tgid)`.
#[unsafe(no_mangle)]
pub static TASK_TGID_OFFSET: Global<u32> = Global::new(0);

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

/// Counts one loss of the given kind.
#[inline(always)]
pub fn count_loss(counter: u32) {
    if let Some(slot) = LOSSES.get_ptr_mut(counter) {
        // SAFETY: a per-CPU slot is only touched by programs running on this CPU, which do not
        // preempt each other.
        unsafe { *slot += 1 };
    }
}
