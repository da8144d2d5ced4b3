//! The paths of the cgroups made and removed while exitprof runs, sent to userspace, which
//! names the exits of each cgroup after its path even when it is gone by the time they are read;
//! and whether an exit is in the cgroup `--cgroup` names (or below it).
//!
//! BTF tracepoints, not the `cgroup:` trace events: those are attached through
//! `perf_event_open`, which Debian's and Ubuntu's kernels refuse without CAP_SYS_ADMIN at their
//! default `kernel.perf_event_paranoid` of 3, where CAP_BPF and CAP_PERFMON load these.

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP,
    helpers::bpf_probe_read_kernel_str_bytes,
    macros::{btf_tracepoint, map},
    maps::RingBuf,
    programs::BtfTracePointContext,
};
use exitprof_common::{
    cgroup::{CGROUP_MADE, CGROUP_REMOVED, CgroupRecord},
    counters,
};

use crate::{
    helpers::cgroup_hierarchy_and_id,
    maps::{TARGET_CGROUP, count},
};

/// Levels of the v2 hierarchy looked at for the target cgroup, from the root down: a container
/// under a pod under a slice is some 5 deep. A task deeper than this is looked at down to here:
/// a target cgroup that deep is not found.
const CGROUP_DEPTH: i32 = 16;

/// Whether exits are chosen by cgroup (`TARGET_CGROUP` is set).
#[inline(always)]
pub fn follows_by_cgroup() -> bool {
    TARGET_CGROUP.load() != 0
}

/// Whether the current task's cgroup of the v2 hierarchy is `TARGET_CGROUP` or below it: one of
/// its ancestors (itself included) is. The level is looked for rather than given by userspace,
/// which may see the hierarchy from a cgroup namespace, whose root is not the real one.
#[inline(always)]
pub fn in_target_cgroup(task: crate::task_storage::Task) -> bool {
    let target = TARGET_CGROUP.load();
    for level in 0..CGROUP_DEPTH {
        match ancestor_cgroup_id(task, level) {
            // Past the task's own level.
            0 => return false,
            id if id == target => return true,
            _ => {}
        }
    }
    false
}

/// The id of the current task's v2 cgroup's ancestor at `level` (the root's is 0); 0 past the
/// task's own level. The helper serves tracing programs since 5.14 (the default object needs
/// 5.17).
#[cfg(not(feature = "compat"))]
#[inline(always)]
fn ancestor_cgroup_id(_task: crate::task_storage::Task, level: i32) -> u64 {
    // SAFETY: a helper that reads the current task's cgroup.
    unsafe { aya_ebpf::helpers::generated::bpf_get_current_ancestor_cgroup_id(level) }
}

/// The same, read the way the helper does before 5.14: `task->cgroups->dfl_cgrp`, whose
/// `ancestor_ids[level]` (v4.x to v5.19) are its ancestors' ids.
#[cfg(feature = "compat")]
#[inline(always)]
fn ancestor_cgroup_id(task: crate::task_storage::Task, level: i32) -> u64 {
    crate::helpers::dfl_cgroup_ancestor_id(task, level)
}

/// Cgroups made and removed, to userspace (rare: read on its beat, never woken for).
#[map]
pub static CGROUPS: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

/// `cgroup_mkdir(struct cgroup *cgrp, const char *path)`.
#[btf_tracepoint]
pub fn cgroup_mkdir(ctx: BtfTracePointContext) -> i32 {
    send(&ctx, CGROUP_MADE);
    0
}

/// `cgroup_rmdir(struct cgroup *cgrp, const char *path)`.
#[btf_tracepoint]
pub fn cgroup_rmdir(ctx: BtfTracePointContext) -> i32 {
    send(&ctx, CGROUP_REMOVED);
    0
}

#[inline(always)]
fn send(ctx: &BtfTracePointContext, event: u32) {
    let cgroup: *const u8 = ctx.arg(0);
    let path: *const u8 = ctx.arg(1);
    // Hierarchy 0 is the v2 one, whose ids exit records carry.
    let (0, id) = cgroup_hierarchy_and_id(cgroup) else { return };
    let Some(mut entry) = CGROUPS.reserve::<CgroupRecord>(0) else {
        count(counters::CGROUP_NAMES_LOST);
        return;
    };
    let record = entry.as_mut_ptr();
    // SAFETY: the reserved entry is ours until submitted; its fields are written before then
    // (the path up to its NUL, where userspace stops reading).
    unsafe {
        (*record).id = id;
        (*record).event = event;
        (*record).reserved = 0;
        if bpf_probe_read_kernel_str_bytes(path, &mut (*record).path).is_err() {
            (*record).path[0] = 0;
        }
    }
    entry.submit(u64::from(BPF_RB_NO_WAKEUP));
}
