//! The verdict: one or two sentences that say where the time went, in words.

use crate::{
    analysis::{
        blocking::BlockedReport,
        comparison::{MetricRow, StageDelta, StageDeltas},
        histogram::{Latency, Summary},
        on_cpu::{OnCpuReport, describe_chain},
        profile::StageRow,
        teardown::{TeardownReport, TeardownReports},
    },
    document::{fmt_ns, signed},
};

/// Below this off-CPU share a stage computes; above it, it mostly waits.
const MOSTLY_OFF_CPU: f64 = 0.5;
/// A second stage is worth naming when it holds at least this share of the exit time.
const WORTH_NAMING: f64 = 0.10;
/// Frames of a hot path the verdict names, innermost first.
const CHAIN_SHOWN: usize = 6;

/// The verdict on one run (or one side of a comparison); `blocked` says where its exits
/// blocked, by stage and stack, and `on_cpu` the stacks they were sampled in.
pub fn run_verdict(
    exit: &Latency,
    rows: &[StageRow<'_>],
    blocked: &BlockedReport,
    on_cpu: &OnCpuReport,
) -> String {
    let exit = exit.summary();
    if exit.count == 0 {
        return "No exits were recorded: nothing to explain.".to_owned();
    }
    let mut ranked: Vec<&StageRow<'_>> = rows.iter().collect();
    ranked.sort_by(|a, b| b.share_of_exit.total_cmp(&a.share_of_exit));
    let Some(top) = ranked.first() else {
        return format!("{} exits took {} each on average.", exit.count, fmt_ns(exit.mean_ns));
    };
    let top_summary = top.latency.summary();
    // Where it computes, when its samples mostly go one way.
    let computes_in = on_cpu
        .stages
        .iter()
        .find(|s| s.stage == top.stage.name)
        .and_then(|s| Some((s.mostly_in.as_ref()?, s.samples)))
        .map(|(hot, samples)| {
            format!(
                "{} ({:.0}% of its {samples} samples)",
                describe_chain(&hot.frames, CHAIN_SHOWN),
                hot.share * 100.0
            )
        });
    let mut text = format!(
        "{} holds {:.0}% of the exit time{}, {}",
        top.stage.name,
        top.share_of_exit * 100.0,
        occurrence(top.latency.hist.len(), exit.count),
        cpu_phrase(
            top_summary.off_cpu_share(),
            Some(top_summary.runq_share()),
            computes_in.as_deref()
        )
    );
    let blocks = top_summary.off_cpu_share() >= MOSTLY_OFF_CPU && top_summary.runq_share() < 0.5;
    let stage_blocked = top.latency.off_cpu_ns.saturating_sub(top.latency.runq_ns) as f64;
    // Stacks come most blocked time first.
    if blocks
        && stage_blocked > 0.0
        && let Some(where_) =
            blocked.stacks.iter().find(|b| b.stage == top.stage.name && !b.stack.is_empty())
    {
        text.push_str(&format!(
            " They block mostly in {} ({:.0}% of the stage's blocked time).",
            where_.describe(4),
            where_.est_ns / stage_blocked * 100.0
        ));
    }
    if let Some(next) = ranked.get(1).filter(|r| r.share_of_exit >= WORTH_NAMING) {
        text.push_str(&format!(
            " Next: {} with {:.0}%{}.",
            next.stage.name,
            next.share_of_exit * 100.0,
            occurrence(next.latency.hist.len(), exit.count)
        ));
    }
    text
}

/// A namespace teardown the verdict speaks of: one whose share of a run takes at least this many
/// times the exit that set it off.
const TEARDOWN_DWARFS: f64 = 5.0;

/// What the verdict says of the namespace teardowns the exits set off, when one kind of them
/// takes many times the exits themselves: "the exits took 210µs; their network namespaces took
/// 410ms each to tear down in cleanup_net, 70% blocked in synchronize_rcu_expedited".
pub fn teardown_verdict(exit: &Summary, teardowns: &TeardownReports) -> Option<String> {
    let clauses: Vec<String> = teardowns
        .each()
        .into_iter()
        .filter(|t| t.joined > 0 && t.teardown_ns.mean_ns >= TEARDOWN_DWARFS * exit.mean_ns)
        .map(teardown_clause)
        .collect();
    (!clauses.is_empty()).then(|| {
        format!(
            "The exits took {} each on average; their {}.",
            fmt_ns(exit.mean_ns),
            clauses.join("; their ")
        )
    })
}

/// "network namespaces took 410ms each to tear down in cleanup_net (1 a run), 70% blocked in
/// synchronize_rcu_expedited, 1.2ms after the exit".
fn teardown_clause(t: &TeardownReport) -> String {
    let mut text = format!(
        "{}s took {} each to tear down in {}",
        t.kind,
        fmt_ns(t.teardown_ns.mean_ns),
        t.function
    );
    if t.max_per_run > 1 {
        text.push_str(&format!(
            " (a run tore down {:.1} on average, its time shared equally)",
            t.mean_per_run
        ));
    }
    // Blocks named by what they wait for: the same wait from several callers is one.
    let mut waits: Vec<(&str, f64)> = Vec::new();
    for b in &t.blocked_in {
        match waits.iter_mut().find(|(wait, _)| *wait == b.wait) {
            Some((_, share)) => *share += b.share,
            None => waits.push((&b.wait, b.share)),
        }
    }
    waits.sort_by(|a, b| b.1.total_cmp(&a.1));
    if t.blocked_share >= MOSTLY_OFF_CPU
        && let Some((wait, share)) = waits.first().filter(|(_, share)| *share >= 0.05)
    {
        text.push_str(&format!(", {:.0}% blocked in {wait}", share * 100.0));
    } else if t.on_cpu_share >= MOSTLY_OFF_CPU
        && let Some(hot) = &t.computes_mostly_in
    {
        text.push_str(&format!(
            ", {:.0}% on a CPU, mostly in {} ({:.0}% of its samples)",
            t.on_cpu_share * 100.0,
            describe_chain(&hot.frames, CHAIN_SHOWN),
            hot.share * 100.0
        ));
    } else {
        text.push_str(&format!(
            ", {:.0}% blocked, {:.0}% on a CPU",
            t.blocked_share * 100.0,
            t.on_cpu_share * 100.0
        ));
    }
    if t.exit_to_start_ns.count > 0 {
        text.push_str(&format!(
            ", starting {} after the exit (median)",
            fmt_ns(t.exit_to_start_ns.p50_ns as f64)
        ));
    }
    text
}

/// " (in 13% of the exits)" for a stage not every exit goes through.
fn occurrence(count: u64, exits: u64) -> String {
    if count >= exits || exits == 0 {
        String::new()
    } else {
        format!(" (in {:.0}% of the exits)", count as f64 / exits as f64 * 100.0)
    }
}

/// What an off-CPU share says about a stage; with the part of the off-CPU time spent runnable
/// (`runq_share`), also what the tasks wait for, and with the chain its samples mostly went
/// through (`computes_in`), where it computes.
pub fn cpu_phrase(
    off_cpu_share: f64,
    runq_share: Option<f64>,
    computes_in: Option<&str>,
) -> String {
    if off_cpu_share >= MOSTLY_OFF_CPU {
        let waiting = match runq_share {
            Some(r) if r >= 0.5 => format!(
                "tasks wait there rather than compute, {:.0}% of that time runnable: preempted, \
                 waiting for a CPU (the CPUs are busy, with the storm's own tasks or others).",
                r * 100.0
            ),
            Some(r) => format!(
                "tasks wait there rather than compute, {:.0}% of that time blocked (on a lock, \
                 I/O or an event), not waiting for a CPU.",
                (1.0 - r) * 100.0
            ),
            None => "tasks wait there (blocked or preempted) rather than compute.".to_owned(),
        };
        format!("{:.0}% of it off-CPU: {waiting}", off_cpu_share * 100.0)
    } else {
        let mostly_in = computes_in.map(|chain| format!(", mostly in {chain}")).unwrap_or_default();
        format!(
            "{:.0}% of it on-CPU: the kernel computes there{mostly_in}.",
            (1.0 - off_cpu_share) * 100.0
        )
    }
}

/// The verdict on a comparison: which stage explains the difference, and whether it waits.
pub fn compare_verdict(rows: &[MetricRow], deltas: Option<&StageDeltas>) -> String {
    let mut text = String::new();
    if let Some(d) = deltas
        && let Some(top) = d.stages.first()
        && d.exit_delta_ns_per_exit != 0.0
    {
        text.push_str(&format!(
            "An exit takes {} with the condition on; {} explains {:.0}% of that ({}/exit), {}",
            signed(d.exit_delta_ns_per_exit),
            top.name,
            top.share_of_delta * 100.0,
            signed(top.delta_ns_per_exit),
            cpu_phrase(off_cpu_share(top), None, None),
        ));
        // Waiting is noisy; what the condition costs in computing is named on its own.
        let on_cpu = |s: &StageDelta| s.delta_ns_per_exit - s.off_cpu_delta_ns_per_exit;
        if off_cpu_share(top) >= 0.5
            && let Some(compute) = d
                .stages
                .iter()
                .filter(|s| on_cpu(s) > 0.0)
                .max_by(|a, b| on_cpu(a).total_cmp(&on_cpu(b)))
        {
            text.push_str(&format!(
                " On the CPU, {} costs most: {}/exit.",
                compute.name,
                signed(on_cpu(compute))
            ));
        }
    }
    let metric = |name: &str| rows.iter().find(|r| r.metric == name);
    if let (Some(sys), Some(elapsed)) = (metric("sys"), metric("elapsed")) {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!(
            "With the condition on, the storm's sys time changes by {:+.1}%{} and its elapsed \
             time by {:+.1}%{}.",
            sys.ovhd_pct,
            noise(sys),
            elapsed.ovhd_pct,
            noise(elapsed),
        ));
    }
    text
}

/// A note when a difference is within the run-to-run spread.
fn noise(row: &MetricRow) -> &'static str {
    if row.within_noise { " (within the run-to-run spread: not conclusive)" } else { "" }
}

/// Off-CPU part of a stage's delta, between 0 and 1.
fn off_cpu_share(s: &StageDelta) -> f64 {
    if s.delta_ns_per_exit == 0.0 {
        0.0
    } else {
        (s.off_cpu_delta_ns_per_exit / s.delta_ns_per_exit).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{
        blocking::BlockedIn,
        exit_stacks::JoinCounts,
        on_cpu::{HotPath, StageOnCpu},
        stages::Stage,
    };

    #[test]
    fn the_compare_verdict_names_the_stage_that_explains_the_delta() {
        use crate::analysis::comparison::{
            metric_rows, stage_deltas,
            tests::{measure, taskstats_slower},
        };
        let (yes, no) = taskstats_slower();
        let v = compare_verdict(
            &metric_rows(&[measure(0.1, 1.0, 1.0)], &[measure(0.1, 0.5, 1.0)]),
            Some(&stage_deltas(&yes, &no)),
        );
        assert!(
            v.starts_with(
                "An exit takes +3.5µs with the condition on; do_exit…taskstats_exit explains 86%"
            ),
            "{v}"
        );
        assert!(
            v.contains("sys time changes by +100.0% and its elapsed time by +0.0% (within"),
            "{v}"
        );
    }

    fn stage(name: &str) -> Stage {
        Stage { name: name.to_owned(), covers: vec![], waits_inline: vec![], order: (0, 0) }
    }

    fn latency(samples: &[(u64, u64)]) -> Latency {
        let mut l = Latency::default();
        for &(ns, off) in samples {
            l.record(ns, off);
        }
        l
    }

    #[test]
    fn names_the_dominant_stage_and_whether_it_waits() {
        let exit = latency(&[(1_000, 0); 10]);
        let (files, mm) = (stage("exit_files"), stage("exit_mm…exit_thread"));
        let (files_l, mm_l) =
            (latency(&[(100, 0); 10]), latency(&[(4_500, 4_000), (4_500, 4_000)]));
        let rows = [
            StageRow { stage: &files, latency: &files_l, share_of_exit: 0.1 },
            StageRow { stage: &mm, latency: &mm_l, share_of_exit: 0.9 },
        ];
        let in_stage = |stage: &Stage, stack: &[&str], est_ns: f64| BlockedIn {
            stage: stage.name.clone(),
            stack: stack.iter().map(|&f| f.to_owned()).collect(),
            blocks: 1,
            walked_ns: 1,
            est_ns,
            share: est_ns / 8_000.0,
        };
        let blocked = BlockedReport {
            blocked_ns: 8_000,
            stacks: vec![
                in_stage(&files, &["mutex_lock", "exit_files"], 1_000.0),
                in_stage(&mm, &["rwsem_down_read_slowpath", "down_read", "exit_mm"], 7_000.0),
            ],
            ..BlockedReport::default()
        };
        let v = run_verdict(&exit, &rows, &blocked, &OnCpuReport::default());
        assert!(
            v.starts_with("exit_mm…exit_thread holds 90% of the exit time (in 20% of the exits)"),
            "{v}"
        );
        assert!(v.contains("off-CPU: tasks wait there"), "{v}");
        assert!(
            v.contains(
                "They block mostly in rwsem_down_read_slowpath ← down_read ← exit_mm (88% of the \
                 stage's blocked time)"
            ),
            "{v}"
        );
    }

    #[test]
    fn names_the_chain_an_on_cpu_stage_computes_in() {
        let exit = latency(&[(1_000, 0); 10]);
        let mm = stage("perf_event_exit_task…exit_thread");
        let mm_l = latency(&[(900, 0); 10]);
        let rows = [StageRow { stage: &mm, latency: &mm_l, share_of_exit: 0.9 }];
        let chain = ["unmap_vmas", "exit_mmap", "__mmput"].map(str::to_owned).to_vec();
        let on_cpu = OnCpuReport {
            sampled: JoinCounts::default(),
            stages: vec![StageOnCpu {
                stage: mm.name.clone(),
                samples: 40,
                on_cpu_ns: 9_000,
                mostly_in: Some(HotPath { frames: chain, share: 0.85 }),
                stacks: Vec::new(),
            }],
        };
        let v = run_verdict(&exit, &rows, &BlockedReport::default(), &on_cpu);
        assert!(
            v.ends_with(
                "100% of it on-CPU: the kernel computes there, mostly in unmap_vmas ← exit_mmap \
                 ← __mmput (85% of its 40 samples)."
            ),
            "{v}"
        );
    }
}
