//! What `compare` and `sweep` report, for a person and as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    analysis::{
        comparison::{
            MetricRow, OnCpuDelta, RunMeasure, StageDeltas, metric_rows, on_cpu_deltas,
            stage_deltas,
        },
        deferred::DeferredReport,
        on_cpu::describe_chain,
        probe_effect::{EffectCheck, ProbeEffect},
        stats::Spread,
    },
    compare::{CompareOutcome, Comparison, SideRuns},
    conditions::Condition,
    document::{
        fmt_ns, fmt_rate,
        groups::GroupsDoc,
        run::{StageDoc, WorkloadDoc, stage_docs},
        signed,
        table::TextTable,
        verdict::{compare_verdict, run_verdict},
    },
    probes::plan::{AttachMode, Planned},
    profiled::Target,
    report::terminal::describe,
    run::Losses,
};

/// Sampled stacks compared per side, those whose time differs most.
const ON_CPU_DELTAS_SHOWN: usize = 5;

/// What the `compare` and `sweep` documents open with: what was compared, where, how often.
#[derive(Debug, Serialize)]
pub struct ComparisonSetup {
    /// Cut short: fewer runs than asked for.
    pub partial: bool,
    pub kernel: String,
    pub attach: AttachMode,
    pub workload: WorkloadDoc,
    pub condition: Condition,
    pub condition_means: &'static str,
    pub runs_per_side: u32,
}

impl ComparisonSetup {
    pub fn new(outcome: &CompareOutcome, target: &Target) -> Self {
        Self {
            partial: outcome.interrupted.is_some(),
            kernel: outcome.plan.kernel.clone(),
            attach: outcome.plan.mode,
            workload: WorkloadDoc::new(target, None),
            condition: outcome.condition,
            condition_means: outcome.condition.description(),
            runs_per_side: outcome.runs,
        }
    }
}

/// The `compare --json` document.
#[derive(Debug, Serialize)]
pub struct CompareDocument {
    #[serde(flatten)]
    pub setup: ComparisonSetup,
    #[serde(flatten)]
    pub result: ComparisonDoc,
    /// Each side: its runs, exits and stage table.
    pub on: SideDoc,
    pub off: SideDoc,
    pub probes: Vec<Planned>,
}

/// What a comparison found.
#[derive(Debug, Serialize)]
pub struct ComparisonDoc {
    /// The 2006 benchmark's table: user, sys and elapsed time, Yes (on) and No (off), medians and
    /// spreads, Ovhd%.
    pub table: Vec<MetricRow>,
    pub exit_rate_on: Spread,
    pub exit_rate_off: Spread,
    /// The taskstats listener's counts, on the side it ran.
    pub listener: Option<ListenerDoc>,
    /// Per exit, each stage on both sides and what explains the difference (both sides
    /// profiled with the same probe points).
    pub stage_deltas: Option<StageDeltas>,
    /// Sampled stacks whose on-CPU time per exit differs most, in stages sampled on both sides.
    pub on_cpu_deltas: Vec<OnCpuDelta>,
    /// With point-set: the exits' mean with every point (on) minus with the minimal set (off),
    /// against the probe effect the report shows on each side.
    pub probe_effect_check: Option<EffectCheck>,
    pub verdict: String,
}

#[derive(Debug, Serialize)]
pub struct ListenerDoc {
    /// Messages received per run.
    pub messages_per_run: Spread,
    /// ENOBUFS reports over all runs: the kernel dropped messages for a full socket.
    pub enobufs: u64,
}

#[derive(Debug, Serialize)]
pub struct SideDoc {
    pub runs: Vec<RunMeasure>,
    pub profiled: bool,
    pub exits_recorded: u64,
    pub lost: u64,
    pub losses: Losses,
    /// The whole exit, then each stage (empty when not profiled).
    pub stages: Vec<StageDoc>,
    pub verdict: Option<String>,
    pub deferred: DeferredReport,
    /// Where the kernel counted exitprof's program runs (point-set): how much of the exits
    /// they were; `null` otherwise.
    pub probe_effect: Option<ProbeEffect>,
    /// With --group-by: the side's exits by workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsDoc>,
}

impl SideDoc {
    fn new(side: &SideRuns) -> Self {
        let profile = &side.session.profile;
        let losses = side_losses(side);
        let effect = side.probe_effect();
        Self {
            runs: side.measures.clone(),
            profiled: side.profiled,
            exits_recorded: profile.exits,
            lost: losses.exits(),
            losses,
            stages: if side.profiled {
                stage_docs(profile, &side.on_cpu, effect.as_ref())
            } else {
                Vec::new()
            },
            verdict: side
                .profiled
                .then(|| run_verdict(profile.exit(), &profile.rows(), &side.blocked, &side.on_cpu)),
            deferred: side.session.deferred.report(),
            probe_effect: effect,
            groups: side.session.groups.as_ref().map(GroupsDoc::new),
        }
    }
}

/// Every way an exit can be missing from one side's profile.
pub fn side_losses(side: &SideRuns) -> Losses {
    Losses::new(
        &side.kernel_losses,
        side.session.undecodable,
        &side.session.profile,
        side.unfinished,
        side.probe_misses,
    )
}

impl ComparisonDoc {
    pub fn new(c: &Comparison) -> Self {
        let (on, off) = (&c.on, &c.off);
        let table = metric_rows(&on.measures, &off.measures);
        let rates =
            |m: &[RunMeasure]| Spread::of(&m.iter().map(|m| m.exit_rate).collect::<Vec<_>>());
        let listener = on.measures.iter().any(|m| m.listener_messages.is_some()).then(|| {
            let messages: Vec<f64> =
                on.measures.iter().filter_map(|m| m.listener_messages).map(|n| n as f64).collect();
            ListenerDoc {
                messages_per_run: Spread::of(&messages),
                enobufs: on.measures.iter().filter_map(|m| m.listener_enobufs).sum(),
            }
        });
        let deltas = (on.profiled && off.profiled && c.same_stages)
            .then(|| stage_deltas(&on.session.profile, &off.session.profile));
        let verdict = compare_verdict(&table, deltas.as_ref());
        let mut on_cpu = on_cpu_deltas(
            &on.on_cpu,
            on.session.profile.exits,
            &off.on_cpu,
            off.session.profile.exits,
        );
        on_cpu.truncate(ON_CPU_DELTAS_SHOWN);
        let probe_effect_check = match (on.probe_effect(), off.probe_effect()) {
            (Some(on_effect), Some(off_effect)) => {
                Some(EffectCheck::new(&on_effect, &off_effect, &on.measures, &off.measures))
            }
            _ => None,
        };
        Self {
            exit_rate_on: rates(&on.measures),
            exit_rate_off: rates(&off.measures),
            table,
            listener,
            stage_deltas: deltas,
            on_cpu_deltas: on_cpu,
            probe_effect_check,
            verdict,
        }
    }
}

impl CompareDocument {
    pub fn new(outcome: &CompareOutcome, target: &Target, c: &Comparison) -> Self {
        Self {
            setup: ComparisonSetup::new(outcome, target),
            result: ComparisonDoc::new(c),
            on: SideDoc::new(&c.on),
            off: SideDoc::new(&c.off),
            probes: outcome.plan.points.clone(),
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.setup.partial {
            out.push_str("PARTIAL RESULTS: the comparison was interrupted\n");
        }
        let _ = writeln!(
            out,
            "compare: {} on vs off ({}), {} runs each, interleaved\n\
             workload: {} (kernel {}, attach {})\n",
            self.setup.condition.name(),
            self.setup.condition_means,
            self.setup.runs_per_side,
            describe(&self.setup.workload),
            self.setup.kernel,
            self.setup.attach
        );
        out.push_str(&render_comparison(&self.result));
        for (side, doc) in [("on", &self.on), ("off", &self.off)] {
            if let Some(groups) = &doc.groups {
                let _ = write!(out, "\n{} {side}:", self.setup.condition.name());
                out.push_str(&groups.render());
            }
        }
        out
    }
}

/// The Yes/No/Ovhd table, the listener's counts, the per-stage deltas and the verdict.
pub fn render_comparison(r: &ComparisonDoc) -> String {
    let mut out = String::new();
    let mut table =
        TextTable::new(["", "Yes (on)", "No (off)", "Ovhd", "spread on / off", ""]).figures_right();
    for row in &r.table {
        table.add_row([
            row.metric.to_owned(),
            format!("{:.3} s", row.yes.median),
            format!("{:.3} s", row.no.median),
            format!("{:+.1}%", row.ovhd_pct),
            format!("±{:.3} / ±{:.3} s", row.yes.iqr() / 2.0, row.no.iqr() / 2.0),
            if row.within_noise { "within noise".to_owned() } else { String::new() },
        ]);
    }
    table.add_row([
        "exit rate".to_owned(),
        format!("{}/s", fmt_rate(r.exit_rate_on.median)),
        format!("{}/s", fmt_rate(r.exit_rate_off.median)),
        String::new(),
        String::new(),
        String::new(),
    ]);
    let _ = writeln!(out, "{table}");
    if let Some(l) = &r.listener {
        let _ = writeln!(
            out,
            "listener: {:.0} messages per run (median), {} ENOBUFS in all",
            l.messages_per_run.median, l.enobufs
        );
    }
    if let Some(d) = &r.stage_deltas {
        let mut table =
            TextTable::new(["per exit", "on", "off", "delta", "of the delta"]).figures_right();
        table.add_row([
            "exit".to_owned(),
            fmt_ns(d.exit_yes_ns_per_exit),
            fmt_ns(d.exit_no_ns_per_exit),
            signed(d.exit_delta_ns_per_exit),
            "100%".to_owned(),
        ]);
        for s in &d.stages {
            table.add_row([
                format!("  {}", s.name),
                fmt_ns(s.yes_ns_per_exit),
                fmt_ns(s.no_ns_per_exit),
                signed(s.delta_ns_per_exit),
                format!("{:.0}%", s.share_of_delta * 100.0),
            ]);
        }
        let _ = writeln!(out, "\n{table}");
    }
    if !r.on_cpu_deltas.is_empty() {
        let mut table = TextTable::new(["stage", "on CPU in", "on", "off", "delta"]).names_left(2);
        for d in &r.on_cpu_deltas {
            table.add_row([
                d.stage.clone(),
                describe_chain(&d.stack, 4),
                fmt_ns(d.yes_ns_per_exit),
                fmt_ns(d.no_ns_per_exit),
                signed(d.delta_ns_per_exit),
            ]);
        }
        let _ = writeln!(out, "\non-CPU time per exit, by sampled stack (estimated)\n{table}");
    }
    if let Some(check) = &r.probe_effect_check {
        out.push_str(&render_effect_check(check));
    }
    let _ = writeln!(out, "\nverdict: {}", r.verdict);
    out
}

/// The probe effect the report shows, checked against the difference the extra points make.
fn render_effect_check(c: &EffectCheck) -> String {
    let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"));
    let mut table = TextTable::new(["probe effect, per exit", "on", "off", "on − off", "ratio"])
        .figures_right();
    table.add_row([
        "exit mean (measured)".to_owned(),
        fmt_ns(c.exit_mean_on_ns),
        fmt_ns(c.exit_mean_off_ns),
        signed(c.measured_ns),
        ratio(c.ratio),
    ]);
    table.add_row([
        "  on a CPU".to_owned(),
        String::new(),
        String::new(),
        signed(c.measured_on_cpu_ns),
        ratio(c.on_cpu_ratio),
    ]);
    table.add_row([
        "exit median (measured)".to_owned(),
        String::new(),
        String::new(),
        signed(c.measured_median_ns),
        ratio(c.median_ratio),
    ]);
    table.add_row([
        format!("exit p10, round by round ({})", c.measured_by_round_ns.n),
        String::new(),
        String::new(),
        format!(
            "{} ({}..{})",
            signed(c.measured_by_round_ns.median),
            signed(c.measured_by_round_ns.q1),
            signed(c.measured_by_round_ns.q3)
        ),
        ratio(c.by_round_ratio),
    ]);
    table.add_row([
        "exitprof's own time (reported)".to_owned(),
        fmt_ns(c.effect_on_ns),
        fmt_ns(c.effect_off_ns),
        signed(c.reported_ns),
        String::new(),
    ]);
    format!(
        "\n{table}\nratio: measured over reported difference; 1 when the report accounts for \
         what the extra probe points cost the exits\n"
    )
}

/// One row of a sweep: one stagger, compared on and off.
#[derive(Debug, Serialize)]
pub struct SweepRow {
    pub stagger_us: u32,
    #[serde(flatten)]
    pub result: ComparisonDoc,
}

/// The `sweep --json` document.
#[derive(Debug, Serialize)]
pub struct SweepDocument {
    #[serde(flatten)]
    pub setup: ComparisonSetup,
    pub rows: Vec<SweepRow>,
    pub probes: Vec<Planned>,
}

impl SweepDocument {
    /// The 2006 table: exit rate against the %overhead of user, sys and elapsed time.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.setup.partial {
            out.push_str("PARTIAL RESULTS: the sweep was interrupted\n");
        }
        let _ = writeln!(
            out,
            "sweep: {} ({}), {} runs per side and row (kernel {}, attach {})\n\
             workload: {} (the stagger varies by row)\n",
            self.setup.condition.name(),
            self.setup.condition_means,
            self.setup.runs_per_side,
            self.setup.kernel,
            self.setup.attach,
            describe(&self.setup.workload)
        );
        let _ = writeln!(out, "      %ovhd of {} on over off", self.setup.condition.name());
        let _ = writeln!(out, "      (higher is worse; * within the run-to-run spread)\n");
        let mut header =
            vec!["Stagger\n(us)", "Exit\nRate", "User\nTime", "Sys\nTime", "Elapsed\nTime"];
        let listener = self.setup.condition == Condition::TaskstatsListener;
        if listener {
            header.push("ENOBUFS");
        }
        let mut table = TextTable::new(header).figures_right();
        for row in &self.rows {
            let pct = |metric: &str| {
                row.result.table.iter().find(|r| r.metric == metric).map_or(String::new(), |r| {
                    format!("{:.2}{}", r.ovhd_pct, if r.within_noise { "*" } else { " " })
                })
            };
            let mut cells = vec![
                row.stagger_us.to_string(),
                format!("{:.0}", row.result.exit_rate_off.median),
                pct("user"),
                pct("sys"),
                pct("elapsed"),
            ];
            if listener {
                cells.push(row.result.listener.as_ref().map_or(0, |l| l.enobufs).to_string());
            }
            table.add_row(cells);
        }
        let _ = writeln!(out, "{table}");
        let _ = writeln!(
            out,
            "\nExit Rate: threads exiting per second with the condition off, (#created + \
             #exited) / elapsed / 2."
        );
        for row in &self.rows {
            let _ = writeln!(out, "stagger {:>3} us: {}", row.stagger_us, row.result.verdict);
        }
        out
    }
}
