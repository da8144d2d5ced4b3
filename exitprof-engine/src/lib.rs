//! exitprof's engine: the running kernel (its facts, BTF, tracefs), the eBPF object (the plan
//! resolved on this kernel, loading, attaching, the maps), the workloads and the processes
//! watched, the conditions compared, and the commands that drive them: a run, a comparison,
//! `serve`. What it produces is exitprof-core's ([`run::RunOutcome`],
//! [`compare::CompareOutcome`]).
//!
//! Its folders, from the ground floor up: `base`; `kernel`; `probes`; `conditions` and
//! `profiled`; `run`; `compare`; `serve`. A folder that shares its name with one of
//! exitprof-core re-exports that folder's parts, so that `crate::kernel::kallsyms` is the one
//! kallsyms whichever crate reads it.

pub mod base;
pub mod compare;
pub mod conditions;
pub mod kernel;
pub mod probes;
pub mod profiled;
pub mod run;
pub mod serve;

// The pure folders, by the paths the engine's code names them.
use exitprof_core::{analysis, export};
