//! Everything that touches the eBPF object: the probe plan resolved on the running kernel,
//! loading and attaching the programs, kprobe events in tracefs, the maps the programs fill (ring
//! buffers, loss counters, stacks), the kernel's statistics of each program, and the privileges
//! and locked memory all of it needs. The site table, the plan and the counts are
//! exitprof-core's.
//!
//! Must not import `run`, `analysis`, `cli`, nor the presentation layer (`present`, `report`,
//! `export`, `diff`): it knows how to probe, not what a run does with the records.

pub mod floor;
pub mod kprobe_events;
pub mod load;
pub mod maps;
pub mod memlock;
pub mod privileges;
pub mod prog_stats;
pub mod resolve;

pub use exitprof_core::probes::{ProbeOptions, counts, plan, sites};
