//! The probe site table: every point exitprof probes on the exit path and around it, what
//! kernel function or tracepoint each is on across kernel versions, and why (in one declarative
//! table, [`SITES`]); `plan.rs` resolves it against the running kernel's BTF and kallsyms.

use std::fmt;

use exitprof_common::{
    deferred,
    names::{FunctionPrograms, programs},
    point::{ExitFn, Marker, Point},
};
use serde::{Deserialize, Serialize};

use crate::kernel::marker_name;

/// How one planned point is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    Fentry,
    Kprobe,
    BtfTracepoint,
    Tracepoint,
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::BtfTracepoint => "tp_btf",
            Self::Tracepoint => "tracepoint",
        })
    }
}

/// Deferred work an exit causes elsewhere, and the probes that observe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeferredSite {
    /// The function that frees IPC namespaces: `free_ipc_ns` where it is a symbol, else its
    /// caller, the `free_ipc` work item (or, before v5.7, `put_ipc_ns`).
    FreeIpcNs,
    /// `shm_exit_ns(ns)`: runs once per namespace freed, and names it.
    ShmExitNs,
    /// `synchronize_rcu`: the grace period a `free_ipc` run waits for.
    SynchronizeRcu,
    /// The parent's `release_task` of a zombie child.
    Reap,
    /// `workqueue_queue_work` of `free_ipc`: a namespace release waits for the next run.
    WorkqueueQueue,
    /// Tracepoint fallbacks for the `free_ipc` work item.
    WorkqueueStart,
    WorkqueueEnd,
    /// Tracepoint fallback for `shm_exit_ns`: what a `free_ipc` run frees.
    Kfree,
    /// Tracepoint fallback for `Reap`: `wait4` returning a reaped child.
    Wait4Return,
    /// `sched_process_free`: the RCU callback that frees a task.
    TaskFree,
    /// `cleanup_net`: a run of the network namespace teardown (a batch of namespaces).
    CleanupNet,
    /// Tracepoint fallbacks for `cleanup_net`: its work item's runs.
    NetWorkqueueStart,
    NetWorkqueueEnd,
    /// `free_user_ns`: a user namespace's teardown.
    FreeUserNs,
    /// Tracepoint fallbacks for `free_user_ns`: its work items' runs.
    UserNsWorkqueueStart,
    UserNsWorkqueueEnd,
}

/// The cgroups made and removed during a run, whose paths name the exits in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CgroupSite {
    Made,
    Removed,
}

/// A probe site: a marker, a function probed at entry and return, a deferred-work probe, or one
/// that names the cgroups of exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteId {
    Marker(Marker),
    Function(ExitFn),
    Deferred(DeferredSite),
    Cgroup(CgroupSite),
}

impl SiteId {
    pub fn name(self) -> &'static str {
        match self {
            Self::Marker(m) => marker_name(m),
            Self::Function(f) => f.slot(),
            Self::Deferred(d) => match d {
                DeferredSite::FreeIpcNs => "free_ipc_ns",
                DeferredSite::ShmExitNs => "shm_exit_ns",
                DeferredSite::SynchronizeRcu => "synchronize_rcu",
                DeferredSite::Reap => "reap (parent's release_task)",
                DeferredSite::WorkqueueQueue => "workqueue_queue_work (free_ipc)",
                DeferredSite::WorkqueueStart => "workqueue_execute_start (free_ipc)",
                DeferredSite::WorkqueueEnd => "workqueue_execute_end (free_ipc)",
                DeferredSite::Kfree => "kfree (in free_ipc)",
                DeferredSite::Wait4Return => "wait4 return (reap)",
                DeferredSite::TaskFree => "sched_process_free",
                DeferredSite::CleanupNet => "cleanup_net",
                DeferredSite::NetWorkqueueStart => "workqueue_execute_start (cleanup_net)",
                DeferredSite::NetWorkqueueEnd => "workqueue_execute_end (cleanup_net)",
                DeferredSite::FreeUserNs => "free_user_ns",
                DeferredSite::UserNsWorkqueueStart => "workqueue_execute_start (free_user_ns)",
                DeferredSite::UserNsWorkqueueEnd => "workqueue_execute_end (free_user_ns)",
            },
            Self::Cgroup(CgroupSite::Made) => "cgroup_mkdir",
            Self::Cgroup(CgroupSite::Removed) => "cgroup_rmdir",
        }
    }

    /// The site of this name (a plan read back from a record file names its points).
    pub fn named(name: &str) -> Option<Self> {
        SITES.iter().map(|s| s.id).find(|id| id.name() == name)
    }

    /// The exit-path probe points this site produces (none for deferred work).
    pub fn points(self) -> Vec<Point> {
        match self {
            Self::Marker(m) => vec![Point::Marker(m)],
            Self::Function(f) => vec![Point::Enter(f), Point::Return(f)],
            Self::Deferred(_) | Self::Cgroup(_) => Vec::new(),
        }
    }
}

/// How a site can be attached.
#[derive(Clone, Copy, Debug)]
pub enum Hook {
    /// A kernel function, by its name and, in order of preference, the names it has on other
    /// kernel versions; with the programs that probe it.
    Function { symbol: &'static str, renamed: &'static [&'static str], programs: FunctionPrograms },
    /// A tracepoint with a BTF prototype (`tp_btf`). Its program is named after it.
    BtfTracepoint(&'static str),
    /// A tracepoint attached by its category and name (`syscalls:` ones have no BTF prototype
    /// of their own), and its program.
    Tracepoint { category: &'static str, event: &'static str, program: &'static str },
}

impl Hook {
    /// The eBPF programs that attach this hook as `how`, each with whether it is a return probe.
    pub fn programs(self, how: How) -> Vec<(&'static str, bool)> {
        match self {
            Self::Function { programs, .. } => {
                let pair = match how {
                    How::Kprobe => programs.kprobe,
                    How::Fentry => programs.fentry,
                    How::BtfTracepoint | How::Tracepoint => {
                        unreachable!("functions are probed with kprobes or fentry")
                    }
                };
                std::iter::once((pair.entry, false)).chain(pair.exit.map(|p| (p, true))).collect()
            }
            Self::BtfTracepoint(name) | Self::Tracepoint { program: name, .. } => {
                vec![(name, false)]
            }
        }
    }
}

pub struct Site {
    pub id: SiteId,
    pub hook: Hook,
    /// Attached only when this site is not: a tracepoint standing in for a function probe, or
    /// marking a place inside a function whose own probes measure it better.
    pub fallback_for: Option<SiteId>,
}

const fn site(id: SiteId, hook: Hook) -> Site {
    Site { id, hook, fallback_for: None }
}

/// A kernel function, with what it is called on kernels that renamed it.
const fn probed(
    symbol: &'static str,
    renamed: &'static [&'static str],
    programs: FunctionPrograms,
) -> Hook {
    Hook::Function { symbol, renamed, programs }
}

/// A function of the exit path, under its slot's name.
const fn function(f: ExitFn) -> Site {
    renamed(f, &[])
}

/// A function of the exit path that other kernel versions call otherwise.
const fn renamed(f: ExitFn, renamed: &'static [&'static str]) -> Site {
    site(SiteId::Function(f), probed(f.slot(), renamed, f.programs()))
}

/// A `syscalls:` tracepoint.
const fn syscall(event: &'static str, program: &'static str) -> Hook {
    Hook::Tracepoint { category: "syscalls", event, program }
}

const fn fallback(id: SiteId, hook: Hook, primary: SiteId) -> Site {
    Site { id, hook, fallback_for: Some(primary) }
}

/// Every eBPF program the plan can ask for, with the point it implements: each site's programs
/// in each way its hook can be attached (a function by kprobe or by fentry, a tracepoint as
/// itself), which covers every attach mode.
/// The work function whose work items a `workqueue_*` site looks for, if it is one.
pub fn work_function_of(site: SiteId) -> Option<&'static str> {
    if site == SiteId::Deferred(DeferredSite::WorkqueueQueue) {
        return Some("free_ipc");
    }
    WORK_FUNCTIONS.iter().find_map(|&(function, _, fallbacks, _)| {
        fallbacks.iter().any(|&f| site == SiteId::Deferred(f)).then_some(function)
    })
}

#[cfg(any(test, feature = "test-support"))]
pub fn every_program() -> Vec<(&'static str, &'static str)> {
    let hows = |hook| match hook {
        Hook::Function { .. } => &[How::Kprobe, How::Fentry][..],
        Hook::BtfTracepoint(_) => &[How::BtfTracepoint],
        Hook::Tracepoint { .. } => &[How::Tracepoint],
    };
    SITES
        .iter()
        .flat_map(|site| {
            let programs = hows(site.hook).iter().flat_map(|&how| site.hook.programs(how));
            programs.map(|(program, _)| (site.id.name(), program))
        })
        .collect()
}

/// The entry of [`SITES`] for a site the plan has.
pub fn site_of(id: SiteId) -> &'static Site {
    SITES.iter().find(|s| s.id == id).expect("every planned site is in SITES")
}

pub const DO_EXIT: SiteId = SiteId::Marker(Marker::DoExit);

/// The points that start an exit: `do_exit`, or the ways into it that stand in for it.
pub const START_MARKERS: [Marker; 4] =
    [Marker::DoExit, Marker::SysEnterExit, Marker::SysEnterExitGroup, Marker::SignalDeliverKill];

/// Every probe site exitprof knows, with its candidate attach targets across kernel versions.
pub const SITES: &[Site] = &[
    site(DO_EXIT, probed("do_exit", &[], programs::DO_EXIT)),
    fallback(
        SiteId::Marker(Marker::SysEnterExit),
        syscall("sys_enter_exit", programs::SYS_ENTER_EXIT),
        DO_EXIT,
    ),
    fallback(
        SiteId::Marker(Marker::SysEnterExitGroup),
        syscall("sys_enter_exit_group", programs::SYS_ENTER_EXIT),
        DO_EXIT,
    ),
    fallback(
        SiteId::Marker(Marker::SignalDeliverKill),
        Hook::BtfTracepoint(programs::SIGNAL_DELIVER),
        DO_EXIT,
    ),
    function(ExitFn::ExitSignals),
    function(ExitFn::ExitItimers),
    function(ExitFn::TaskstatsExit),
    site(
        SiteId::Marker(Marker::SchedProcessExit),
        Hook::BtfTracepoint(programs::SCHED_PROCESS_EXIT),
    ),
    function(ExitFn::PerfEventExitTask),
    function(ExitFn::AcctProcess),
    function(ExitFn::ExitSem),
    function(ExitFn::ExitShm),
    function(ExitFn::ExitFiles),
    function(ExitFn::ExitFs),
    // Renamed in the Oct-2025 namespace series.
    renamed(ExitFn::ExitTaskNamespaces, &["exit_nsproxy_namespaces"]),
    function(ExitFn::PutIpcNs),
    // Removed in v6.3.
    function(ExitFn::MqPutMnt),
    function(ExitFn::TaskWorkRun),
    function(ExitFn::ExitThread),
    fallback(
        SiteId::Marker(Marker::X86FpuDropped),
        Hook::BtfTracepoint(programs::X86_FPU_DROPPED),
        SiteId::Function(ExitFn::ExitThread),
    ),
    // Renamed with the cgroup_task_{exit,release,free} series.
    renamed(ExitFn::CgroupExit, &["cgroup_task_exit"]),
    function(ExitFn::ReleaseTask),
    function(ExitFn::ProcExitConnector),
    site(SiteId::Marker(Marker::DoTaskDead), probed("do_task_dead", &[], programs::DO_TASK_DEAD)),
    site(SiteId::Marker(Marker::FinalSwitch), Hook::BtfTracepoint(programs::SCHED_SWITCH)),
    // Deferred work.
    site(FREE_IPC_NS, probed("free_ipc_ns", &["free_ipc", "put_ipc_ns"], programs::FREE_IPC)),
    site(
        SiteId::Deferred(DeferredSite::WorkqueueQueue),
        Hook::BtfTracepoint(programs::WORKQUEUE_QUEUE_WORK),
    ),
    fallback(
        SiteId::Deferred(DeferredSite::WorkqueueStart),
        Hook::BtfTracepoint(programs::WORKQUEUE_EXECUTE_START),
        FREE_IPC_NS,
    ),
    fallback(
        SiteId::Deferred(DeferredSite::WorkqueueEnd),
        Hook::BtfTracepoint(programs::WORKQUEUE_EXECUTE_END),
        FREE_IPC_NS,
    ),
    site(SHM_EXIT_NS, probed("shm_exit_ns", &[], programs::SHM_EXIT_NS)),
    fallback(
        SiteId::Deferred(DeferredSite::Kfree),
        Hook::BtfTracepoint(programs::KFREE),
        SHM_EXIT_NS,
    ),
    site(
        SiteId::Deferred(DeferredSite::SynchronizeRcu),
        probed("synchronize_rcu", &[], programs::SYNCHRONIZE_RCU),
    ),
    site(REAP, probed("release_task", &[], programs::REAP)),
    fallback(
        SiteId::Deferred(DeferredSite::Wait4Return),
        syscall("sys_exit_wait4", programs::SYS_EXIT_WAIT4),
        REAP,
    ),
    site(TASK_FREE, Hook::BtfTracepoint(programs::SCHED_PROCESS_FREE)),
    // Namespace teardowns: their work functions, or their work items' runs (the tracepoints
    // are those of free_ipc's fallback, attached once whichever needs them).
    site(CLEANUP_NET, probed("cleanup_net", &[], programs::CLEANUP_NET)),
    fallback(
        SiteId::Deferred(DeferredSite::NetWorkqueueStart),
        Hook::BtfTracepoint(programs::WORKQUEUE_EXECUTE_START),
        CLEANUP_NET,
    ),
    fallback(
        SiteId::Deferred(DeferredSite::NetWorkqueueEnd),
        Hook::BtfTracepoint(programs::WORKQUEUE_EXECUTE_END),
        CLEANUP_NET,
    ),
    site(FREE_USER_NS, probed("free_user_ns", &[], programs::FREE_USER_NS)),
    fallback(
        SiteId::Deferred(DeferredSite::UserNsWorkqueueStart),
        Hook::BtfTracepoint(programs::WORKQUEUE_EXECUTE_START),
        FREE_USER_NS,
    ),
    fallback(
        SiteId::Deferred(DeferredSite::UserNsWorkqueueEnd),
        Hook::BtfTracepoint(programs::WORKQUEUE_EXECUTE_END),
        FREE_USER_NS,
    ),
    // The workloads of exits.
    // BTF tracepoints, which need no perf event: Debian's and Ubuntu's kernels refuse
    // `perf_event_open` without CAP_SYS_ADMIN at their default `perf_event_paranoid` of 3.
    site(SiteId::Cgroup(CgroupSite::Made), Hook::BtfTracepoint(programs::CGROUP_MKDIR)),
    site(SiteId::Cgroup(CgroupSite::Removed), Hook::BtfTracepoint(programs::CGROUP_RMDIR)),
];

/// Where the kernel side releases the slot of an exit whose end was never seen, and reports the
/// sampled frees: planned in every point set.
pub const TASK_FREE: SiteId = SiteId::Deferred(DeferredSite::TaskFree);
pub const FREE_IPC_NS: SiteId = SiteId::Deferred(DeferredSite::FreeIpcNs);
pub const SHM_EXIT_NS: SiteId = SiteId::Deferred(DeferredSite::ShmExitNs);
const REAP: SiteId = SiteId::Deferred(DeferredSite::Reap);
const CLEANUP_NET: SiteId = SiteId::Deferred(DeferredSite::CleanupNet);
const FREE_USER_NS: SiteId = SiteId::Deferred(DeferredSite::FreeUserNs);

/// The work functions whose runs the `workqueue_execute_*` tracepoints stand in for, each with
/// its site, the sites of its fallbacks, and its bit of the eBPF side's `WORK_TIMED`.
pub const WORK_FUNCTIONS: [(&str, SiteId, [DeferredSite; 2], u32); 3] = [
    (
        "free_ipc",
        FREE_IPC_NS,
        [DeferredSite::WorkqueueStart, DeferredSite::WorkqueueEnd],
        deferred::WORK_TIMED_FREE_IPC,
    ),
    (
        "cleanup_net",
        CLEANUP_NET,
        [DeferredSite::NetWorkqueueStart, DeferredSite::NetWorkqueueEnd],
        deferred::WORK_TIMED_CLEANUP_NET,
    ),
    (
        "free_user_ns",
        FREE_USER_NS,
        [DeferredSite::UserNsWorkqueueStart, DeferredSite::UserNsWorkqueueEnd],
        deferred::WORK_TIMED_FREE_USER_NS,
    ),
];
