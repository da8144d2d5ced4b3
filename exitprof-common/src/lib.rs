//! Types shared by exitprof's eBPF programs and its userspace.
//!
//! Everything here is `#[repr(C)]` plain data: the kernel side writes it, userspace reads the same
//! bytes back. With the `user` feature the types implement [`aya::Pod`].
#![no_std]

pub mod counters;
pub mod deferred;
pub mod names;
pub mod point;
pub mod record;
pub mod sizes;
pub mod tracked;
