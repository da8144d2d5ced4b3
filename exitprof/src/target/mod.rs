//! What is profiled: the workloads exitprof drives in child processes, and the processes it
//! watches (`--pid`), with the process plumbing both need (pidfds, signals).
//!
//! Must not import `run`, `analysis`, `report`, `export` or the eBPF object's code in `probes`:
//! a target is started, watched and stopped the same whether probes are attached or not.

pub mod pidfd;
pub mod signals;
pub mod watch;
pub mod workload;
