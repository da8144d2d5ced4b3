//! Facts about the running kernel: version, BTF, symbols, tracefs, what can be attached.

pub mod btf;
pub mod exit_path;
pub mod facts;
pub mod kallsyms;
pub mod tracefs;
pub mod version;

use exitprof_common::point::{ExitFn, Marker};
pub use facts::KernelFacts;

/// The slot name of a traced function: its name on the kernels exitprof was first written for,
/// and the suffix of its eBPF program names.
pub const fn function_slot(f: ExitFn) -> &'static str {
    match f {
        ExitFn::ExitSignals => "exit_signals",
        ExitFn::ExitItimers => "exit_itimers",
        ExitFn::TaskstatsExit => "taskstats_exit",
        ExitFn::PerfEventExitTask => "perf_event_exit_task",
        ExitFn::AcctProcess => "acct_process",
        ExitFn::ExitSem => "exit_sem",
        ExitFn::ExitShm => "exit_shm",
        ExitFn::ExitFiles => "exit_files",
        ExitFn::ExitFs => "exit_fs",
        ExitFn::ExitTaskNamespaces => "exit_task_namespaces",
        ExitFn::PutIpcNs => "put_ipc_ns",
        ExitFn::MqPutMnt => "mq_put_mnt",
        ExitFn::TaskWorkRun => "task_work_run",
        ExitFn::ExitThread => "exit_thread",
        ExitFn::CgroupExit => "cgroup_exit",
        ExitFn::ReleaseTask => "release_task",
        ExitFn::ProcExitConnector => "proc_exit_connector",
    }
}

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
