//! The paths of the cgroups made and removed while exitprof runs, sent to userspace, which
//! names the exits of each cgroup after its path even when it is gone by the time they are read.

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_RB_NO_WAKEUP,
    helpers::bpf_probe_read_kernel_str_bytes,
    macros::{map, tracepoint},
    maps::RingBuf,
    programs::TracePointContext,
};
use exitprof_common::{
    cgroup::{
        CGROUP_MADE, CGROUP_REMOVED, CgroupRecord, TP_ID_OFFSET, TP_PATH_OFFSET, TP_ROOT_OFFSET,
    },
    counters,
};

use crate::maps::count;

/// Cgroups made and removed, to userspace (rare: read on its beat, never woken for).
#[map]
pub static CGROUPS: RingBuf = RingBuf::with_byte_size(1024 * 1024, 0);

#[tracepoint]
pub fn cgroup_mkdir(ctx: TracePointContext) -> u32 {
    send(&ctx, CGROUP_MADE);
    0
}

#[tracepoint]
pub fn cgroup_rmdir(ctx: TracePointContext) -> u32 {
    send(&ctx, CGROUP_REMOVED);
    0
}

#[inline(always)]
fn send(ctx: &TracePointContext, event: u32) {
    // SAFETY: the fields' offsets in both events' format, which userspace checked.
    let (root, id, path_loc) = unsafe {
        (
            ctx.read_at::<i32>(TP_ROOT_OFFSET),
            ctx.read_at::<u64>(TP_ID_OFFSET),
            ctx.read_at::<u32>(TP_PATH_OFFSET),
        )
    };
    // Hierarchy 0 is the v2 one, whose ids exit records carry.
    let (Ok(0), Ok(id), Ok(path_loc)) = (root, id, path_loc) else { return };
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
        let path = ctx.as_ptr().cast::<u8>().wrapping_add((path_loc & 0xffff) as usize);
        if bpf_probe_read_kernel_str_bytes(path, &mut (*record).path).is_err() {
            (*record).path[0] = 0;
        }
    }
    entry.submit(u64::from(BPF_RB_NO_WAKEUP));
}
