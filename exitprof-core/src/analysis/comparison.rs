//! The comparison itself: the Yes/No/Ovhd table of the 2006 LKML taskstats benchmark from repeated, interleaved runs, and the
//! per-stage deltas that explain it.

use std::collections::HashMap;

use serde::Serialize;

use crate::analysis::{
    on_cpu::OnCpuReport,
    profile::Profile,
    stats::{Spread, overhead_pct},
};

/// What one run of one side measured.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RunMeasure {
    pub user_s: f64,
    pub sys_s: f64,
    pub elapsed_s: f64,
    /// Exits per second, as the 2006 thread computed it.
    pub exit_rate: f64,
    /// Taskstats listener: messages received and ENOBUFS seen during this run.
    pub listener_messages: Option<u64>,
    pub listener_enobufs: Option<u64>,
    /// The 10th percentile of this run's exits, where they were recorded (ns): the exits that
    /// nothing else on the machine delayed.
    pub exit_p10_ns: Option<f64>,
}

/// One row of the Yes/No/Ovhd table.
#[derive(Clone, Debug, Serialize)]
pub struct MetricRow {
    pub metric: &'static str,
    pub yes: Spread,
    pub no: Spread,
    /// `(Yes - No) / No * 100` of the medians.
    pub ovhd_pct: f64,
    /// The runs vary more than the sides differ: the overhead is not conclusive.
    pub within_noise: bool,
}

/// How one stage differs between the sides, per exit.
#[derive(Clone, Debug, Serialize)]
pub struct StageDelta {
    pub name: String,
    pub yes_ns_per_exit: f64,
    pub no_ns_per_exit: f64,
    pub delta_ns_per_exit: f64,
    /// This stage's part of the whole exit's delta.
    pub share_of_delta: f64,
    /// Off-CPU part of this stage's delta.
    pub off_cpu_delta_ns_per_exit: f64,
}

/// The per-stage explanation, when both sides were profiled.
#[derive(Clone, Debug, Serialize)]
pub struct StageDeltas {
    pub exit_yes_ns_per_exit: f64,
    pub exit_no_ns_per_exit: f64,
    pub exit_delta_ns_per_exit: f64,
    /// Sum of the stage deltas: equals `exit_delta_ns_per_exit` up to float rounding, since on
    /// each side the stages partition every exit exactly.
    pub stages_delta_sum_ns_per_exit: f64,
    /// Largest |delta| first.
    pub stages: Vec<StageDelta>,
}

/// How the on-CPU time of one sampled stack differs between the sides, per exit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OnCpuDelta {
    pub stage: String,
    /// Innermost frame first.
    pub stack: Vec<String>,
    pub yes_ns_per_exit: f64,
    pub no_ns_per_exit: f64,
    pub delta_ns_per_exit: f64,
}

/// One measured quantity of a run.
type Metric = fn(&RunMeasure) -> f64;

/// The Yes/No/Ovhd table of user, sys and elapsed time.
pub fn metric_rows(yes: &[RunMeasure], no: &[RunMeasure]) -> Vec<MetricRow> {
    let metrics: [(&'static str, Metric); 3] =
        [("user", |m| m.user_s), ("sys", |m| m.sys_s), ("elapsed", |m| m.elapsed_s)];
    metrics
        .into_iter()
        .map(|(metric, value)| {
            let yes = Spread::of(&yes.iter().map(value).collect::<Vec<_>>());
            let no = Spread::of(&no.iter().map(value).collect::<Vec<_>>());
            let effect = (yes.median - no.median).abs();
            MetricRow {
                metric,
                ovhd_pct: overhead_pct(yes.median, no.median),
                within_noise: effect <= yes.iqr().max(no.iqr()),
                yes,
                no,
            }
        })
        .collect()
}

/// Per exit, how much time each stage took on each side, and which stages explain the
/// difference of the whole exit.
pub fn stage_deltas(yes: &Profile, no: &Profile) -> StageDeltas {
    let per_exit = |ns: u128, exits: u64| if exits == 0 { 0.0 } else { ns as f64 / exits as f64 };
    let by_name = |p: &Profile| -> HashMap<String, (u128, u128)> {
        p.rows()
            .into_iter()
            .map(|r| (r.stage.name.clone(), (r.latency.total_ns, r.latency.off_cpu_ns)))
            .collect()
    };
    let (yes_rows, no_rows) = (by_name(yes), by_name(no));
    let exit_yes = per_exit(yes.exit().total_ns, yes.exits);
    let exit_no = per_exit(no.exit().total_ns, no.exits);
    let exit_delta = exit_yes - exit_no;
    // Stages in kernel order of the side that has them, each once.
    let mut names: Vec<String> = yes.rows().into_iter().map(|r| r.stage.name.clone()).collect();
    for r in no.rows() {
        if !names.contains(&r.stage.name) {
            names.push(r.stage.name.clone());
        }
    }
    let mut stages: Vec<StageDelta> = names
        .into_iter()
        .map(|name| {
            let total = |rows: &HashMap<String, (u128, u128)>, exits| {
                rows.get(&name)
                    .map_or((0.0, 0.0), |&(ns, off)| (per_exit(ns, exits), per_exit(off, exits)))
            };
            let (y, y_off) = total(&yes_rows, yes.exits);
            let (n, n_off) = total(&no_rows, no.exits);
            let delta = y - n;
            StageDelta {
                share_of_delta: if exit_delta == 0.0 { 0.0 } else { delta / exit_delta },
                off_cpu_delta_ns_per_exit: y_off - n_off,
                yes_ns_per_exit: y,
                no_ns_per_exit: n,
                delta_ns_per_exit: delta,
                name,
            }
        })
        .collect();
    let sum = stages.iter().map(|s| s.delta_ns_per_exit).sum();
    stages.sort_by(|a, b| b.delta_ns_per_exit.abs().total_cmp(&a.delta_ns_per_exit.abs()));
    StageDeltas {
        exit_yes_ns_per_exit: exit_yes,
        exit_no_ns_per_exit: exit_no,
        exit_delta_ns_per_exit: exit_delta,
        stages_delta_sum_ns_per_exit: sum,
        stages,
    }
}

/// Per exit, the estimated on-CPU time of each stack sampled in a stage that has samples on both
/// sides; largest |delta| first.
pub fn on_cpu_deltas(
    yes: &OnCpuReport,
    yes_exits: u64,
    no: &OnCpuReport,
    no_exits: u64,
) -> Vec<OnCpuDelta> {
    let per_exit = |ns: f64, exits: u64| if exits == 0 { 0.0 } else { ns / exits as f64 };
    let mut deltas = Vec::new();
    for y in &yes.stages {
        let Some(n) = no.stages.iter().find(|n| n.stage == y.stage) else { continue };
        let mut by_stack: HashMap<&[String], (f64, f64)> = HashMap::new();
        for s in &y.stacks {
            by_stack.entry(&s.stack).or_default().0 += per_exit(s.est_ns, yes_exits);
        }
        for s in &n.stacks {
            by_stack.entry(&s.stack).or_default().1 += per_exit(s.est_ns, no_exits);
        }
        deltas.extend(by_stack.into_iter().map(|(stack, (y_ns, n_ns))| OnCpuDelta {
            stage: y.stage.clone(),
            stack: stack.to_vec(),
            yes_ns_per_exit: y_ns,
            no_ns_per_exit: n_ns,
            delta_ns_per_exit: y_ns - n_ns,
        }));
    }
    deltas.sort_by(|a, b| {
        b.delta_ns_per_exit
            .abs()
            .total_cmp(&a.delta_ns_per_exit.abs())
            .then_with(|| a.stack.cmp(&b.stack))
    });
    deltas
}

#[cfg(test)]
pub(crate) mod tests {
    use exitprof_common::point::{Marker, Point};

    use super::*;
    use crate::probes::plan::Plan;
    use crate::{
        analysis::records::{Exit, PointHit},
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    pub(crate) fn measure(user: f64, sys: f64, elapsed: f64) -> RunMeasure {
        RunMeasure { user_s: user, sys_s: sys, elapsed_s: elapsed, ..RunMeasure::default() }
    }

    #[test]
    fn the_yes_no_ovhd_table_from_medians() {
        let yes = [measure(0.14, 1.61, 2.01), measure(0.15, 1.60, 2.00), measure(0.13, 1.62, 2.02)];
        let no = [measure(0.15, 1.54, 1.94), measure(0.16, 1.53, 1.93), measure(0.14, 1.55, 1.95)];
        let rows = metric_rows(&yes, &no);
        let sys = &rows[1];
        assert_eq!(sys.metric, "sys");
        assert!((sys.ovhd_pct - (1.61 - 1.54) / 1.54 * 100.0).abs() < 1e-9, "{}", sys.ovhd_pct);
        assert!(!sys.within_noise);
        // user differs by 0.01 s while each side spreads over 0.01 s: noise.
        assert!(rows[0].within_noise);
    }

    fn profile_of(exits: &[&[(Point, u64)]]) -> Profile {
        let plan = Plan::with_sites(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                (SiteId::Marker(Marker::SchedProcessExit), How::BtfTracepoint, "x"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        let mut p = Profile::new(&plan);
        for hits in exits {
            p.add(&Exit {
                pid: 2,
                tgid: 1,
                hits: hits
                    .iter()
                    .map(|&(point, ts_ns)| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 })
                    .collect(),
                ..Exit::default()
            });
        }
        p
    }

    /// Two sides whose exits differ by 3.5 us, 3 us of it up to taskstats_exit: (on, off).
    pub(crate) fn taskstats_slower() -> (Profile, Profile) {
        let start = Point::Marker(Marker::SysEnterExit);
        let spe = Point::Marker(Marker::SchedProcessExit);
        let end = Point::Marker(Marker::FinalSwitch);
        // With the condition on, the part up to taskstats_exit takes 3 us longer.
        let yes = profile_of(&[
            &[(start, 0), (spe, 5_000), (end, 7_000)],
            &[(start, 0), (spe, 4_000), (end, 7_500)],
        ]);
        let no = profile_of(&[
            &[(start, 0), (spe, 1_500), (end, 3_500)],
            &[(start, 0), (spe, 1_500), (end, 4_000)],
        ]);
        (yes, no)
    }

    #[test]
    fn stage_deltas_add_up_to_the_exit_delta() {
        let (yes, no) = taskstats_slower();
        let d = stage_deltas(&yes, &no);
        assert_eq!(d.exit_delta_ns_per_exit, 3_500.0);
        assert!((d.stages_delta_sum_ns_per_exit - d.exit_delta_ns_per_exit).abs() < 1e-6);
        let top = &d.stages[0];
        assert_eq!(top.name, "do_exit…taskstats_exit");
        assert_eq!(top.delta_ns_per_exit, 3_000.0);
        assert!((top.share_of_delta - 3_000.0 / 3_500.0).abs() < 1e-12);
    }

    #[test]
    fn on_cpu_deltas_compare_stacks_of_stages_sampled_on_both_sides() {
        use crate::analysis::{
            exit_stacks::JoinCounts,
            on_cpu::{OnCpuIn, StageOnCpu},
        };
        let stage = |name: &str, stacks: &[(&str, f64)]| StageOnCpu {
            stage: name.to_owned(),
            samples: 10,
            on_cpu_ns: 0,
            mostly_in: None,
            stacks: stacks
                .iter()
                .map(|&(f, est_ns)| OnCpuIn {
                    stack: vec![f.to_owned()],
                    samples: 1,
                    share: 0.0,
                    est_ns,
                })
                .collect(),
        };
        let report = |stages| OnCpuReport { sampled: JoinCounts::default(), stages };
        let yes = report(vec![
            stage("exit_files", &[("filp_close", 8_000.0), ("fput", 1_000.0)]),
            stage("only_on", &[("x", 5_000.0)]),
        ]);
        let no = report(vec![stage("exit_files", &[("filp_close", 2_000.0), ("dput", 500.0)])]);
        let d = on_cpu_deltas(&yes, 2, &no, 1);
        let rows: Vec<(&str, f64, f64)> =
            d.iter().map(|d| (d.stack[0].as_str(), d.yes_ns_per_exit, d.no_ns_per_exit)).collect();
        assert_eq!(
            rows,
            [("filp_close", 4_000.0, 2_000.0), ("dput", 0.0, 500.0), ("fput", 500.0, 0.0)]
        );
    }
}
