//! From the kernel's records to numbers: decoding the records, cutting each exit into stages,
//! folding them into histograms (and into groups by workload), joining deferred work to its
//! exits, finding where exits block and where they compute, exitprof's own time inside them, and
//! the statistics of repeated runs.
//!
//! Pure: no aya, no tokio, no I/O (`cargo xtask test` fails on any use of aya or tokio here).
//! It reads the probe plan (`probes::plan`) and the kernel's exit-path table to name stages, the
//! kernel's counts of each program's runs (`probes::counts::ProgramCost`) to price them,
//! and a parsed kallsyms (`kernel::kallsyms`) to name the frames of kernel stacks;
//! it must not import `run`, `cli`, nor the presentation layer (`present`, `report`, `export`,
//! `diff`), its tests included: the verdicts' tests are `report`'s.

pub mod blocking;
pub mod comparison;
pub mod deferred;
pub mod exit_stacks;
pub mod exit_teardown;
pub mod exit_timeline;
pub mod fixed_buckets;
pub mod groups;
pub mod histogram;
pub mod kept_exits;
pub mod on_cpu;
pub mod probe_effect;
pub mod profile;
pub mod records;
pub mod session;
pub mod stage_detail;
pub mod stages;
pub mod stats;
pub mod teardown;
