//! Facts about the running kernel: version, BTF, symbols, tracefs, what can be attached, where
//! BPF memory is charged, and the order of `do_exit` on each version.
//!
//! What is read from text alone (the kernel version, kallsyms, the exit path per version, the
//! two eBPF objects) is exitprof-core's, re-exported here.
//!
//! Imports nothing else of exitprof's engine: every other folder may read it.

pub mod arch;
pub mod bpf_memory;
pub mod bpf_object;
pub mod btf;
pub mod facts;
mod fentry_attach;
pub mod tracefs;
pub mod verifier_probes;

pub use exitprof_core::kernel::{exit_path, kallsyms, marker_name, version};
pub use facts::KernelFacts;
