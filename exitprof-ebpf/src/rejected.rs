//! A program no verifier accepts, in the default object only: loaded (never attached) where a
//! test asks for a default object the kernel rejects (`EXITPROF_TEST_REJECT_DEFAULT`), so that
//! the fallback to the compat object is seen taken for real.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

/// Loops for ever: the verifier finds the same state at the loop's head each time round
/// ("infinite loop detected"), as it has since it allowed bounded loops (5.3).
#[btf_tracepoint(function = "sched_switch")]
pub fn rejected_by_the_verifier(_ctx: BtfTracePointContext) -> i32 {
    let spin = 0u32;
    loop {
        // SAFETY: a read of a local; volatile, so that the loop is kept as written.
        unsafe { core::ptr::read_volatile(&raw const spin) };
    }
}
