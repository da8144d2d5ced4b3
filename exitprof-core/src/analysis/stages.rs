//! Stage assembly: turns one exit's probe hits into stages that sum exactly to the whole exit.
//!
//! Each interval between two consecutive hits belongs to exactly one stage: the innermost traced
//! function open at that time, or, between functions, the gap named after the kernel work that
//! lies there on the running kernel (from [`ExitPath`]).

use std::collections::{HashMap, HashSet};

use exitprof_common::point::{ExitFn, Point};

use crate::{
    analysis::records::Exit,
    kernel::{exit_path::ExitPath, marker_name},
    probes::plan::Plan,
};

/// One stage's share of one exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Index into [`StageNamer::stages`].
    pub stage: usize,
    pub ns: u64,
    pub off_cpu_ns: u64,
    pub runq_ns: u64,
}

/// The span (index into [`StageNamer::spans`]) of a moment of an exit, from the hits the exit
/// had then: the span from the last of them to the next. `None` before the first hit.
pub fn span_after(hits: u32) -> Option<usize> {
    (hits as usize).checked_sub(1)
}

/// A stage: a traced function (its own time, without traced callees) or a gap between probes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Stage {
    pub name: String,
    /// What the kernel does in this stage, in order (for a gap: everything between its bounds).
    pub covers: Vec<String>,
    /// The part of `covers` inlined into `do_exit` that can wait there (a block whose innermost
    /// frame is `do_exit` waited in one of these).
    #[serde(skip)]
    pub waits_inline: Vec<String>,
    /// Positions of its bounds on the exit path, for ordering stages as the kernel runs them.
    #[serde(skip)]
    pub order: (usize, usize),
}

/// Names and orders stages for one probe plan; stage indices are stable for its lifetime.
pub struct StageNamer {
    path: ExitPath,
    probed: HashSet<Point>,
    symbols: HashMap<ExitFn, String>,
    stages: Vec<Stage>,
    by_key: HashMap<(usize, Point, Point, Option<ExitFn>), usize>,
    by_name: HashMap<String, usize>,
}

impl StageNamer {
    pub fn new(plan: &Plan) -> Self {
        let mut probed = HashSet::new();
        let mut symbols = HashMap::new();
        for planned in &plan.points {
            probed.extend(planned.site.points());
            if let crate::probes::plan::SiteId::Function(f) = planned.site {
                symbols.insert(f, planned.target.clone());
            }
        }
        Self {
            path: plan.exit_path.clone(),
            probed,
            symbols,
            stages: Vec::new(),
            by_key: HashMap::new(),
            by_name: HashMap::new(),
        }
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// Splits an exit into stage spans, in firing order. Their durations sum to
    /// [`Exit::duration_ns`] exactly.
    pub fn spans(&mut self, exit: &Exit) -> Vec<Span> {
        let variant = self.path.variant_for(exit.hits.iter().map(|h| h.point));
        let mut open: Vec<ExitFn> = Vec::new();
        let mut spans = Vec::with_capacity(exit.hits.len());
        for pair in exit.hits.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            match a.point {
                Point::Enter(f) => open.push(f),
                Point::Return(f) => {
                    // Unwind to the matching entry; a return without one closes nothing.
                    if let Some(depth) = open.iter().rposition(|&g| g == f) {
                        open.truncate(depth);
                    }
                }
                Point::Marker(_) => {}
            }
            let stage = self.stage(variant, a.point, b.point, open.last().copied());
            spans.push(Span {
                stage,
                ns: b.ts_ns.saturating_sub(a.ts_ns),
                off_cpu_ns: b.off_cpu_ns.saturating_sub(a.off_cpu_ns),
                runq_ns: b.runq_ns.saturating_sub(a.runq_ns),
            });
        }
        spans
    }

    fn stage(&mut self, variant: usize, a: Point, b: Point, inside: Option<ExitFn>) -> usize {
        let key = (variant, a, b, inside);
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        let stage = match inside {
            Some(f) => Stage {
                name: self.symbol(f),
                covers: vec![self.symbol(f)],
                waits_inline: Vec::new(),
                order: (self.position(Point::Enter(f)), self.position(Point::Return(f))),
            },
            None => self.gap(variant, a, b),
        };
        let i = match self.by_name.get(&stage.name) {
            Some(&i) => i,
            None => {
                self.stages.push(stage.clone());
                self.by_name.insert(stage.name, self.stages.len() - 1);
                self.stages.len() - 1
            }
        };
        self.by_key.insert(key, i);
        i
    }

    fn gap(&self, variant: usize, a: Point, b: Point) -> Stage {
        let order = (self.position(a), self.position(b));
        let between = self.path.between(variant, a, b, |p| self.probed.contains(&p));
        let covers: Vec<String> = match between {
            Some(names) => names
                .into_iter()
                .map(|n| match ExitFn::ALL.iter().find(|&&f| f.slot() == n) {
                    Some(&f) => self.symbol(f),
                    None => n.to_owned(),
                })
                .collect(),
            None => Vec::new(),
        };
        let name = match covers.as_slice() {
            [] => format!("{}→{}", self.point_name(a), self.point_name(b)),
            [one] => one.clone(),
            [first, second] => format!("{first}+{second}"),
            [first, .., last] => format!("{first}…{last}"),
        };
        let waits_inline = covers.iter().filter(|c| self.path.waits_inline(c)).cloned().collect();
        Stage { name, covers, waits_inline, order }
    }

    fn position(&self, p: Point) -> usize {
        self.path.position(p).unwrap_or(usize::MAX)
    }

    /// The symbol a function slot resolved to (its slot name when it is not probed).
    fn symbol(&self, f: ExitFn) -> String {
        self.symbols.get(&f).cloned().unwrap_or_else(|| f.slot().to_owned())
    }

    /// A probe point's name: its marker's, or its function's symbol.
    pub fn point_name(&self, p: Point) -> String {
        match p {
            Point::Marker(m) => marker_name(m).to_owned(),
            Point::Enter(f) | Point::Return(f) => self.symbol(f),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use exitprof_common::point::Marker;

    use super::*;
    use crate::{
        analysis::records::PointHit,
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    fn exit(hits: &[(Point, u64, u64)]) -> Exit {
        Exit {
            pid: 2,
            tgid: 1,
            hits: hits
                .iter()
                .map(|&(point, ts_ns, off_cpu_ns)| PointHit {
                    point,
                    ts_ns,
                    off_cpu_ns,
                    runq_ns: 0,
                })
                .collect(),
            ..Exit::default()
        }
    }

    fn named(namer: &StageNamer, spans: &[Span]) -> Vec<(String, u64, u64)> {
        spans.iter().map(|s| (namer.stages()[s.stage].name.clone(), s.ns, s.off_cpu_ns)).collect()
    }

    const SPE: Point = Point::Marker(Marker::SchedProcessExit);
    const FPU: Point = Point::Marker(Marker::X86FpuDropped);
    const END: Point = Point::Marker(Marker::FinalSwitch);

    /// The tracepoint points of an exit after its start, as on 6.18.
    const TRACEPOINTS_AFTER_START: [(SiteId, How, &str); 3] = [
        (SiteId::Marker(Marker::SchedProcessExit), How::BtfTracepoint, "sched_process_exit"),
        (SiteId::Marker(Marker::X86FpuDropped), How::BtfTracepoint, "x86_fpu_dropped"),
        (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
    ];

    #[test]
    fn tracepoint_mode_gaps_are_named_after_the_work_between() {
        let mut sites = vec![(
            SiteId::Marker(Marker::SysEnterExit),
            How::Tracepoint,
            "syscalls:sys_enter_exit",
        )];
        sites.extend(TRACEPOINTS_AFTER_START);
        let plan = Plan::with_sites(KernelVersion::new(6, 18, 0), &sites);
        let mut namer = StageNamer::new(&plan);
        let e = exit(&[
            (Point::Marker(Marker::SysEnterExit), 100, 0),
            (SPE, 1_100, 0),
            (FPU, 2_000, 0),
            (END, 6_000, 3_000),
        ]);
        let spans = namer.spans(&e);
        assert_eq!(
            named(&namer, &spans),
            [
                ("do_exit…taskstats_exit".to_owned(), 1_000, 0),
                ("perf_event_exit_task…exit_thread".to_owned(), 900, 0),
                ("sched_autogroup_exit_task…__schedule".to_owned(), 4_000, 3_000),
            ]
        );
        assert_eq!(spans.iter().map(|s| s.ns).sum::<u64>(), e.duration_ns());
        let covers = &namer.stages()[spans[0].stage].covers;
        assert_eq!(
            covers,
            &[
                "do_exit",
                "synchronize_group_exit",
                "kcov_task_exit",
                "ptrace_event",
                "io_uring_files_cancel",
                "exit_signals",
                "exit_itimers",
                "acct_collect",
                "taskstats_exit"
            ]
        );
    }

    #[test]
    fn a_missing_conditional_marker_makes_a_wider_gap() {
        let plan = Plan::with_sites(KernelVersion::new(6, 18, 0), &TRACEPOINTS_AFTER_START);
        let mut namer = StageNamer::new(&plan);
        let spans = namer.spans(&exit(&[(SPE, 0, 0), (END, 500, 100)]));
        assert_eq!(
            named(&namer, &spans),
            [("perf_event_exit_task…__schedule".to_owned(), 500, 100)]
        );
    }

    #[test]
    fn functions_take_their_own_time_and_nested_calls_theirs() {
        let f = |f: ExitFn, symbol: &'static str| (SiteId::Function(f), How::Kprobe, symbol);
        let plan = Plan::with_sites(
            KernelVersion::new(6, 1, 0),
            &[
                (SiteId::Marker(Marker::DoExit), How::Kprobe, "do_exit"),
                f(ExitFn::ExitFs, "exit_fs"),
                f(ExitFn::ExitTaskNamespaces, "exit_task_namespaces"),
                f(ExitFn::PutIpcNs, "put_ipc_ns"),
                f(ExitFn::TaskWorkRun, "task_work_run"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        let mut namer = StageNamer::new(&plan);
        let e = exit(&[
            (Point::Marker(Marker::DoExit), 0, 0),
            (Point::Enter(ExitFn::ExitFs), 10, 0),
            (Point::Return(ExitFn::ExitFs), 20, 0),
            (Point::Enter(ExitFn::ExitTaskNamespaces), 25, 0),
            (Point::Enter(ExitFn::PutIpcNs), 30, 0),
            (Point::Return(ExitFn::PutIpcNs), 50, 0),
            (Point::Return(ExitFn::ExitTaskNamespaces), 55, 0),
            (Point::Enter(ExitFn::TaskWorkRun), 60, 0),
            (Point::Return(ExitFn::TaskWorkRun), 61, 0),
            (END, 100, 0),
        ]);
        let spans = namer.spans(&e);
        let names: Vec<String> = named(&namer, &spans).into_iter().map(|(n, ..)| n).collect();
        assert_eq!(
            names,
            [
                "synchronize_group_exit…exit_files".to_owned(),
                "exit_fs".to_owned(),
                "disassociate_ctty".to_owned(),
                "exit_task_namespaces".to_owned(),
                "put_ipc_ns".to_owned(),
                "exit_task_namespaces".to_owned(),
                "exit_task_namespaces→task_work_run".to_owned(),
                "task_work_run".to_owned(),
                "exit_thread…__schedule".to_owned(),
            ]
        );
        assert_eq!(spans.iter().map(|s| s.ns).sum::<u64>(), 100);
        // exit_task_namespaces' two intervals are one stage: its own time around put_ipc_ns.
        assert_eq!(spans[3].stage, spans[5].stage);
    }

    #[test]
    fn points_out_of_kernel_order_are_named_by_their_bounds() {
        let plan = Plan::with_sites(
            KernelVersion::new(6, 12, 0),
            &[
                (SiteId::Function(ExitFn::ExitFiles), How::Kprobe, "exit_files"),
                (SiteId::Function(ExitFn::ExitSem), How::Kprobe, "exit_sem"),
            ],
        );
        let mut namer = StageNamer::new(&plan);
        let spans = namer.spans(&exit(&[
            (Point::Return(ExitFn::ExitFiles), 0, 0),
            (Point::Enter(ExitFn::ExitSem), 7, 0),
        ]));
        assert_eq!(named(&namer, &spans), [("exit_files→exit_sem".to_owned(), 7, 0)]);
    }
}
