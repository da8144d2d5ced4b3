//! Facts about a kernel that are read from text, whether on the running kernel or from a
//! record file: its version, its symbols, the order of `do_exit` on each version, and the eBPF
//! object it loads.

pub mod bpf_object;
pub mod exit_path;
pub mod kallsyms;
pub mod version;

use exitprof_common::point::Marker;

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
