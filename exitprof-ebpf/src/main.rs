//! exitprof's eBPF programs, one module per probe family.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "atomic_xadd: the BPF target's only atomic add")]

mod deferred;
mod exit_path;
mod exit_state;
mod helpers;
mod maps;
mod sched;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier rejects any program in which a panic is reachable.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
