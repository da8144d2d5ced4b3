//! The export set of one profiled run: a single plain variant.

use serde_json::Value;

use super::{ExportSet, RunStats, Series, StackKind, Variant, WeightedStack, WorkloadLabel};
use crate::{
    analysis::{blocking::BlockedReport, groups::Groups, histogram::Latency, on_cpu::OnCpuReport},
    document::run::{RunDocument, WorkloadDoc},
    report::terminal,
    run::RunOutcome,
};

impl ExportSet {
    /// The set of one run. `doc` is its `--json` document and `document` that document as
    /// printed, so every export states the same figures as the report.
    pub fn from_run(run: &RunOutcome, doc: &RunDocument, document: String) -> Self {
        let variant = Variant::default();
        let stats = RunStats {
            variant: variant.clone(),
            exits_expected: doc.exits_expected,
            exits_recorded: doc.exits_recorded,
            exits_lost: doc.lost,
            losses: doc.losses.by_cause().map(|(count, n)| (count.key, n)).collect(),
            elapsed: run.elapsed,
            user: run.child.as_ref().map(|c| c.user),
            sys: run.child.as_ref().map(|c| c.sys),
            exit_rate: doc.exit_rate,
        };
        let series_of = |group: Option<&str>, stage: &str, latency: &Latency| Series {
            stage: stage.to_owned(),
            variant: variant.clone(),
            group: group.map(str::to_owned),
            hist: latency.hist.clone(),
            sum_ns: latency.total_ns,
        };
        // The run's stages, then each group's whole exit (`--group-by`).
        let groups = run.groups.iter().flat_map(Groups::iter);
        let series = run
            .profile
            .latencies()
            .map(|(stage, latency)| series_of(None, stage, latency))
            .chain(groups.filter_map(|(name, group)| {
                Some(series_of(Some(name), "exit", group.exit.as_ref()?))
            }))
            .collect();
        let teardowns = run
            .teardowns
            .each()
            .into_iter()
            .filter(|t| t.joined > 0)
            .flat_map(|t| {
                let kind = t.kind_key;
                [
                    series_of(None, &format!("teardown:{kind}"), &t.teardown_latency),
                    series_of(None, &format!("teardown-wait:{kind}"), &t.wait_latency),
                ]
            })
            .collect();
        Self {
            compared: None,
            kernel: doc.kernel.clone(),
            attach: doc.attach,
            probes: run.plan.points.clone(),
            workload: workload_label(&doc.workload),
            started_at: run.started_at,
            partial: doc.partial,
            runs: vec![stats],
            series,
            teardowns,
            document,
            stacks: weighted_stacks(&run.on_cpu, &run.blocked, &variant),
            verdict: Some(doc.verdict.clone()),
            report: terminal::render(doc),
        }
    }
}

/// The stacks of a run (or a side): those sampled, each weighed by the on-CPU time it stands
/// for, and those where exits blocked, by the blocked time they stand for.
pub(super) fn weighted_stacks(
    on_cpu: &OnCpuReport,
    blocked: &BlockedReport,
    variant: &Variant,
) -> Vec<WeightedStack> {
    let stack = |kind, stage: &str, frames: &[String], ns: f64| WeightedStack {
        variant: variant.clone(),
        kind,
        stage: stage.to_owned(),
        frames: frames.to_vec(),
        us: (ns / 1e3).round() as u64,
    };
    let sampled = on_cpu.stages.iter().flat_map(|stage| {
        stage.stacks.iter().map(|s| stack(StackKind::OnCpu, &stage.stage, &s.stack, s.est_ns))
    });
    let blocked =
        blocked.stacks.iter().map(|b| stack(StackKind::OffCpu, &b.stage, &b.stack, b.est_ns));
    sampled.chain(blocked).collect()
}

/// The workload as the document names it ([`WorkloadDoc::fields`]), each value as its text.
pub(super) fn workload_label(doc: &WorkloadDoc) -> WorkloadLabel {
    let (kind, fields) = doc.fields();
    let text = |v: Value| match v {
        Value::String(s) => s,
        other => other.to_string(),
    };
    let params = fields.into_iter().map(|(k, v)| (k, text(v))).collect();
    WorkloadLabel { kind, params }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{document::run::tests::synthetic_run, profiled::ThreadsParams, run::Losses};

    #[test]
    fn a_run_is_one_plain_variant_with_the_exit_first() {
        let run = synthetic_run();
        let doc = RunDocument::new(&run);
        let set = ExportSet::from_run(&run, &doc, String::new());
        assert_eq!(set.stages(), ["exit", "do_exit…exit_shm", "exit_files", "exit_fs…__schedule"]);
        assert_eq!(set.variants(), [&Variant::default()]);
        let exit = &set.series[0];
        assert_eq!((exit.hist.len(), exit.sum_ns), (2_000, run.profile.exit().total_ns));
        let stage_sum: u128 = set.series[1..].iter().map(|s| s.sum_ns).sum();
        assert_eq!(stage_sum, exit.sum_ns, "stages partition the exit");
        assert_eq!(set.runs[0].exits_recorded, 2_000);
        assert_eq!(set.runs[0].losses.len(), Losses::default().by_cause().count());
    }

    #[test]
    fn workload_parameters_come_from_the_document() {
        let doc = WorkloadDoc::Threads(ThreadsParams {
            threads: 1000,
            reps: 10,
            stagger_us: 2,
            rate: None,
        });
        let w = workload_label(&doc);
        assert_eq!(w.kind, "threads");
        assert_eq!(w.describe(), "threads (threads=1000 reps=10 stagger_us=2)");
    }
}
