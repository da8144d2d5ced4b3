//! Which task frees are worth a look. `sched_process_free` fires for every task the machine
//! frees, and only three kinds need anything: a task that still holds an exit slot (its exit's
//! end was never seen), one whose free is awaited (`FREES_AWAITED`), and one whose exit was
//! refused (`crate::refusals`). Each of those is counted here under a hash of its task's
//! address, so that the free of any other task returns having read one word: neither the task
//! (cold by then, an RCU grace period after its exit) nor the maps. Tasks that share a hash only
//! cost each other that look. The same word tells the opening of an exit whether it may have
//! been refused already.

use aya_ebpf::{helpers::bpf_get_current_task, macros::map, maps::Array};

use crate::maps;

/// Counters, a power of two: 4 KiB, which every free reads, so that they stay in the cache;
/// many times the tasks watched at once (the exits in progress and the awaited frees).
const WATCHED: u32 = 512;

#[map]
static FREE_WATCH: Array<u64> = Array::with_max_entries(WATCHED, 0);

/// The current task's address (as [`crate::exit_state::key`] gives it), as a plain number that
/// can be hashed: the verifier allows no arithmetic on a task pointer.
#[inline(always)]
pub fn current_address() -> u64 {
    // SAFETY: a helper without arguments or side effects.
    unsafe { bpf_get_current_task() }
}

/// The counter of the task at `address`. Tasks are slab objects of several KiB: the bits above
/// the object size tell them apart.
#[inline(always)]
fn counter(address: u64) -> Option<*mut u64> {
    let index = ((address >> 10) ^ (address >> 22)) as u32 & (WATCHED - 1);
    FREE_WATCH.get_ptr_mut(index)
}

/// Adds `n` to the counter of the task at `address`, atomically: the programs of every CPU
/// share it.
#[inline(always)]
fn add(address: u64, n: u64) {
    if let Some(count) = counter(address) {
        // SAFETY: an array slot, only ever changed atomically.
        unsafe { maps::add(count, n) };
    }
}

/// The task at `address` took an exit slot, its free became awaited, or its exit was refused.
#[inline(always)]
pub fn watch(address: u64) {
    add(address, 1);
}

/// The task at `address` gave up its slot, its awaited free was seen, or its refusal forgotten.
#[inline(always)]
pub fn unwatch(address: u64) {
    add(address, u64::MAX);
}

/// Whether the free of the task at `address` may have something to do.
#[inline(always)]
pub fn is_watched(address: u64) -> bool {
    // SAFETY: an array slot; an aligned 8-byte load is atomic (the BPF target selects no atomic
    // load, but its loads are single instructions).
    counter(address).is_some_and(|count| unsafe { core::ptr::read_volatile(count) } != 0)
}
