//! Where exits compute: a perf-event program on the software CPU clock of every CPU takes the
//! kernel stack of the task it interrupts, when that task is inside a followed exit (or is the
//! kworker of a namespace teardown, `crate::teardown`). Userspace joins each sample to its exit's
//! record and counts its stack under the stage the exit was in.

use aya_ebpf::{
    EbpfContext as _, helpers::bpf_get_smp_processor_id, helpers::generated::bpf_get_stack,
    macros::perf_event, programs::PerfEventContext,
};
use exitprof_common::{
    counters,
    stack::{STACK_DEPTH, STACK_ON_CPU, StackRecord},
};

use crate::{
    exit_state::exit_state,
    helpers::now_ns,
    maps::{STACKS, STACKS_WAKEUP_BYTES, count, wakeup_flag},
    task_storage::current_task,
    teardown,
};

/// A tick of the sampling clock on a CPU.
#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    let Some(state) = exit_state(current_task()) else {
        teardown::sampled(&ctx);
        return 0;
    };
    if state.record.n_hits == 0 {
        return 0;
    }
    let record = &state.record;
    let start_ns = record.hits[0].ts_ns;
    send_sample(
        &ctx,
        Sampled { kind: STACK_ON_CPU, pid: record.pid, start_ns, n_hits: record.n_hits },
    );
    0
}

/// Whose sample it is, as its record names it.
pub struct Sampled {
    /// `STACK_ON_CPU` or `STACK_TEARDOWN_ON_CPU`.
    pub kind: u32,
    pub pid: u32,
    /// The exit's, or the teardown run's, start.
    pub start_ns: u64,
    /// Hits the exit's record holds (0 for a teardown).
    pub n_hits: u32,
}

/// Sends the kernel stack the sampling clock interrupted.
#[inline(always)]
pub fn send_sample(ctx: &PerfEventContext, sampled: Sampled) {
    let Some(mut entry) = STACKS.reserve::<StackRecord>(0) else {
        count(counters::SAMPLES_LOST);
        return;
    };
    let sample = entry.as_mut_ptr();
    // SAFETY: `sample` is the reserved entry, written field by field before it is submitted;
    // the stack buffer is its own array, of the size given.
    unsafe {
        (*sample).kind = sampled.kind;
        (*sample).pid = sampled.pid;
        (*sample).exit_start_ns = sampled.start_ns;
        (*sample).ts_ns = now_ns();
        (*sample).ns = 0;
        (*sample).n_hits = sampled.n_hits;
        (*sample).cpu = bpf_get_smp_processor_id();
        (*sample).pad = 0;
        let bytes = bpf_get_stack(
            ctx.as_ptr(),
            (*sample).stack.as_mut_ptr().cast(),
            (STACK_DEPTH * 8) as u32,
            0,
        );
        (*sample).stack_len = if bytes > 0 { (bytes / 8) as u32 } else { 0 };
    }
    entry.submit(wakeup_flag(&STACKS, &STACKS_WAKEUP_BYTES));
    count(counters::SAMPLES);
}
