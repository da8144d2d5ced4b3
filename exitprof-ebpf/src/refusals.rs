//! Exits of the target that could not be recorded: each is counted lost once, at the first
//! point that refuses it, and remembered until its task switches out for good (or, where that
//! went unseen, until it is freed), so that no later point of the same exit opens a record for
//! it (which would be recorded *and* lost) or counts it again.

use aya_ebpf::{bindings::BPF_NOEXIST, macros::map, maps::HashMap};
use exitprof_common::counters;

use crate::{
    free_watch::{unwatch, watch},
    helpers::{EEXIST, current_pid, current_pid_tgid},
    maps::count,
};

/// Refused exits, by their task's address: the refused task's pid. An address names a task only
/// while it lives, and the end and the free that forget a refusal could both go unseen, so the
/// pid tells a refusal of this exit from one an earlier task at the same address left behind
/// (two live tasks never share a pid; a dead one's pid and address reused together is beyond a
/// run's reach). Refusals are rare (the slots are full, or a task's following cannot be decided)
/// and last only while the exit does; many times the exits that can be in progress at once fit.
#[map]
static EXIT_REFUSED: HashMap<u64, u32> = HashMap::with_max_entries(16384, 0);

/// The exit of the current task, at `address`, cannot be recorded, for the reason `cause`
/// counts.
#[inline(always)]
pub fn refuse(address: u64, cause: u32) {
    match EXIT_REFUSED.insert(address, current_pid(), u64::from(BPF_NOEXIST)) {
        Ok(()) => {
            // Its free forgets it (`sched_process_free`).
            watch(address);
            count(cause);
        }
        // Counted when it was first refused ([`was_refused`] clears earlier tasks' refusals).
        Err(e) if e == -EEXIST => {}
        Err(_) => {
            count(cause);
            count(counters::REFUSALS_FORGOTTEN);
        }
    }
}

/// Whether the exit of the current task, at `address`, was refused (and counted) already. A
/// refusal left at the address by an earlier task is forgotten, and counted under
/// `STALE_REFUSALS`: believed, it would hide this exit from both the records and the losses.
///
/// A task's pid changes once in one case, as the slots know (`crate::exit_state::exit_slot`): a
/// thread-group leader that exits because another thread execs takes that thread's pid
/// (`de_thread`'s `exchange_tids`) before its last points, refused by its own pid, the group's
/// tgid. So a refusal by the current tgid is this exit's too.
#[inline(always)]
pub fn was_refused(address: u64) -> bool {
    // SAFETY: the value is copied out at once.
    let Some(refused) = (unsafe { EXIT_REFUSED.get(address) }).copied() else { return false };
    let (pid, tgid) = current_pid_tgid();
    if refused == pid || refused == tgid {
        return true;
    }
    if forget(address) {
        unwatch(address);
        count(counters::STALE_REFUSALS);
    }
    false
}

/// The task at `address` switched out for good, or is freed: its refusal, if it had one, is
/// forgotten. Whether it had one.
#[inline(always)]
pub fn forget(address: u64) -> bool {
    EXIT_REFUSED.remove(address).is_ok()
}
