//! The order of `do_exit` on each kernel version: where every probe point sits, and what the
//! kernel does between them that no probe brackets (inlined functions, or work exitprof does not
//! probe). Gap stages are named from this table.
//!
//! Sources: `kernel/exit.c` of v6.1, v6.12 and the late-2025 mainline (v6.18); the positions that
//! moved are marked with the version that moved them.

use exitprof_common::point::{ExitFn, Marker, Point};

use super::version::KernelVersion;

/// One step of the exit path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A probe point.
    Point(Point),
    /// Work the kernel does at this place that no probe point brackets.
    Work(&'static str),
}

/// A step, present on the kernels in `[since, until)`.
struct Entry {
    step: Step,
    since: Option<KernelVersion>,
    until: Option<KernelVersion>,
}

const fn always(step: Step) -> Entry {
    Entry { step, since: None, until: None }
}

const fn since(v: (u32, u32), step: Step) -> Entry {
    Entry { step, since: Some(KernelVersion::new(v.0, v.1, 0)), until: None }
}

const fn until(v: (u32, u32), step: Step) -> Entry {
    Entry { step, since: None, until: Some(KernelVersion::new(v.0, v.1, 0)) }
}

const fn m(marker: Marker) -> Step {
    Step::Point(Point::Marker(marker))
}

const fn enter(f: ExitFn) -> Step {
    Step::Point(Point::Enter(f))
}

const fn ret(f: ExitFn) -> Step {
    Step::Point(Point::Return(f))
}

const fn work(what: &'static str) -> Step {
    Step::Work(what)
}

/// `do_exit`, in order. Nested calls sit between the entry and return of their caller.
const EXIT_PATH: &[Entry] = &[
    always(m(Marker::SysEnterExit)),
    always(m(Marker::SysEnterExitGroup)),
    always(m(Marker::SignalDeliverKill)),
    always(m(Marker::DoExit)),
    always(work("synchronize_group_exit")),
    always(enter(ExitFn::ExitSignals)),
    always(ret(ExitFn::ExitSignals)),
    // Only when the whole thread group is dead (`group_dead`).
    always(enter(ExitFn::ExitItimers)),
    always(ret(ExitFn::ExitItimers)),
    always(work("acct_collect")),
    always(enter(ExitFn::TaskstatsExit)),
    always(ret(ExitFn::TaskstatsExit)),
    // v6.16 (3e816361e94a) moved the tracepoint before exit_mm and gave it `group_dead`.
    since((6, 16), m(Marker::SchedProcessExit)),
    // Mid-2025 kernels stop perf events before exit_mm ("sampling can touch ->mm").
    since((6, 17), enter(ExitFn::PerfEventExitTask)),
    since((6, 17), ret(ExitFn::PerfEventExitTask)),
    always(work("exit_mm")),
    always(enter(ExitFn::AcctProcess)),
    always(ret(ExitFn::AcctProcess)),
    until((6, 16), m(Marker::SchedProcessExit)),
    always(enter(ExitFn::ExitSem)),
    always(ret(ExitFn::ExitSem)),
    always(enter(ExitFn::ExitShm)),
    always(ret(ExitFn::ExitShm)),
    always(enter(ExitFn::ExitFiles)),
    always(ret(ExitFn::ExitFiles)),
    always(enter(ExitFn::ExitFs)),
    always(ret(ExitFn::ExitFs)),
    always(work("disassociate_ctty")),
    always(enter(ExitFn::ExitTaskNamespaces)),
    always(enter(ExitFn::PutIpcNs)),
    // mq_put_mnt was removed in v6.3 (da27f796a832).
    until((6, 3), enter(ExitFn::MqPutMnt)),
    until((6, 3), ret(ExitFn::MqPutMnt)),
    always(ret(ExitFn::PutIpcNs)),
    always(ret(ExitFn::ExitTaskNamespaces)),
    always(enter(ExitFn::TaskWorkRun)),
    always(ret(ExitFn::TaskWorkRun)),
    always(enter(ExitFn::ExitThread)),
    always(m(Marker::X86FpuDropped)),
    always(ret(ExitFn::ExitThread)),
    until((6, 17), enter(ExitFn::PerfEventExitTask)),
    until((6, 17), ret(ExitFn::PerfEventExitTask)),
    always(work("sched_autogroup_exit_task")),
    always(enter(ExitFn::CgroupExit)),
    always(ret(ExitFn::CgroupExit)),
    always(work("exit_notify")),
    // Threads reap themselves at the end of exit_notify; leaders are reaped by their parent.
    always(enter(ExitFn::ReleaseTask)),
    always(ret(ExitFn::ReleaseTask)),
    always(enter(ExitFn::ProcExitConnector)),
    always(ret(ExitFn::ProcExitConnector)),
    always(work("exit_io_context+exit_rcu")),
    always(m(Marker::DoTaskDead)),
    always(work("__schedule")),
    always(m(Marker::FinalSwitch)),
];

/// The exit path of one kernel version.
#[derive(Clone, Debug)]
pub struct ExitPath {
    steps: Vec<Step>,
}

impl ExitPath {
    pub fn for_kernel(version: KernelVersion) -> Self {
        let steps = EXIT_PATH
            .iter()
            .filter(|e| e.since.is_none_or(|v| version >= v) && e.until.is_none_or(|v| version < v))
            .map(|e| e.step)
            .collect();
        Self { steps }
    }

    /// Position of a probe point on this kernel's path.
    pub fn position(&self, point: Point) -> Option<usize> {
        self.steps.iter().position(|s| *s == Step::Point(point))
    }

    /// What lies strictly between two points, when `a` precedes `b` on this path: unprobed work
    /// and unprobed functions, in order (a probed function that lies between did not run). `None`
    /// when either point is not on the path, or they came in an order the path does not have.
    pub fn between(
        &self,
        a: Point,
        b: Point,
        probed: impl Fn(Point) -> bool,
    ) -> Option<Vec<&'static str>> {
        let (start, end) = (self.position(a)?, self.position(b)?);
        if start >= end {
            return None;
        }
        let mut names = Vec::new();
        for step in &self.steps[start + 1..end] {
            let name = match *step {
                Step::Work(what) => what,
                Step::Point(p @ Point::Enter(f)) if !probed(p) => super::function_slot(f),
                // do_exit and do_task_dead are functions too.
                Step::Point(p @ Point::Marker(m @ (Marker::DoExit | Marker::DoTaskDead)))
                    if !probed(p) =>
                {
                    super::marker_name(m)
                }
                Step::Point(_) => continue,
            };
            if names.last() != Some(&name) {
                names.push(name);
            }
        }
        Some(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracepoints_only(p: Point) -> bool {
        matches!(p, Point::Marker(_))
    }

    #[test]
    fn sched_process_exit_moved_in_6_16() {
        let old = ExitPath::for_kernel(KernelVersion::new(6, 12, 0));
        let new = ExitPath::for_kernel(KernelVersion::new(6, 18, 0));
        let spe = Point::Marker(Marker::SchedProcessExit);
        let exit_mm =
            |path: &ExitPath| path.steps.iter().position(|s| *s == Step::Work("exit_mm")).unwrap();
        assert!(old.position(spe).unwrap() > exit_mm(&old));
        assert!(new.position(spe).unwrap() < exit_mm(&new));
    }

    #[test]
    fn mq_put_mnt_only_before_6_3() {
        let f = Point::Enter(ExitFn::MqPutMnt);
        assert!(ExitPath::for_kernel(KernelVersion::new(6, 1, 0)).position(f).is_some());
        assert!(ExitPath::for_kernel(KernelVersion::new(6, 12, 0)).position(f).is_none());
    }

    #[test]
    fn gaps_list_unprobed_work_and_functions() {
        let path = ExitPath::for_kernel(KernelVersion::new(6, 18, 0));
        let between = path
            .between(
                Point::Marker(Marker::SchedProcessExit),
                Point::Marker(Marker::X86FpuDropped),
                tracepoints_only,
            )
            .unwrap();
        assert_eq!(
            between,
            [
                "perf_event_exit_task",
                "exit_mm",
                "acct_process",
                "exit_sem",
                "exit_shm",
                "exit_files",
                "exit_fs",
                "disassociate_ctty",
                "exit_task_namespaces",
                "put_ipc_ns",
                "task_work_run",
                "exit_thread",
            ]
        );
        let all = |_| true;
        assert_eq!(
            path.between(
                Point::Return(ExitFn::TaskstatsExit),
                Point::Enter(ExitFn::AcctProcess),
                all
            )
            .unwrap(),
            ["exit_mm"]
        );
        assert_eq!(
            path.between(Point::Return(ExitFn::ExitSem), Point::Enter(ExitFn::ExitShm), all)
                .unwrap(),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn out_of_order_points_have_no_gap() {
        let path = ExitPath::for_kernel(KernelVersion::new(6, 1, 0));
        assert!(
            path.between(Point::Enter(ExitFn::ExitFiles), Point::Enter(ExitFn::ExitSem), |_| true)
                .is_none()
        );
    }
}
