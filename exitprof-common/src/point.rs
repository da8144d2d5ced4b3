//! Probe points: the places in a task's exit where exitprof takes a timestamp.
//!
//! A point is encoded as one byte in [`crate::record::ExitRecord::points`]. Markers are single
//! events (a tracepoint, the entry of a function that never returns); traced functions contribute
//! two points, their entry and their return.

use crate::names::{FunctionPrograms, entry_and_return_programs};

/// A single-event probe point.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Marker {
    /// `syscalls:sys_enter_exit`: a thread calls `exit(2)`.
    SysEnterExit = 0,
    /// `syscalls:sys_enter_exit_group`: a thread calls `exit_group(2)`.
    SysEnterExitGroup = 1,
    /// `signal:signal_deliver` of `SIGKILL`: a thread starts to die from a signal (group exit,
    /// `kill -9`, `execve` of a sibling).
    SignalDeliverKill = 2,
    /// Entry of `do_exit` (kprobe or fentry).
    DoExit = 3,
    /// `sched:sched_process_exit`. Since v6.16 it fires right after `taskstats_exit`, before
    /// `exit_mm`; older kernels fire it after `exit_mm` and `acct_process`.
    SchedProcessExit = 4,
    /// `x86_fpu:x86_fpu_dropped`, fired by `fpu__drop` inside `exit_thread` on x86.
    X86FpuDropped = 5,
    /// Entry of `do_task_dead`, the last function an exiting task runs.
    DoTaskDead = 6,
    /// `sched_switch` away from the task in `TASK_DEAD`: the task is off the CPU for good.
    FinalSwitch = 7,
}

/// Number of [`Marker`] variants.
pub const MARKER_COUNT: u8 = 8;

/// The kernel functions on the exit path that exitprof brackets with an entry and a return
/// probe, in the order of their point codes: `Variant => slot`, where the slot is the function's
/// name on the kernels exitprof was first written for (the symbol it resolves to can differ
/// between versions: userspace's probe plan decides) and the suffix of its eBPF programs' names.
///
/// This is the one list of them: `for_each_exit_fn!(callback)` expands to
/// `callback! { Variant => slot, ... }`, here to define [`ExitFn`], in the eBPF crate to define
/// each function's programs.
#[macro_export]
macro_rules! for_each_exit_fn {
    ($callback:ident) => {
        $callback! {
            ExitSignals => exit_signals,
            ExitItimers => exit_itimers,
            TaskstatsExit => taskstats_exit,
            PerfEventExitTask => perf_event_exit_task,
            AcctProcess => acct_process,
            ExitSem => exit_sem,
            ExitShm => exit_shm,
            ExitFiles => exit_files,
            ExitFs => exit_fs,
            ExitTaskNamespaces => exit_task_namespaces,
            PutIpcNs => put_ipc_ns,
            MqPutMnt => mq_put_mnt,
            TaskWorkRun => task_work_run,
            ExitThread => exit_thread,
            CgroupExit => cgroup_exit,
            ReleaseTask => release_task,
            ProcExitConnector => proc_exit_connector,
        }
    };
}

macro_rules! define_exit_fn {
    ($($variant:ident => $slot:ident),+ $(,)?) => {
        /// A kernel function on the exit path, bracketed by an entry and a return probe (see
        /// [`for_each_exit_fn`]).
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ExitFn {
            $($variant),+
        }

        /// Number of [`ExitFn`] variants.
        pub const EXIT_FN_COUNT: u8 = [$(stringify!($slot)),+].len() as u8;

        impl ExitFn {
            /// Every function slot, indexed by its discriminant.
            pub const ALL: [Self; EXIT_FN_COUNT as usize] = [$(Self::$variant),+];

            /// The slot's name: the function's name on the kernels exitprof was first written
            /// for.
            pub const fn slot(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($slot)),+
                }
            }

            /// The eBPF programs at the function's entry and return.
            pub const fn programs(self) -> FunctionPrograms {
                match self {
                    $(Self::$variant => entry_and_return_programs!($slot)),+
                }
            }
        }
    };
}

for_each_exit_fn!(define_exit_fn);

/// First point code used by function entries and returns.
const FN_BASE: u8 = 32;

/// The one-byte code of a marker.
pub const fn marker_code(marker: Marker) -> u8 {
    marker as u8
}

/// The one-byte code of a function's entry (`ret == false`) or return (`ret == true`).
pub const fn fn_code(function: ExitFn, ret: bool) -> u8 {
    FN_BASE + 2 * function as u8 + ret as u8
}

/// A decoded probe point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    Marker(Marker),
    Enter(ExitFn),
    Return(ExitFn),
}

impl Point {
    /// The one-byte code of this point.
    pub const fn code(self) -> u8 {
        match self {
            Self::Marker(m) => marker_code(m),
            Self::Enter(f) => fn_code(f, false),
            Self::Return(f) => fn_code(f, true),
        }
    }

    /// Decodes a point code; `None` for codes no point uses.
    pub const fn from_code(code: u8) -> Option<Self> {
        if code < MARKER_COUNT {
            return Some(Self::Marker(Marker::ALL[code as usize]));
        }
        if code < FN_BASE || code >= FN_BASE + 2 * EXIT_FN_COUNT {
            return None;
        }
        let function = ExitFn::ALL[((code - FN_BASE) / 2) as usize];
        Some(if (code - FN_BASE).is_multiple_of(2) {
            Self::Enter(function)
        } else {
            Self::Return(function)
        })
    }
}

impl Marker {
    /// Every marker, indexed by its code.
    pub const ALL: [Self; MARKER_COUNT as usize] = [
        Self::SysEnterExit,
        Self::SysEnterExitGroup,
        Self::SignalDeliverKill,
        Self::DoExit,
        Self::SchedProcessExit,
        Self::X86FpuDropped,
        Self::DoTaskDead,
        Self::FinalSwitch,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for m in Marker::ALL {
            assert_eq!(Point::from_code(marker_code(m)), Some(Point::Marker(m)));
        }
        for f in ExitFn::ALL {
            assert_eq!(Point::from_code(fn_code(f, false)), Some(Point::Enter(f)));
            assert_eq!(Point::from_code(fn_code(f, true)), Some(Point::Return(f)));
        }
        assert_eq!(Point::from_code(MARKER_COUNT), None);
        assert_eq!(Point::from_code(FN_BASE + 2 * EXIT_FN_COUNT), None);
    }

    #[test]
    fn all_tables_follow_discriminants() {
        for (i, m) in Marker::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i);
        }
        for (i, f) in ExitFn::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i);
        }
    }
}
