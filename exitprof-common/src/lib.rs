//! Types and names shared by exitprof's eBPF programs and its userspace.
//!
//! The records are `#[repr(C)]` plain data: the kernel side writes them, userspace reads the same
//! bytes back; with the `user` feature they implement [`aya::Pod`]. [`names`] and the list of
//! exit functions in [`point`] name the eBPF object's maps, globals and programs for both sides.
#![no_std]

pub mod cgroup;
pub mod counters;
pub mod deferred;
pub mod names;
pub mod point;
pub mod record;
pub mod sizes;
pub mod stack;
pub mod task;
