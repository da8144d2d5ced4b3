//! Facts about the running kernel: version, BTF, symbols, tracefs, what can be attached, where
//! BPF memory is charged, and the order of `do_exit` on each version.
//!
//! Imports nothing else of exitprof: every other folder may read it.

pub mod arch;
pub mod bpf_memory;
pub mod bpf_object;
pub mod btf;
pub mod exit_path;
pub mod facts;
mod fentry_attach;
pub mod kallsyms;
pub mod tracefs;
pub mod verifier_probes;
pub mod version;

use exitprof_common::point::Marker;
pub use facts::KernelFacts;

/// The name a marker is shown under.
pub const fn marker_name(m: Marker) -> &'static str {
    match m {
        Marker::SysEnterExit => "sys_enter_exit",
        Marker::SysEnterExitGroup => "sys_enter_exit_group",
        Marker::SignalDeliverKill => "signal_deliver(SIGKILL)",
        Marker::DoExit => "do_exit",
        Marker::SchedProcessExit => "sched_process_exit",
        Marker::X86FpuDropped => "x86_fpu_dropped",
        Marker::DoTaskDead => "do_task_dead",
        Marker::FinalSwitch => "final switch",
    }
}
