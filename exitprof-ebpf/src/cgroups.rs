//! The paths of the cgroups made and removed while exitprof runs, sent to userspace, which
//! names the exits of each cgroup after its path even when it is gone by the time they are read.
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

use crate::{helpers::cgroup_hierarchy_and_id, maps::count};

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
