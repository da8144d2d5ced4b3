//! The names by which userspace finds what the eBPF object defines: the maps it reads or sizes,
//! the globals it sets at load time, and the programs it attaches. aya names a map or a global
//! after its static and a program after its function, so the eBPF crate defines each under the
//! name given here; a unit test of userspace parses the built object and checks that every one
//! is there, for every program the probe plan can ask for in any attach mode.

/// Declares each name as a constant holding its own text, and `ALL`, every one of them.
macro_rules! names {
    ($($(#[$doc:meta])* $name:ident),+ $(,)?) => {
        $($(#[$doc])* pub const $name: &str = stringify!($name);)+

        /// Every name of this list.
        pub const ALL: &[&str] = &[$($name),+];
    };
}

/// Maps userspace reads or sizes.
pub mod maps {
    names! {
        /// The marks of followed tasks, in their local storage (`crate::task::TaskMark`):
        /// userspace marks the processes to follow through their pidfds. In the compat object
        /// a hash by pid (`crate::task::PidMark`).
        TASKS,
        /// The state of each exit in progress, an array sized at load time (a power of two).
        EXIT_SLOTS,
        /// The owner of each of `EXIT_SLOTS`; sized as it.
        EXIT_OWNERS,
        /// Tasks whose exits were recorded, until they are freed (one in
        /// `crate::deferred::FREES_SAMPLED`); sized as `EXIT_SLOTS`.
        FREES_AWAITED,
        /// Finished exit records, a ring buffer sized at load time.
        EXITS,
        /// Deferred-work records, a ring buffer.
        DEFERRED,
        /// Kernel stacks of followed exits (`crate::stack::StackRecord`): on-CPU samples and
        /// the blocks whose stack was taken, a ring buffer.
        STACKS,
        /// The cgroups made and removed (`crate::cgroup::CgroupRecord`), a ring buffer.
        CGROUPS,
        /// Per-CPU counters, indexed by [`crate::counters`].
        COUNTERS,
        /// Settings changed while the programs run (slot 0: stop opening exit records; slot 1:
        /// the run's number, which each exit record carries).
        CONTROL,
        /// Since when (boot-time clock, ns) processes are decided followed or not as they are
        /// created (0: none is), a one-slot array.
        DECIDED_SINCE,
    }
}

/// Globals userspace sets at load time.
pub mod globals {
    names! {
        /// Record every exit on the machine (non-zero: on).
        TRACE_ALL,
        /// Await and report the frees of a sample of recorded exits (non-zero: on).
        AWAIT_FREES,
        /// Kernel stacks walked per second and CPU where exits block, at most (0: none).
        BLOCK_WALKS_PER_SEC,
        /// Unread bytes of each ring buffer above which a new record wakes userspace.
        EXITS_WAKEUP_BYTES,
        DEFERRED_WAKEUP_BYTES,
        STACKS_WAKEUP_BYTES,
        /// Record the exits of tasks with this name.
        TARGET_COMM,
        /// Record the exits of tasks in the v2 cgroup of this id or below it (0: off).
        TARGET_CGROUP,
        /// Device and inode of exitprof's PID namespace (0 in the initial one).
        PIDNS_DEV,
        PIDNS_INO,
        /// Whether `sched_process_exit` carries `group_dead` (v6.16+).
        EXIT_TP_GROUP_DEAD,
        /// The number of the `exit_group` system call on this architecture.
        SYS_EXIT_GROUP_NR,
        /// `offsetof(struct task_struct, pid)`.
        TASK_PID_OFFSET,
        /// `offsetof(struct task_struct, tgid)`.
        TASK_TGID_OFFSET,
        /// `offsetof(struct task_struct, flags)`.
        TASK_FLAGS_OFFSET,
        /// `offsetof(struct task_struct, group_leader)`.
        TASK_GROUP_LEADER_OFFSET,
        /// `offsetof(struct task_struct, real_parent)`.
        TASK_REAL_PARENT_OFFSET,
        /// `offsetof(struct task_struct, start_boottime)`.
        TASK_START_BOOTTIME_OFFSET,
        /// `EXIT_SLOTS`' size less one.
        EXIT_SLOT_MASK,
        /// `offsetof(struct task_struct, signal)`.
        TASK_SIGNAL_OFFSET,
        /// `offsetof(struct signal_struct, live)`.
        SIGNAL_LIVE_OFFSET,
        /// `offsetof(struct signal_struct, group_exec_task)` (0: the kernel has none).
        SIGNAL_GROUP_EXEC_TASK_OFFSET,
        /// `offsetof(struct task_struct, comm)`.
        TASK_COMM_OFFSET,
        /// `offsetof(struct task_struct, nsproxy)`.
        TASK_NSPROXY_OFFSET,
        /// `offsetof(struct nsproxy, ipc_ns)`.
        NSPROXY_IPC_NS_OFFSET,
        /// `offsetof(struct work_struct, func)`.
        WORK_FUNC_OFFSET,
        /// Address of `free_ipc`.
        FREE_IPC_ADDR,
        /// `offsetof(struct cgroup, root)`.
        CGROUP_ROOT_OFFSET,
        /// `offsetof(struct cgroup_root, hierarchy_id)`.
        CGROUP_ROOT_HIERARCHY_ID_OFFSET,
        /// `offsetof(struct cgroup, kn)`.
        CGROUP_KN_OFFSET,
        /// `offsetof(struct kernfs_node, id)`.
        KERNFS_NODE_ID_OFFSET,
        /// `offsetof(struct nsproxy, net_ns)`.
        NSPROXY_NET_NS_OFFSET,
        /// `offsetof(struct task_struct, real_cred)` and `offsetof(struct cred, user_ns)`.
        TASK_REAL_CRED_OFFSET,
        CRED_USER_NS_OFFSET,
        /// `offsetof(struct net, list)`: its place in the kernel's list of network namespaces.
        NET_LIST_OFFSET,
        /// The offset in `struct net` of its reference count (`ns.__ns_ref`, `ns.count` before
        /// v6.18, `count` before v5.13).
        NET_REFS_OFFSET,
        /// The offset in `struct net` of its inode number (`ns.inum`).
        NET_INUM_OFFSET,
        /// `offsetof(struct net, exit_list)`: its place in a teardown run's list.
        NET_EXIT_LIST_OFFSET,
        /// `offsetof(struct user_namespace, work)` and the offset of its inode number.
        USER_NS_WORK_OFFSET,
        USER_NS_INUM_OFFSET,
        /// Addresses of `cleanup_net` and `free_user_ns`: the work functions of the network and
        /// user namespace teardowns.
        CLEANUP_NET_ADDR,
        FREE_USER_NS_ADDR,
        /// Whose runs the `workqueue_execute_*` tracepoints time (`crate::deferred::WORK_TIMED_*`).
        WORK_TIMED,
    }
}

/// Globals only the compat object has (kernels without what the default object uses).
pub mod compat_globals {
    names! {
        /// `offsetof(struct task_struct, __state)` (`state` before 5.14).
        TASK_STATE_OFFSET,
        /// Nanoseconds of a clock tick (`USER_HZ`), as `/proc/PID/stat` counts start times.
        NS_PER_TICK,
        /// `offsetof(struct task_struct, cgroups)`, `offsetof(struct css_set, dfl_cgrp)`,
        /// `offsetof(struct cgroup, level)`, `offsetof(struct cgroup, ancestor_ids)`.
        TASK_CGROUPS_OFFSET,
        CSS_SET_DFL_CGRP_OFFSET,
        CGROUP_LEVEL_OFFSET,
        CGROUP_ANCESTOR_IDS_OFFSET,
    }
}

/// The eBPF programs of a kernel function probed at its entry, and at its return where it has a
/// return program: a kprobe/kretprobe pair or a fentry/fexit pair, as the probe plan chooses.
/// They are named `<kprobe|kretprobe|fentry|fexit>_<enter|exit>_<slot>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionPrograms {
    pub kprobe: ProgramPair,
    pub fentry: ProgramPair,
}

/// A function's entry program and, if it has one, its return program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramPair {
    pub entry: &'static str,
    pub exit: Option<&'static str>,
}

/// The programs of a function probed at its entry only.
macro_rules! entry_programs {
    ($slot:ident) => {
        $crate::names::FunctionPrograms {
            kprobe: $crate::names::ProgramPair {
                entry: concat!("kprobe_enter_", stringify!($slot)),
                exit: None,
            },
            fentry: $crate::names::ProgramPair {
                entry: concat!("fentry_enter_", stringify!($slot)),
                exit: None,
            },
        }
    };
}

/// The programs of a function probed at its entry and its return.
macro_rules! entry_and_return_programs {
    ($slot:ident) => {
        $crate::names::FunctionPrograms {
            kprobe: $crate::names::ProgramPair {
                entry: concat!("kprobe_enter_", stringify!($slot)),
                exit: Some(concat!("kretprobe_exit_", stringify!($slot))),
            },
            fentry: $crate::names::ProgramPair {
                entry: concat!("fentry_enter_", stringify!($slot)),
                exit: Some(concat!("fexit_exit_", stringify!($slot))),
            },
        }
    };
}

pub(crate) use entry_and_return_programs;

/// Programs userspace attaches, besides those of the exit-path functions
/// ([`crate::point::ExitFn::programs`]). A tracepoint's program is named after its tracepoint.
pub mod programs {
    use super::FunctionPrograms;

    /// `do_exit`, at its entry (it never returns).
    pub const DO_EXIT: FunctionPrograms = entry_programs!(do_exit);
    /// `do_task_dead`, at its entry (it never returns).
    pub const DO_TASK_DEAD: FunctionPrograms = entry_programs!(do_task_dead);
    /// The `free_ipc` work item (or the function it resolves to: `free_ipc_ns`, `put_ipc_ns`).
    pub const FREE_IPC: FunctionPrograms = entry_and_return_programs!(free_ipc);
    /// `shm_exit_ns`, once per IPC namespace freed, at its entry.
    pub const SHM_EXIT_NS: FunctionPrograms = entry_programs!(shm_exit_ns);
    /// `synchronize_rcu`, inside a `free_ipc` run.
    pub const SYNCHRONIZE_RCU: FunctionPrograms = entry_and_return_programs!(synchronize_rcu);
    /// The parent's `release_task` of a zombie child.
    pub const REAP: FunctionPrograms = entry_and_return_programs!(reap);
    /// `cleanup_net`, the network namespace teardown's work function.
    pub const CLEANUP_NET: FunctionPrograms = entry_and_return_programs!(cleanup_net);
    /// `free_user_ns`, the user namespace teardown's work function.
    pub const FREE_USER_NS: FunctionPrograms = entry_and_return_programs!(free_user_ns);

    /// `syscalls:sys_enter_exit` and `syscalls:sys_enter_exit_group`: one program for both.
    pub const SYS_ENTER_EXIT: &str = "sys_enter_exit";
    /// `syscalls:sys_exit_wait4`.
    pub const SYS_EXIT_WAIT4: &str = "sys_exit_wait4";
    /// `tp_btf/signal_deliver`.
    pub const SIGNAL_DELIVER: &str = "signal_deliver";
    /// `tp_btf/sched_process_exit`.
    pub const SCHED_PROCESS_EXIT: &str = "sched_process_exit";
    /// `tp_btf/x86_fpu_dropped`.
    pub const X86_FPU_DROPPED: &str = "x86_fpu_dropped";
    /// `tp_btf/sched_switch`.
    pub const SCHED_SWITCH: &str = "sched_switch";
    /// `tp_btf/sched_switch`, empty: the floor of any program there (`exitprof __floor`).
    pub const SCHED_SWITCH_FLOOR: &str = "sched_switch_floor";
    /// `tp_btf/workqueue_queue_work`.
    pub const WORKQUEUE_QUEUE_WORK: &str = "workqueue_queue_work";
    /// `tp_btf/workqueue_execute_start`.
    pub const WORKQUEUE_EXECUTE_START: &str = "workqueue_execute_start";
    /// `tp_btf/workqueue_execute_end`.
    pub const WORKQUEUE_EXECUTE_END: &str = "workqueue_execute_end";
    /// `tp_btf/kfree`.
    pub const KFREE: &str = "kfree";
    /// `tp_btf/sched_process_free`.
    pub const SCHED_PROCESS_FREE: &str = "sched_process_free";
    /// `tp_btf/sched_process_exec`: passes a process's mark on to the thread that takes it
    /// over by exec.
    pub const SCHED_PROCESS_EXEC: &str = "sched_process_exec";
    /// `tp_btf/sched_process_fork`: decides a process created during a run as its parent is.
    pub const SCHED_PROCESS_FORK: &str = "sched_process_fork";
    /// The programs that keep the marks of followed processes, each at the BTF tracepoint of
    /// its name, loaded and attached whatever the plan: exec takeover's and creation's.
    pub const FOLLOW: [&str; 2] = [SCHED_PROCESS_EXEC, SCHED_PROCESS_FORK];
    /// `tp_btf/cgroup_mkdir` and `tp_btf/cgroup_rmdir`: the paths of cgroups made and removed.
    pub const CGROUP_MKDIR: &str = "cgroup_mkdir";
    pub const CGROUP_RMDIR: &str = "cgroup_rmdir";
    /// The perf-event program of the sampling clock.
    pub const SAMPLE_CPU: &str = "sample_cpu";
    /// A program of the default object that no verifier accepts, loaded where a test asks for
    /// a default object the kernel rejects.
    pub const REJECTED_BY_THE_VERIFIER: &str = "rejected_by_the_verifier";
}
