//! Exits of the target that could not be recorded: each is counted lost once, at the first
//! point that refuses it, and remembered until its task is freed, so that no later point of the
//! same exit opens a record for it (which would be recorded *and* lost) or counts it again.

use aya_ebpf::{bindings::BPF_NOEXIST, macros::map, maps::HashMap};
use exitprof_common::counters;

use crate::{free_watch::watch, helpers::EEXIST, maps::count};

/// Refused exits, by their task's address: the counter they were counted lost under. Refusals
/// are rare (the slots are full, or a task's following cannot be decided) and last only while
/// the exit does; many times the exits that can be in progress at once fit.
#[map]
static EXIT_REFUSED: HashMap<u64, u32> = HashMap::with_max_entries(16384, 0);

/// The exit of the task at `address` cannot be recorded, for the reason `cause` counts.
#[inline(always)]
pub fn refuse(address: u64, cause: u32) {
    match EXIT_REFUSED.insert(address, cause, u64::from(BPF_NOEXIST)) {
        Ok(()) => {
            // Its free forgets it (`sched_process_free`).
            watch(address);
            count(cause);
        }
        // Counted when it was first refused.
        Err(e) if e == -EEXIST => {}
        Err(_) => {
            count(cause);
            count(counters::REFUSALS_FORGOTTEN);
        }
    }
}

/// Whether the exit of the task at `address` was refused (and counted) already.
#[inline(always)]
pub fn was_refused(address: u64) -> bool {
    // SAFETY: the value is not read, only whether there is one.
    unsafe { EXIT_REFUSED.get(address) }.is_some()
}

/// The task at `address` is freed: its refusal, if it had one, is forgotten. Whether it had one.
#[inline(always)]
pub fn forget(address: u64) -> bool {
    EXIT_REFUSED.remove(address).is_ok()
}
