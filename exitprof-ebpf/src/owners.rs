//! Who holds each exit slot (`crate::exit_state`): a task's address, 0 for a free slot. A slot
//! is claimed atomically, so that two exits reaching for one slot from two CPUs at the same
//! instant never both take it: by a compare-and-exchange of an array slot, or in the compat
//! object (no BPF `cmpxchg` before 5.12) by an insert into a hash with `BPF_NOEXIST`.

#[cfg(not(feature = "compat"))]
pub use in_array::{claim, clear, owner};
#[cfg(feature = "compat")]
pub use in_hash::{claim, clear, owner};

#[cfg(not(feature = "compat"))]
mod in_array {
    use core::intrinsics::{AtomicOrdering::Relaxed, atomic_cxchg};

    use crate::maps::EXIT_OWNERS;

    /// The owner of slot `index` (0: free).
    #[inline(always)]
    pub fn owner(index: u32) -> u64 {
        // SAFETY: an array slot; an aligned 8-byte load is atomic.
        EXIT_OWNERS.get_ptr(index).map_or(0, |owner| unsafe { core::ptr::read_volatile(owner) })
    }

    /// Claims the free slot `index` for `key`; false when another exit took it first.
    #[inline(always)]
    pub fn claim(index: u32, key: u64) -> bool {
        EXIT_OWNERS.get_ptr_mut(index).is_some_and(|owner| {
            // SAFETY: an array slot, claimed only by this exchange.
            unsafe { atomic_cxchg::<u64, { Relaxed }, { Relaxed }>(owner, 0, key) }.1
        })
    }

    /// Frees slot `index`; whether it was there to free.
    #[inline(always)]
    pub fn clear(index: u32) -> bool {
        EXIT_OWNERS.get_ptr_mut(index).is_some_and(|owner| {
            // SAFETY: the slot's owner, which only its holder clears.
            unsafe { core::ptr::write_volatile(owner, 0) };
            true
        })
    }
}

#[cfg(feature = "compat")]
mod in_hash {
    use aya_ebpf::bindings::BPF_NOEXIST;

    use crate::maps::EXIT_OWNERS;

    /// The owner of slot `index` (0: free).
    #[inline(always)]
    pub fn owner(index: u32) -> u64 {
        // SAFETY: the value is copied out at once.
        unsafe { EXIT_OWNERS.get(index) }.copied().unwrap_or(0)
    }

    /// Claims the free slot `index` for `key`; false when another exit took it first.
    #[inline(always)]
    pub fn claim(index: u32, key: u64) -> bool {
        EXIT_OWNERS.insert(index, key, u64::from(BPF_NOEXIST)).is_ok()
    }

    /// Frees slot `index`; whether it was held.
    #[inline(always)]
    pub fn clear(index: u32) -> bool {
        EXIT_OWNERS.remove(index).is_ok()
    }
}
