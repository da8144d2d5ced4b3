//! Small helpers every probe family uses.

use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel,
};

use crate::maps::{NSPROXY_IPC_NS_OFFSET, TASK_NSPROXY_OFFSET};

/// CLOCK_MONOTONIC now, in ns: the clock of every timestamp exitprof records.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: a helper without arguments or side effects.
    unsafe { bpf_ktime_get_ns() }
}

/// Thread id of the current task.
#[inline(always)]
pub fn current_pid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// Reads a `T` at `base + offset` in kernel memory; `None` when the read faults.
#[inline(always)]
pub fn read_at<T>(base: *const u8, offset: u32) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly on a bad one.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize).cast::<T>()) }.ok()
}

/// `current->nsproxy->ipc_ns`: the IPC namespace the current task belongs to (0 if unknown).
#[inline(always)]
pub fn current_ipc_ns() -> u64 {
    // SAFETY: a helper without arguments or side effects.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    read_at::<u64>(task, TASK_NSPROXY_OFFSET.load())
        .and_then(|nsproxy| read_at::<u64>(nsproxy as *const u8, NSPROXY_IPC_NS_OFFSET.load()))
        .unwrap_or(0)
}
