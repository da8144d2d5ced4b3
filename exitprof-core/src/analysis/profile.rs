//! The profile of a run: every recorded exit folded into per-stage latency histograms.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use exitprof_common::{point::Point, record::FLAG_LATE_START};

use crate::{
    analysis::{
        histogram::Latency,
        records::{Exit, ExitKind},
        stages::{Span, Stage, StageNamer},
    },
    probes::plan::Plan,
};

/// Per-stage histograms of every exit seen, and of each kind of exit apart.
pub struct Profile {
    namer: StageNamer,
    all: Histograms,
    /// Thread exits and process exits, by [`ExitKind`] (in `ExitKind::ALL` order).
    kinds: [Histograms; 3],
    /// Exits recorded.
    pub exits: u64,
    /// Exits whose start marker was not seen (they began on a path no start probe covers).
    pub late_starts: u64,
    /// Probe hits that did not fit in a record.
    pub lost_hits: u64,
    /// Exits that ran out of hit slots: counted whole, their stages left out (the hits between
    /// their last kept one and their end are unknown, so would be blamed on the wrong stage).
    pub truncated: u64,
    /// Exits whose hits were clamped into order ([`crate::analysis::records::in_order`]).
    pub clamped: u64,
}

/// The whole exit's histogram and each stage's, indexed as the stage namer numbers stages.
#[derive(Default)]
struct Histograms {
    exit: Latency,
    /// The whole exits timed from their start, and those timed late, from the first exit-only
    /// point they reached (no start probe covered their path), by that point.
    from_start: Latency,
    late: BTreeMap<Point, Latency>,
    stages: Vec<Latency>,
}

/// One series of a kind of exit: a stage's latencies, or the whole exit's timed from one point
/// (`exit` from its first instant, `exit_from_<point>` from a later point).
pub struct KindSeries<'a> {
    pub kind: ExitKind,
    pub stage: Cow<'a, str>,
    pub latency: &'a Latency,
}

/// One row of the stage table.
pub struct StageRow<'a> {
    pub stage: &'a Stage,
    pub latency: &'a Latency,
    /// This stage's share of the total exit time.
    pub share_of_exit: f64,
}

impl Profile {
    pub fn new(plan: &Plan) -> Self {
        // The whole exits timed late from the point where most will be exist from the start
        // too: a monitor's counter that first appears with the exits of a burst in it loses
        // them from `rate()`.
        let histograms = || {
            let mut h = Histograms::default();
            h.late.extend(plan.late_start_point().map(|p| (p, Latency::default())));
            h
        };
        Self {
            namer: StageNamer::new(plan),
            all: histograms(),
            kinds: std::array::from_fn(|_| histograms()),
            exits: 0,
            late_starts: 0,
            lost_hits: 0,
            truncated: 0,
            clamped: 0,
        }
    }

    /// Folds one exit in; returns the spans it was cut into (their `stage` indexes
    /// [`Self::stage`]), none for a truncated exit.
    pub fn add(&mut self, exit: &Exit) -> Vec<Span> {
        self.exits += 1;
        let late = exit.flags & FLAG_LATE_START != 0;
        if late {
            self.late_starts += 1;
        }
        self.lost_hits += u64::from(exit.lost_hits);
        self.clamped += u64::from(exit.clamped);
        let kind = &mut self.kinds[exit.kind() as usize];
        let (ns, off, runq) = (exit.duration_ns(), exit.off_cpu_ns(), exit.runq_ns());
        for h in [&mut self.all, kind] {
            h.exit.record_waits(ns, off, runq);
            let whole = match exit.hits.first() {
                Some(first) if late => h.late.entry(first.point).or_default(),
                _ => &mut h.from_start,
            };
            whole.record_waits(ns, off, runq);
        }
        if exit.truncated() {
            self.truncated += 1;
            return Vec::new();
        }
        // A stage can occur more than once in one exit (a function split by a nested probe);
        // each exit contributes one value per stage. (Saturating: a damaged record's hits may
        // go back and forth in time.)
        let mut per_stage: HashMap<usize, (u64, u64, u64)> = HashMap::new();
        let spans = self.namer.spans(exit);
        for span in &spans {
            let e = per_stage.entry(span.stage).or_default();
            e.0 = e.0.saturating_add(span.ns);
            e.1 = e.1.saturating_add(span.off_cpu_ns);
            e.2 = e.2.saturating_add(span.runq_ns);
        }
        let stages = self.namer.stages().len();
        let kind = &mut self.kinds[exit.kind() as usize];
        for h in [&mut self.all, kind] {
            h.stages.resize_with(stages, Latency::default);
            for (&stage, &(ns, off, runq)) in &per_stage {
                h.stages[stage].record_waits(ns, off, runq);
            }
        }
        spans
    }

    /// The series of the whole exit an exit counts in: `exit`, or `exit_from_<point>` where it
    /// was timed late from that point.
    pub fn whole_exit_series(&self, exit: &Exit) -> Cow<'static, str> {
        match exit.hits.first() {
            Some(first) if exit.flags & FLAG_LATE_START != 0 => {
                Cow::Owned(self.late_series(first.point))
            }
            _ => Cow::Borrowed("exit"),
        }
    }

    /// The series of the whole exits timed late from `point`.
    fn late_series(&self, point: Point) -> String {
        format!("exit_from_{}", self.namer.point_name(point))
    }

    /// A stage by its index in the spans [`Self::add`] returns, with its latencies.
    pub fn stage(&self, index: usize) -> Option<(&Stage, &Latency)> {
        Some((self.namer.stages().get(index)?, self.all.stages.get(index)?))
    }

    /// The whole exit.
    pub fn exit(&self) -> &Latency {
        &self.all.exit
    }

    /// The stages, in the order the kernel runs them.
    pub fn rows(&self) -> Vec<StageRow<'_>> {
        self.rows_of(&self.all)
    }

    /// The kinds of exit that occurred, each with its whole exit and its stages.
    pub fn kinds(&self) -> Vec<(ExitKind, &Latency, Vec<StageRow<'_>>)> {
        ExitKind::ALL
            .into_iter()
            .zip(&self.kinds)
            .filter(|(_, h)| h.exit.count() > 0)
            .map(|(kind, h)| (kind, &h.exit, self.rows_of(h)))
            .collect()
    }

    fn rows_of<'a>(&'a self, h: &'a Histograms) -> Vec<StageRow<'a>> {
        let exit_total = h.exit.total_ns;
        let mut rows: Vec<StageRow<'_>> = self
            .namer
            .stages()
            .iter()
            .zip(&h.stages)
            .filter(|(_, latency)| latency.count() > 0)
            .map(|(stage, latency)| {
                let share =
                    if exit_total == 0 { 0.0 } else { latency.total_ns as f64 / exit_total as f64 };
                StageRow { stage, latency, share_of_exit: share }
            })
            .collect();
        rows.sort_by_key(|r| r.stage.order);
        rows
    }

    /// Each kind of exit's histograms with their stage names, in kernel order: the whole exit
    /// (`exit`) first, timed from its start, then `exit_from_<point>` for each later point some
    /// exits were timed from (no start probe covered their path). Both whole exits that the
    /// plan expects are there before any exit of the kind: a monitor's series exist from the
    /// start.
    pub fn latencies_by_kind(&self) -> impl Iterator<Item = KindSeries<'_>> {
        ExitKind::ALL.into_iter().zip(&self.kinds).flat_map(move |(kind, h)| {
            let whole = std::iter::once((Cow::Borrowed("exit"), &h.from_start))
                .chain(h.late.iter().map(|(&point, l)| (Cow::Owned(self.late_series(point)), l)))
                .map(move |(stage, latency)| KindSeries { kind, stage, latency });
            let stages = self.rows_of(h).into_iter().map(move |row| KindSeries {
                kind,
                stage: Cow::Borrowed(row.stage.name.as_str()),
                latency: row.latency,
            });
            whole.chain(stages)
        })
    }

    /// Every histogram with its stage name, in kernel order: the whole exit (`exit`) first.
    pub fn latencies(&self) -> impl Iterator<Item = (&str, &Latency)> {
        std::iter::once(("exit", &self.all.exit))
            .chain(self.rows().into_iter().map(|row| (row.stage.name.as_str(), row.latency)))
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::{
        point::{Marker, Point},
        record::{FLAG_GROUP_DEAD, FLAG_KIND_KNOWN, FLAG_TRUNCATED},
    };

    use super::*;
    use crate::{
        analysis::records::PointHit,
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    fn profile() -> Profile {
        Profile::new(&Plan::with_sites(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                (
                    SiteId::Marker(Marker::SchedProcessExit),
                    How::BtfTracepoint,
                    "sched_process_exit",
                ),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        ))
    }

    fn exit(flags: u32, times: [u64; 3]) -> Exit {
        let points = [Marker::SysEnterExit, Marker::SchedProcessExit, Marker::FinalSwitch]
            .map(Point::Marker);
        Exit {
            flags,
            hits: points
                .into_iter()
                .zip(times)
                .map(|(point, ts_ns)| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 })
                .collect(),
            ..Exit::default()
        }
    }

    #[test]
    fn thread_and_process_exits_have_stage_tables_of_their_own() {
        let mut p = profile();
        p.add(&exit(FLAG_KIND_KNOWN, [0, 100, 1_000]));
        p.add(&exit(FLAG_KIND_KNOWN, [0, 300, 1_000]));
        p.add(&exit(FLAG_KIND_KNOWN | FLAG_GROUP_DEAD, [0, 5_000, 10_000]));
        // group_dead seen without knowing it was exact: neither kind is claimed.
        p.add(&exit(FLAG_GROUP_DEAD, [0, 7_000, 20_000]));
        let kinds = p.kinds();
        let counts: Vec<(ExitKind, u64)> = kinds.iter().map(|(k, e, _)| (*k, e.count())).collect();
        assert_eq!(counts, [(ExitKind::Thread, 2), (ExitKind::Process, 1), (ExitKind::Unknown, 1)]);
        let (_, exit, rows) = &kinds[1];
        assert_eq!(exit.total_ns, 10_000);
        assert_eq!(rows.iter().map(|r| r.latency.total_ns).sum::<u128>(), 10_000);
        assert_eq!(p.exit().count(), 4);
    }

    /// Where a start probe is missing, the series of the exits timed late exist before any
    /// exit; where every start is seen, there is none.
    #[test]
    fn the_late_whole_exit_series_exist_before_any_exit_where_the_plan_expects_them() {
        let series = |p: &Profile| -> Vec<(ExitKind, String, u64)> {
            p.latencies_by_kind()
                .map(|s| (s.kind, s.stage.into_owned(), s.latency.count()))
                .collect()
        };
        let expected: Vec<_> = ExitKind::ALL
            .into_iter()
            .flat_map(|k| {
                [(k, "exit".to_owned(), 0), (k, "exit_from_sched_process_exit".to_owned(), 0)]
            })
            .collect();
        assert_eq!(series(&profile()), expected);

        let every_start = Profile::new(&Plan::with_sites(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::DoExit), How::Kprobe, "do_exit"),
                (
                    SiteId::Marker(Marker::SchedProcessExit),
                    How::BtfTracepoint,
                    "sched_process_exit",
                ),
            ],
        ));
        let whole_only: Vec<_> =
            ExitKind::ALL.into_iter().map(|k| (k, "exit".to_owned(), 0)).collect();
        assert_eq!(series(&every_start), whole_only);
    }

    #[test]
    fn a_truncated_exit_counts_whole_and_blames_no_stage() {
        let mut p = profile();
        p.add(&exit(0, [0, 100, 1_000]));
        // Its hits between the kept ones are unknown: the span before its end would be blamed
        // on the wrong stage.
        p.add(&exit(FLAG_TRUNCATED, [0, 100, 50_000]));
        assert_eq!((p.exits, p.truncated, p.exit().count()), (2, 1, 2));
        assert_eq!(p.exit().total_ns, 51_000);
        let stage_total: u128 = p.rows().iter().map(|r| r.latency.total_ns).sum();
        assert_eq!(stage_total, 1_000, "only the complete exit's stages");
    }
}
