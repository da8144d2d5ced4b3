//! The order of `do_exit` on each kernel version: where every probe point sits, and what the
//! kernel does between them that no probe brackets (inlined functions, or work exitprof does not
//! probe). Gap stages are named from this table.
//!
//! Sources: `kernel/exit.c` of v5.10, v6.1, v6.12, v6.18, v7.2 and v7.3 as Debian ships them;
//! the positions that moved are marked with the version that moved them.

use exitprof_common::point::{ExitFn, Marker, Point};

use super::version::KernelVersion;

/// One step of the exit path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A probe point.
    Point(Point),
    /// Work the kernel does at this place that no probe point brackets.
    Work(&'static str),
    /// Such work that can wait in `do_exit`'s own frame, the compiler having inlined it there:
    /// a block whose innermost frame (the scheduler left out) is `do_exit` waited here.
    Waits(&'static str),
}

/// Where a step that moved between kernels sits in one variant of the path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Every variant has it here.
    Fixed,
    /// Only the variant in which the step moved early.
    Moved,
    /// Only the variant in which it did not.
    Kept,
}

/// A step, present on the kernels in `[since, until)`.
struct Entry {
    step: Step,
    since: Option<KernelVersion>,
    until: Option<KernelVersion>,
    place: Place,
}

const fn always(step: Step) -> Entry {
    Entry { step, since: None, until: None, place: Place::Fixed }
}

const fn since(v: (u32, u32), step: Step) -> Entry {
    Entry { step, since: Some(KernelVersion::new(v.0, v.1, 0)), until: None, place: Place::Fixed }
}

const fn until(v: (u32, u32), step: Step) -> Entry {
    Entry { step, since: None, until: Some(KernelVersion::new(v.0, v.1, 0)), place: Place::Fixed }
}

const fn between(from: (u32, u32), to: (u32, u32), step: Step) -> Entry {
    Entry {
        step,
        since: Some(KernelVersion::new(from.0, from.1, 0)),
        until: Some(KernelVersion::new(to.0, to.1, 0)),
        place: Place::Fixed,
    }
}

/// A step whose place depends on a change that stable kernels backported unevenly: the path
/// has a variant with it here, and one with it at its `kept` counterpart.
const fn moved(step: Step) -> Entry {
    Entry { step, since: None, until: None, place: Place::Moved }
}

const fn kept(step: Step) -> Entry {
    Entry { step, since: None, until: None, place: Place::Kept }
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

const fn waits(what: &'static str) -> Step {
    Step::Waits(what)
}

/// `do_exit`, in order. Nested calls sit between the entry and return of their caller.
const EXIT_PATH: &[Entry] = &[
    always(m(Marker::SysEnterExit)),
    always(m(Marker::SysEnterExitGroup)),
    always(m(Marker::SignalDeliverKill)),
    always(m(Marker::DoExit)),
    // Before exit_signals sets PF_EXITING, an exit can wait for a long time: for the other
    // threads of a core-dumping process (coredump_task_exit, inlined; since v6.18 folded into
    // synchronize_group_exit; before v5.16 in exit_mm), and in a tracer's exit stop
    // (ptrace_event(PTRACE_EVENT_EXIT) sleeps in ptrace_stop).
    until((6, 0), work("profile_task_exit")),
    between((6, 0), (6, 18), work("synchronize_group_exit")),
    since((6, 18), waits("synchronize_group_exit")),
    always(work("kcov_task_exit")),
    between((5, 16), (6, 18), waits("coredump_task_exit")),
    always(work("ptrace_event")),
    always(work("io_uring_files_cancel")),
    since((7, 0), work("sched_mm_cid_exit")),
    // Can wait for the cgroup threadgroup rwsem (cgroup_threadgroup_change_begin).
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
    // Mid-2025 kernels stop perf events before exit_mm ("sampling can touch ->mm"); stable
    // kernels got it too (Debian's 6.1.0-57 and 6.12.117 have it), so both places are kept.
    moved(enter(ExitFn::PerfEventExitTask)),
    moved(ret(ExitFn::PerfEventExitTask)),
    until((5, 16), waits("exit_mm")),
    since((5, 16), work("exit_mm")),
    always(enter(ExitFn::AcctProcess)),
    always(ret(ExitFn::AcctProcess)),
    until((6, 16), m(Marker::SchedProcessExit)),
    always(enter(ExitFn::ExitSem)),
    always(ret(ExitFn::ExitSem)),
    always(enter(ExitFn::ExitShm)),
    always(ret(ExitFn::ExitShm)),
    // v7.3 moved disassociate_ctty before exit_files.
    since((7, 3), work("disassociate_ctty")),
    always(enter(ExitFn::ExitFiles)),
    always(ret(ExitFn::ExitFiles)),
    always(enter(ExitFn::ExitFs)),
    always(ret(ExitFn::ExitFs)),
    until((7, 3), work("disassociate_ctty")),
    always(enter(ExitFn::ExitTaskNamespaces)),
    // The last reference's free (free_ipc_ns, mq_put_mnt) runs in a worker, not here.
    always(enter(ExitFn::PutIpcNs)),
    always(ret(ExitFn::PutIpcNs)),
    always(ret(ExitFn::ExitTaskNamespaces)),
    always(enter(ExitFn::TaskWorkRun)),
    always(ret(ExitFn::TaskWorkRun)),
    always(enter(ExitFn::ExitThread)),
    // Fired by fpu__drop for every exit before v6.16; since then only where the task's FPU
    // registers are still live (TIF_NEED_FPU_LOAD clear: not switched out since it left user
    // space), so the plan leaves it out there (`crate::probes::plan`). Kept on the path of
    // every version for the records of runs that had it.
    always(m(Marker::X86FpuDropped)),
    always(ret(ExitFn::ExitThread)),
    kept(enter(ExitFn::PerfEventExitTask)),
    kept(ret(ExitFn::PerfEventExitTask)),
    always(work("sched_autogroup_exit_task")),
    always(enter(ExitFn::CgroupExit)),
    always(ret(ExitFn::CgroupExit)),
    always(work("exit_notify")),
    // Threads reap themselves at the end of exit_notify; leaders are reaped by their parent.
    always(enter(ExitFn::ReleaseTask)),
    always(ret(ExitFn::ReleaseTask)),
    always(enter(ExitFn::ProcExitConnector)),
    always(ret(ExitFn::ProcExitConnector)),
    always(work("exit_io_context")),
    always(work("exit_rcu")),
    always(m(Marker::DoTaskDead)),
    always(work("__schedule")),
    always(m(Marker::FinalSwitch)),
];

/// The exit path of one kernel version, in each variant its moved steps allow (most likely
/// first).
#[derive(Clone, Debug)]
pub struct ExitPath {
    version: KernelVersion,
    variants: Vec<Vec<Step>>,
}

impl ExitPath {
    pub fn for_kernel(version: KernelVersion) -> Self {
        let on_kernel = |e: &&Entry| {
            e.since.is_none_or(|v| version >= v) && e.until.is_none_or(|v| version < v)
        };
        let variant = |excluded: Place| {
            EXIT_PATH
                .iter()
                .filter(on_kernel)
                .filter(|e| e.place != excluded)
                .map(|e| e.step)
                .collect::<Vec<_>>()
        };
        Self { version, variants: vec![variant(Place::Kept), variant(Place::Moved)] }
    }

    /// The kernel version this is the path of.
    pub fn version(&self) -> KernelVersion {
        self.version
    }

    /// Whether `what` is work inlined into `do_exit` that can wait there, on this kernel.
    pub fn waits_inline(&self, what: &str) -> bool {
        self.variants.iter().flatten().any(|s| matches!(s, Step::Waits(w) if *w == what))
    }

    /// The first variant in which `points`, in the order they fired, keep the path's order.
    #[expect(clippy::needless_pass_by_value, reason = "an iterator, cloned to walk each variant")]
    pub fn variant_for(&self, points: impl Iterator<Item = Point> + Clone) -> usize {
        (0..self.variants.len())
            .find(|&v| {
                let mut last = 0;
                points.clone().all(|p| match self.position_in(v, p) {
                    Some(pos) if pos >= last => {
                        last = pos;
                        true
                    }
                    _ => false,
                })
            })
            .unwrap_or(0)
    }

    /// Position of a probe point on this kernel's (most likely) path.
    pub fn position(&self, point: Point) -> Option<usize> {
        self.position_in(0, point)
    }

    fn position_in(&self, variant: usize, point: Point) -> Option<usize> {
        self.variants[variant].iter().position(|s| *s == Step::Point(point))
    }

    /// What lies strictly between two points in a variant, when `a` precedes `b` there:
    /// unprobed work and unprobed functions, in order (a probed function that lies between did
    /// not run). `None` when either point is not on the path, or they came in an order the
    /// path does not have.
    pub fn between(
        &self,
        variant: usize,
        a: Point,
        b: Point,
        probed: impl Fn(Point) -> bool,
    ) -> Option<Vec<&'static str>> {
        let (start, end) = (self.position_in(variant, a)?, self.position_in(variant, b)?);
        if start >= end {
            return None;
        }
        let mut names = Vec::new();
        for step in &self.variants[variant][start + 1..end] {
            let name = match *step {
                Step::Work(what) | Step::Waits(what) => what,
                Step::Point(p @ Point::Enter(f)) if !probed(p) => f.slot(),
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
        let exit_mm = |path: &ExitPath| {
            path.variants[0].iter().position(|s| *s == Step::Work("exit_mm")).unwrap()
        };
        assert!(old.position(spe).unwrap() > exit_mm(&old));
        assert!(new.position(spe).unwrap() < exit_mm(&new));
    }

    /// What lies between do_exit and exit_signals, where an exit can wait before PF_EXITING.
    fn before_exit_signals(version: KernelVersion) -> (Vec<&'static str>, Vec<&'static str>) {
        let path = ExitPath::for_kernel(version);
        let covers = path
            .between(0, Point::Marker(Marker::DoExit), Point::Enter(ExitFn::ExitSignals), |_| true)
            .unwrap();
        let waits = covers.iter().copied().filter(|w| path.waits_inline(w)).collect();
        (covers, waits)
    }

    #[test]
    fn the_stage_before_exit_signals_names_what_can_wait_there_per_kernel() {
        let (covers, waits) = before_exit_signals(KernelVersion::new(5, 10, 0));
        assert_eq!(
            covers,
            ["profile_task_exit", "kcov_task_exit", "ptrace_event", "io_uring_files_cancel"]
        );
        assert!(waits.is_empty(), "5.10 waits for a core dump in exit_mm");
        assert!(ExitPath::for_kernel(KernelVersion::new(5, 10, 0)).waits_inline("exit_mm"));
        for v in [KernelVersion::new(6, 1, 0), KernelVersion::new(6, 12, 0)] {
            let (covers, waits) = before_exit_signals(v);
            assert_eq!(covers[0], "synchronize_group_exit");
            assert!(covers.contains(&"ptrace_event"));
            assert_eq!(waits, ["coredump_task_exit"], "{v}");
        }
        let (covers, waits) = before_exit_signals(KernelVersion::new(6, 18, 0));
        assert!(!covers.contains(&"coredump_task_exit"));
        assert_eq!(waits, ["synchronize_group_exit"]);
        let (covers, _) = before_exit_signals(KernelVersion::new(7, 2, 0));
        assert_eq!(covers.last(), Some(&"sched_mm_cid_exit"));
    }

    #[test]
    fn disassociate_ctty_moved_before_exit_files_in_7_3() {
        let all = |_| true;
        let (files, fs) = (Point::Enter(ExitFn::ExitFiles), Point::Return(ExitFn::ExitFs));
        let after = |v| {
            ExitPath::for_kernel(v)
                .between(0, fs, Point::Enter(ExitFn::ExitTaskNamespaces), all)
                .unwrap()
        };
        assert_eq!(after(KernelVersion::new(7, 2, 0)), ["disassociate_ctty"]);
        assert!(after(KernelVersion::new(7, 3, 0)).is_empty());
        let before = ExitPath::for_kernel(KernelVersion::new(7, 3, 0))
            .between(0, Point::Return(ExitFn::ExitShm), files, all)
            .unwrap();
        assert_eq!(before, ["disassociate_ctty"]);
    }

    #[test]
    fn gaps_list_unprobed_work_and_functions() {
        let path = ExitPath::for_kernel(KernelVersion::new(6, 18, 0));
        let between = path
            .between(
                0,
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
                0,
                Point::Return(ExitFn::TaskstatsExit),
                Point::Enter(ExitFn::AcctProcess),
                all
            )
            .unwrap(),
            ["exit_mm"]
        );
        assert_eq!(
            path.between(0, Point::Return(ExitFn::ExitSem), Point::Enter(ExitFn::ExitShm), all)
                .unwrap(),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn the_variant_follows_where_perf_event_exit_task_fired() {
        let path = ExitPath::for_kernel(KernelVersion::new(6, 12, 0));
        let early = [
            Point::Return(ExitFn::TaskstatsExit),
            Point::Enter(ExitFn::PerfEventExitTask),
            Point::Return(ExitFn::PerfEventExitTask),
            Point::Marker(Marker::SchedProcessExit),
        ];
        let late = [
            Point::Return(ExitFn::ExitThread),
            Point::Enter(ExitFn::PerfEventExitTask),
            Point::Return(ExitFn::PerfEventExitTask),
            Point::Enter(ExitFn::CgroupExit),
        ];
        let v = path.variant_for(early.iter().copied());
        assert_eq!(v, 0);
        assert_eq!(
            path.between(v, early[2], early[3], |p| matches!(p, Point::Enter(_))).unwrap(),
            ["exit_mm"]
        );
        assert_eq!(path.variant_for(late.iter().copied()), 1);
    }

    #[test]
    fn out_of_order_points_have_no_gap() {
        let path = ExitPath::for_kernel(KernelVersion::new(6, 1, 0));
        assert!(
            path.between(0, Point::Enter(ExitFn::ExitFiles), Point::Enter(ExitFn::ExitSem), |_| {
                true
            })
            .is_none()
        );
    }
}
