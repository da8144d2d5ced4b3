//! exitprof's eBPF programs, one module per probe family.
#![no_std]
#![no_main]
// Atomic read-modify-write, which the BPF target's `core::sync::atomic` does not offer.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for atomic adds (see free_watch)")]
#![expect(
    clippy::inline_always,
    reason = "the helpers of the per-exit and per-switch paths are inlined into each program \
              whatever LLVM's cost model says, rather than called as BPF subprograms"
)]
#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program attributes hand each program its context by value"
)]

mod cgroups;
mod deferred;
mod exit_path;
mod exit_state;
mod follow;
mod free_watch;
mod helpers;
mod maps;
mod marks;
mod owners;
mod refusals;
#[cfg(not(feature = "compat"))]
mod rejected;
mod sampler;
mod sched;
mod task_storage;
mod teardown;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier rejects any program in which a panic is reachable.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
