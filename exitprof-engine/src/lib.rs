//! exitprof's engine: the running kernel (its facts, BTF, tracefs), the eBPF object (the plan
//! resolved on this kernel, loading, attaching, the maps), the workloads and the processes
//! watched, the conditions compared, and the commands that drive them: a run, a comparison,
//! `serve`. What it produces is exitprof-core's ([`run::RunOutcome`],
//! [`compare::CompareOutcome`]).
//!
//! Its folders, from the ground floor up: `base`; `kernel`; `probes`; `conditions` and
//! `profiled`; `run`; `compare`; `serve`. A folder that shares its name with one of
//! exitprof-core holds the half of it that needs the running kernel, and re-exports the library's
//! half: `crate::kernel::kallsyms` is exitprof-core's kallsyms.

pub mod base;
pub mod compare;
pub mod conditions;
pub mod kernel;
pub mod probes;
pub mod profiled;
pub mod run;
pub mod serve;
