//! What is profiled: the workloads exitprof drives in child processes, and the processes it
//! watches (`--pid`). What a target is (the storms and their parameters) is exitprof-core's.
//!
//! Must not import `run`, `analysis`, `cli`, the presentation layer (`present`, `report`,
//! `export`, `diff`), nor anything of `probes` but
//! its capability checks: a target is started, watched and stopped the same whether probes are
//! attached or not.

pub mod watch;
pub mod workload;

pub use exitprof_core::profiled::{ForkParams, NetnsParams, Storm, Target, ThreadsParams};
