//! Probe points: the places in a task's exit where exitprof takes a timestamp.
//!
//! A point is encoded as one byte in [`crate::record::ExitRecord::points`]. Markers are single
//! events (a tracepoint, the entry of a function that never returns); traced functions contribute
//! two points, their entry and their return.

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

/// A kernel function on the exit path, bracketed by an entry and a return probe.
///
/// The variant names the function's slot; the symbol it resolves to can differ between kernel
/// versions (userspace's probe plan decides).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExitFn {
    ExitSignals = 0,
    ExitItimers = 1,
    TaskstatsExit = 2,
    PerfEventExitTask = 3,
    AcctProcess = 4,
    ExitSem = 5,
    ExitShm = 6,
    ExitFiles = 7,
    ExitFs = 8,
    ExitTaskNamespaces = 9,
    PutIpcNs = 10,
    MqPutMnt = 11,
    TaskWorkRun = 12,
    ExitThread = 13,
    CgroupExit = 14,
    ReleaseTask = 15,
    ProcExitConnector = 16,
}

/// Number of [`ExitFn`] variants.
pub const EXIT_FN_COUNT: u8 = 17;

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

impl ExitFn {
    /// Every function slot, indexed by its discriminant.
    pub const ALL: [Self; EXIT_FN_COUNT as usize] = [
        Self::ExitSignals,
        Self::ExitItimers,
        Self::TaskstatsExit,
        Self::PerfEventExitTask,
        Self::AcctProcess,
        Self::ExitSem,
        Self::ExitShm,
        Self::ExitFiles,
        Self::ExitFs,
        Self::ExitTaskNamespaces,
        Self::PutIpcNs,
        Self::MqPutMnt,
        Self::TaskWorkRun,
        Self::ExitThread,
        Self::CgroupExit,
        Self::ReleaseTask,
        Self::ProcExitConnector,
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
