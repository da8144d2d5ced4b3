//! exitprof's library: what a finished run of exitprof is and what can be made of it, without
//! the eBPF programs, an async runtime or libc. It reads record files, analyses exits (stages,
//! histograms, groups, teardowns, stacks), and makes the documents of a run, a comparison and a
//! diff, the terminal reports and the export files of them.
//!
//! Its folders, from the ground floor up (`cargo xtask test`'s lints check that none imports a
//! folder above it): `base`; `kernel` (what is known of a kernel from text); `probes` (the site
//! table, the plan, the counts); `profiled` and `conditions` (what is profiled, and compared);
//! `analysis`; `run` and `compare` (their outcomes; a run kept in a file); `document` (the run
//! document, versioned); `diff` (saved runs compared); `report` and `export` (what a person
//! reads, and files for other tools).

pub mod analysis;
pub mod base;
pub mod compare;
pub mod conditions;
pub mod diff;
pub mod document;
pub mod export;
pub mod kernel;
pub mod probes;
pub mod profiled;
pub mod report;
pub mod run;
