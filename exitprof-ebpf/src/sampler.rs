//! Where exits compute: a perf-event program on the software CPU clock of every CPU takes the
//! kernel stack of the task it interrupts, when that task is inside a followed exit. Userspace
//! joins each sample to its exit's record and counts its stack under the stage the exit was in.

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
};

/// A tick of the sampling clock on a CPU.
#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    let Some(state) = exit_state(current_task()) else { return 0 };
    if state.record.n_hits == 0 {
        return 0;
    }
    let Some(mut entry) = STACKS.reserve::<StackRecord>(0) else {
        count(counters::SAMPLES_LOST);
        return 0;
    };
    let sample = entry.as_mut_ptr();
    // SAFETY: `sample` is the reserved entry, written field by field before it is submitted;
    // the stack buffer is its own array, of the size given.
    unsafe {
        (*sample).kind = STACK_ON_CPU;
        (*sample).pid = state.record.pid;
        (*sample).exit_start_ns = state.record.hits[0].ts_ns;
        (*sample).ts_ns = now_ns();
        (*sample).ns = 0;
        (*sample).n_hits = state.record.n_hits;
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
    0
}
