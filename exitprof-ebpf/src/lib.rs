// Only the `exitprof` binary of this crate is built for the kernel; this empty library lets the
// userspace crate name it as a build dependency, so cargo rebuilds the object when it changes.
#![no_std]
