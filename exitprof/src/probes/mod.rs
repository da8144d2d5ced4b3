//! Everything that touches the eBPF object: the probe plan for the running kernel, loading and
//! attaching the programs, kprobe events in tracefs, the maps the programs fill (ring buffers,
//! loss counters, stacks), the kernel's statistics of each program, and the privileges all of
//! it needs.
//!
//! Must not import `run`, `analysis`, `report`, `export` or `cli`: it knows how to probe, not
//! what a run does with the records.

pub mod kprobe_events;
pub mod load;
pub mod maps;
pub mod plan;
pub mod privileges;
pub mod prog_stats;
