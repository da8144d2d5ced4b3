//! exitprof's own effect on what it measures: its eBPF programs run inside the exits they time,
//! and each run adds its length to the exit and to one of its stages. Shown beside the stages,
//! never subtracted from them.
//!
//! Each hit of an exit is one run of the program the plan attached at its point. A program runs
//! at the instant of its hit and delays what follows, so its run counts in the stage that starts
//! at that hit. The last hit, the final switch-out, stamps the end of the exit before its
//! program does its work (sending the record), so that run falls after the exit and does not
//! count. A run is priced at its program's mean run time over the run, from the kernel's BPF
//! statistics (`--bpf-stats`).

use std::collections::{BTreeMap, HashMap};

use exitprof_common::point::Point;
use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        comparison::RunMeasure, profile::Profile, records::Exit, stages::Span, stats::Spread,
    },
    probes::{counts::ProgramCost, plan::Plan},
};

/// What the figures count and what they leave out, for the reader of the document.
pub const COUNTED: &str = "each hit of an exit but its last (the final switch-out stamps the \
    end before its program runs) is one run of the program attached at its point, placed in the \
    stage that starts at the hit and priced at that program's mean run time over the run (which \
    includes its quick runs on tasks that are not exiting, so a hit may cost more); not counted: \
    sched_switch's runs at the exit's other switch-outs and switch-ins and the sampler's ticks \
    on the exit, which the records do not count";

/// Program runs inside exits, counted as the records come in and priced once the run is over.
pub struct ProbeRuns {
    /// The program the plan attached at each point.
    programs: HashMap<Point, &'static str>,
    /// Per stage, indexed as the profile numbers stages: runs of each program inside it. By
    /// name, so that pricing adds them up in one order: the same records give the same figures
    /// to the last bit in every process (a record file's report is the document its run printed).
    stages: Vec<BTreeMap<&'static str, u64>>,
    /// Runs of each program inside whole exits.
    exits: BTreeMap<&'static str, u64>,
}

impl ProbeRuns {
    pub fn new(plan: &Plan) -> Self {
        let programs = plan
            .points
            .iter()
            .flat_map(|planned| planned.site.points())
            .filter_map(|point| Some((point, plan.program_at(point)?)))
            .collect();
        Self { programs, stages: Vec::new(), exits: BTreeMap::new() }
    }

    /// Counts the program runs of one exit, cut into `spans` (none for a truncated exit: its
    /// runs count in the whole exit only).
    pub fn exit(&mut self, exit: &Exit, spans: &[Span]) {
        let inside = exit.hits.len().saturating_sub(1);
        for (i, hit) in exit.hits[..inside].iter().enumerate() {
            // A point the plan does not have comes only from a damaged record.
            let Some(&program) = self.programs.get(&hit.point) else { continue };
            *self.exits.entry(program).or_default() += 1;
            if let Some(span) = spans.get(i) {
                if self.stages.len() <= span.stage {
                    self.stages.resize_with(span.stage + 1, BTreeMap::new);
                }
                *self.stages[span.stage].entry(program).or_default() += 1;
            }
        }
    }

    /// The effect, with each program priced at its mean run time in `costs`.
    pub fn effect(&self, profile: &Profile, costs: &[ProgramCost]) -> ProbeEffect {
        let per_run: HashMap<&str, f64> = costs
            .iter()
            .filter(|c| c.runs > 0)
            .map(|c| (c.program.as_str(), c.run_ns as f64 / c.runs as f64))
            .collect();
        let price = |runs: &BTreeMap<&'static str, u64>| -> f64 {
            runs.iter().map(|(p, &n)| n as f64 * per_run.get(p).copied().unwrap_or(0.0)).sum()
        };
        let exits = profile.exits.max(1) as f64;
        let stages = self
            .stages
            .iter()
            .enumerate()
            .filter_map(|(index, runs)| {
                let (stage, latency) = profile.stage(index)?;
                (latency.count() > 0).then(|| StageEffect {
                    stage: stage.name.clone(),
                    ns_per_exit: price(runs) / latency.count() as f64,
                })
            })
            .collect();
        let mut programs: Vec<ProgramEffect> = self
            .exits
            .iter()
            .map(|(&program, &runs)| {
                let ns_per_run = per_run.get(program).copied().unwrap_or(0.0);
                ProgramEffect {
                    program: program.to_owned(),
                    runs_in_exits: runs,
                    ns_per_run,
                    ns_per_exit: runs as f64 * ns_per_run / exits,
                }
            })
            .collect();
        programs.sort_by(|a, b| b.ns_per_exit.total_cmp(&a.ns_per_exit));
        let exit = profile.exit();
        let exit_mean_ns = exit.total_ns as f64 / exit.count().max(1) as f64;
        let on_cpu_mean_ns =
            exit.total_ns.saturating_sub(exit.off_cpu_ns) as f64 / exit.count().max(1) as f64;
        let ns_per_exit = price(&self.exits) / exits;
        ProbeEffect {
            ns_per_exit,
            exit_mean_ns,
            exit_median_ns: exit.summary().p50_ns as f64,
            on_cpu_mean_ns,
            share_of_exit: if exit_mean_ns > 0.0 { ns_per_exit / exit_mean_ns } else { 0.0 },
            programs,
            stages,
            counted: COUNTED.to_owned(),
        }
    }
}

/// How much of the exits is exitprof's own in-kernel time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeEffect {
    /// Mean per exit of the time exitprof's programs ran inside it (ns).
    pub ns_per_exit: f64,
    /// The exits' mean, which includes it (ns).
    pub exit_mean_ns: f64,
    /// The exits' median (ns): where every exit has the same hits, their runs shift it as much
    /// as the mean, and it is not moved by the rare exit that waits for milliseconds.
    pub exit_median_ns: f64,
    /// The exits' mean time on a CPU (ns), where the programs run.
    pub on_cpu_mean_ns: f64,
    /// `ns_per_exit` over `exit_mean_ns`.
    pub share_of_exit: f64,
    /// Each program that ran inside exits, most time per exit first.
    pub programs: Vec<ProgramEffect>,
    /// Each stage: the mean over the exits through it of the time exitprof's programs ran in
    /// it.
    pub stages: Vec<StageEffect>,
    /// What is counted and what is not.
    pub counted: String,
}

impl ProbeEffect {
    /// The effect in the stage named `stage` (ns per exit through it).
    pub fn in_stage(&self, stage: &str) -> Option<f64> {
        self.stages.iter().find(|s| s.stage == stage).map(|s| s.ns_per_exit)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramEffect {
    pub program: String,
    /// Its runs inside the exits recorded.
    pub runs_in_exits: u64,
    /// Its mean run time over the run (ns).
    pub ns_per_run: f64,
    /// Its time inside exits, per exit recorded (ns).
    pub ns_per_exit: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StageEffect {
    pub stage: String,
    pub ns_per_exit: f64,
}

/// The check of the reported effect against a measured one: the same storm with more probe
/// points (`on`) and fewer (`off`). The exits should be longer by what the extra points' runs
/// are reported to add.
#[derive(Clone, Debug, Serialize)]
pub struct EffectCheck {
    pub exit_mean_on_ns: f64,
    pub exit_mean_off_ns: f64,
    /// Exit mean on − off: the difference measured.
    pub measured_ns: f64,
    /// The same of the exits' time on a CPU, where the programs run (blocks left out).
    pub measured_on_cpu_ns: f64,
    /// The same of the exits' medians.
    pub measured_median_ns: f64,
    /// Round by round, the 10th percentile exit of the run on minus that of the run off: their
    /// median and spread. The two runs of a round follow each other, so a machine whose load
    /// changes weighs on both; the exits every hit delays alike and nothing else delayed are
    /// the steadiest measure of what the hits add.
    pub measured_by_round_ns: Spread,
    pub effect_on_ns: f64,
    pub effect_off_ns: f64,
    /// Reported effect on − off: the difference the report accounts for.
    pub reported_ns: f64,
    /// `measured_ns / reported_ns` (`null` when nothing is reported).
    pub ratio: Option<f64>,
    /// `measured_on_cpu_ns / reported_ns`.
    pub on_cpu_ratio: Option<f64>,
    /// `measured_median_ns / reported_ns`.
    pub median_ratio: Option<f64>,
    /// `measured_by_round_ns.median / reported_ns`.
    pub by_round_ratio: Option<f64>,
}

impl EffectCheck {
    /// The check of one side's effect against the other's, with each side's runs in the order
    /// of the rounds they ran in.
    pub fn new(
        on: &ProbeEffect,
        off: &ProbeEffect,
        on_runs: &[RunMeasure],
        off_runs: &[RunMeasure],
    ) -> Self {
        let by_round: Vec<f64> = on_runs
            .iter()
            .zip(off_runs)
            .filter_map(|(on, off)| Some(on.exit_p10_ns? - off.exit_p10_ns?))
            .collect();
        let measured_by_round_ns = Spread::of(&by_round);
        let measured_ns = on.exit_mean_ns - off.exit_mean_ns;
        let measured_on_cpu_ns = on.on_cpu_mean_ns - off.on_cpu_mean_ns;
        let measured_median_ns = on.exit_median_ns - off.exit_median_ns;
        let reported_ns = on.ns_per_exit - off.ns_per_exit;
        let ratio = |measured: f64| (reported_ns != 0.0).then(|| measured / reported_ns);
        Self {
            exit_mean_on_ns: on.exit_mean_ns,
            exit_mean_off_ns: off.exit_mean_ns,
            measured_ns,
            measured_on_cpu_ns,
            measured_median_ns,
            measured_by_round_ns,
            effect_on_ns: on.ns_per_exit,
            effect_off_ns: off.ns_per_exit,
            reported_ns,
            ratio: ratio(measured_ns),
            on_cpu_ratio: ratio(measured_on_cpu_ns),
            median_ratio: ratio(measured_median_ns),
            by_round_ratio: ratio(measured_by_round_ns.median),
        }
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::{
        point::{ExitFn, Marker},
        record::FLAG_TRUNCATED,
    };

    use super::*;
    use crate::{
        analysis::records::PointHit,
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    const START: Point = Point::Marker(Marker::DoExit);
    const FILES_IN: Point = Point::Enter(ExitFn::ExitFiles);
    const FILES_OUT: Point = Point::Return(ExitFn::ExitFiles);
    const END: Point = Point::Marker(Marker::FinalSwitch);

    fn kprobe_plan() -> Plan {
        Plan::with_sites(
            KernelVersion::new(6, 1, 0),
            &[
                (SiteId::Marker(Marker::DoExit), How::Kprobe, "do_exit"),
                (SiteId::Function(ExitFn::ExitFiles), How::Kprobe, "exit_files"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        )
    }

    fn exit(flags: u32, hits: &[(Point, u64)]) -> Exit {
        let hits = hits
            .iter()
            .map(|&(point, ts_ns)| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 })
            .collect();
        Exit { flags, hits, ..Exit::default() }
    }

    fn cost(program: &str, runs: u64, run_ns: u64) -> ProgramCost {
        ProgramCost { program: program.to_owned(), runs, run_ns }
    }

    /// do_exit runs for 100 ns a hit, exit_files' entry 200 and its return 300, sched_switch
    /// 1000 (its final run is after the exit's end).
    fn costs() -> Vec<ProgramCost> {
        vec![
            cost("kprobe_enter_do_exit", 10, 1_000),
            cost("kprobe_enter_exit_files", 4, 800),
            cost("kretprobe_exit_exit_files", 2, 600),
            cost("sched_switch", 100, 100_000),
        ]
    }

    /// Folds exits as a session does, and prices them.
    fn effect_of(exits: &[Exit]) -> ProbeEffect {
        let plan = kprobe_plan();
        let mut profile = Profile::new(&plan);
        let mut runs = ProbeRuns::new(&plan);
        for e in exits {
            let spans = profile.add(e);
            runs.exit(e, &spans);
        }
        runs.effect(&profile, &costs())
    }

    #[test]
    fn a_hit_counts_in_the_stage_that_starts_at_it_and_the_final_switch_in_none() {
        let effect = effect_of(&[exit(
            0,
            &[(START, 0), (FILES_IN, 1_000), (FILES_OUT, 5_000), (END, 6_000)],
        )]);
        let stages: Vec<(&str, f64)> =
            effect.stages.iter().map(|s| (s.stage.as_str(), s.ns_per_exit)).collect();
        // do_exit's run delays the gap up to exit_files, exit_files' entry its own body, its
        // return the gap after it.
        assert_eq!(
            stages,
            [
                ("synchronize_group_exit…exit_shm", 100.0),
                ("exit_files", 200.0),
                ("exit_fs…__schedule", 300.0)
            ]
        );
        assert_eq!(effect.ns_per_exit, 600.0);
        assert_eq!(effect.exit_mean_ns, 6_000.0);
        assert!((effect.share_of_exit - 0.1).abs() < 1e-12);
        assert!(effect.programs.iter().all(|p| p.program != "sched_switch"));
    }

    #[test]
    fn a_stage_is_the_mean_over_the_exits_through_it_and_the_exit_over_all() {
        let through = exit(0, &[(START, 0), (FILES_IN, 1_000), (FILES_OUT, 2_000), (END, 3_000)]);
        // Blocked before exit_files: no hits there.
        let around = exit(0, &[(START, 0), (END, 9_000)]);
        let effect = effect_of(&[through, around]);
        assert_eq!(effect.in_stage("exit_files"), Some(200.0));
        // do_exit's runs: one in each exit, each in the stage that starts at it.
        assert_eq!(effect.ns_per_exit, 700.0 / 2.0);
        let do_exit = effect.programs.iter().find(|p| p.program == "kprobe_enter_do_exit");
        assert_eq!(do_exit.map(|p| (p.runs_in_exits, p.ns_per_exit)), Some((2, 100.0)));
    }

    #[test]
    fn a_truncated_exit_counts_in_the_whole_exit_only() {
        let effect = effect_of(&[exit(FLAG_TRUNCATED, &[(START, 0), (FILES_IN, 10), (END, 50)])]);
        assert!(effect.stages.is_empty(), "{:?}", effect.stages);
        assert_eq!(effect.ns_per_exit, 300.0);
    }

    #[test]
    fn the_check_compares_the_measured_difference_with_the_reported_one() {
        let full = exit(0, &[(START, 0), (FILES_IN, 1_000), (FILES_OUT, 2_000), (END, 3_500)]);
        let minimal = exit(0, &[(START, 0), (END, 3_000)]);
        let run = |p10: f64| RunMeasure { exit_p10_ns: Some(p10), ..RunMeasure::default() };
        // Round by round: +400, +600 and +500 ns.
        let on_runs = [run(3_400.0), run(3_700.0), run(3_500.0)];
        let off_runs = [run(3_000.0), run(3_100.0), run(3_000.0)];
        let check =
            EffectCheck::new(&effect_of(&[full]), &effect_of(&[minimal]), &on_runs, &off_runs);
        assert_eq!((check.measured_ns, check.reported_ns), (500.0, 500.0));
        assert_eq!(check.ratio, Some(1.0));
        assert_eq!((check.measured_by_round_ns.median, check.measured_by_round_ns.n), (500.0, 3));
        assert_eq!(check.by_round_ratio, Some(1.0));
        // Nothing reported (no --bpf-stats figures): no ratio.
        let mut unpriced = effect_of(&[]);
        unpriced.ns_per_exit = 0.0;
        assert_eq!(EffectCheck::new(&unpriced, &unpriced, &[], &[]).ratio, None);
    }
}
