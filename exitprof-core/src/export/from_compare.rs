//! The export set of a comparison or sweep: one variant per side (and row), tagged
//! `condition=on|off` (and `row=stagger=N`).

use std::time::Duration;

use super::{
    ExportSet, RunStats, Series, Variant,
    from_run::{weighted_stacks, workload_label},
};
use crate::{
    analysis::stats::Spread,
    compare::{CompareOutcome, Comparison, SideRuns, side_name},
    document::run::WorkloadDoc,
    profiled::{Target, workload::Workload},
    report::compare_document::side_losses,
};

impl ExportSet {
    /// The set of comparisons, each with its row tag (`None` for a plain compare). `document`
    /// is the command's `--json` document.
    pub fn from_comparisons(
        outcome: &CompareOutcome,
        target: &Target,
        comparisons: &[(Option<String>, &Comparison)],
        document: &str,
    ) -> Self {
        let mut runs = Vec::new();
        let mut series = Vec::new();
        let mut stacks = Vec::new();
        for (row, comparison) in comparisons {
            for side in [&comparison.on, &comparison.off] {
                let variant =
                    Variant { condition: Some(side_name(side.side).to_owned()), row: row.clone() };
                runs.push(stats(side, variant.clone(), expected_per_run(target)));
                if side.profiled {
                    stacks.extend(weighted_stacks(&side.on_cpu, &side.blocked, &variant));
                    series.extend(side.session.profile.latencies().map(|(stage, latency)| {
                        Series {
                            stage: stage.to_owned(),
                            variant: variant.clone(),
                            group: None,
                            hist: latency.hist.clone(),
                            sum_ns: latency.total_ns,
                        }
                    }));
                }
            }
        }
        Self {
            compared: Some(outcome.condition.name().to_owned()),
            kernel: outcome.plan.kernel.clone(),
            attach: outcome.plan.mode,
            probes: outcome.plan.points.clone(),
            workload: workload_label(&WorkloadDoc::new(target, None)),
            started_at: outcome.started_at,
            partial: outcome.interrupted.is_some(),
            runs,
            series,
            teardowns: Vec::new(),
            document: document.to_owned(),
            stacks,
            verdict: None,
            report: String::new(),
        }
    }
}

fn expected_per_run(target: &Target) -> Option<u64> {
    match target {
        Target::Storm(storm) => Workload::Storm(*storm).expected_exits(),
        _ => None,
    }
}

/// One side's runs as one variant: exits and losses summed, times their medians.
fn stats(side: &SideRuns, variant: Variant, expected_per_run: Option<u64>) -> RunStats {
    let median = |f: fn(&crate::analysis::comparison::RunMeasure) -> f64| {
        Spread::of(&side.measures.iter().map(f).collect::<Vec<_>>()).median
    };
    let losses = side_losses(side);
    RunStats {
        variant,
        exits_expected: expected_per_run.map(|n| n * side.measures.len() as u64),
        exits_recorded: side.session.profile.exits,
        exits_lost: losses.exits(),
        losses: losses.by_cause().map(|(count, n)| (count.key, n)).collect(),
        elapsed: Duration::from_secs_f64(median(|m| m.elapsed_s)),
        user: Some(Duration::from_secs_f64(median(|m| m.user_s))),
        sys: Some(Duration::from_secs_f64(median(|m| m.sys_s))),
        exit_rate: median(|m| m.exit_rate),
    }
}
