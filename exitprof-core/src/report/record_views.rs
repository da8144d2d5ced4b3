//! The views of a recorded run besides its report (`exitprof report --by-kind`, `--stage`), as
//! text or as one JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use super::{exit_timeline, terminal};
use crate::{
    analysis::{exit_timeline::ExitTimeline, on_cpu::describe_chain, stage_detail::StageDetail},
    document::{
        fmt_ns,
        run::{RunDocument, SelectedDoc},
        table::TextTable,
    },
    run::{RunOutcome, record::ExitsShown},
};

/// Functions and stacks printed in the terminal (the JSON document has them all).
const FUNCTIONS_PRINTED: usize = 15;
const STACKS_PRINTED: usize = 5;
/// Frames printed per stack, innermost first.
const FRAMES_PRINTED: usize = 6;

/// `--by-kind --json`: each kind of exit with the whole report of its exits.
#[derive(Serialize)]
struct ByKindDoc {
    exits_recorded: u64,
    /// The exits the kinds split, when a filter chose them (`--pid`).
    selected: Option<SelectedDoc>,
    kinds: Vec<KindReport>,
}

#[derive(Serialize)]
struct KindReport {
    kind: &'static str,
    exits: u64,
    share_of_exits: f64,
    /// The document of a report of these exits alone.
    report: RunDocument,
}

/// Thread exits and process exits apart, each with its stages, where it computed and where it
/// blocked: `run`'s exits split by the outcomes of each `kinds`.
pub fn by_kind(run: &RunOutcome, kinds: &[RunOutcome], json: bool) -> anyhow::Result<String> {
    let all = run.profile.exits;
    let doc = ByKindDoc {
        exits_recorded: all,
        selected: run.selected.map(SelectedDoc::new),
        kinds: kinds
            .iter()
            .map(|k| {
                let report = RunDocument::new(k);
                let kind = k.selected.and_then(|s| s.filter.kind).map_or("all", |k| k.name());
                let exits = report.exits_recorded;
                KindReport { kind, exits, share_of_exits: share(exits, all), report }
            })
            .collect(),
    };
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?));
    }
    let whole = RunDocument::new(run);
    let mut out = header(&whole);
    let split: Vec<String> =
        doc.kinds.iter().map(|k| format!("{} {} exits", k.exits, k.kind)).collect();
    let _ = writeln!(out, "{:<9} {all} recorded{}: {}", "exits:", selection(run), split.join(", "));
    for k in &doc.kinds {
        let _ = writeln!(
            out,
            "\n{} exits: {} of {all} ({:.1}%)\n{}\n\nverdict: {}",
            k.kind,
            k.exits,
            k.share_of_exits * 100.0,
            terminal::stage_table(&k.report.stages),
            k.report.verdict
        );
        out.push_str(&terminal::on_cpu_table(&k.report));
        out.push_str(&terminal::blocked_in_table(&k.report));
    }
    Ok(out)
}

/// `--stage --json`.
#[derive(Serialize)]
struct StageDoc<'a> {
    #[serde(flatten)]
    detail: &'a StageDetail,
    selected: Option<SelectedDoc>,
}

/// One stage in detail: on the CPU, the functions its samples fell in; off it, the time
/// runnable and the stacks it blocked in.
pub fn stage(run: &RunOutcome, d: &StageDetail, json: bool) -> anyhow::Result<String> {
    if json {
        let doc = StageDoc { detail: d, selected: run.selected.map(SelectedDoc::new) };
        return Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?));
    }
    let mut out = header(&RunDocument::new(run));
    let total = d.on_cpu_ns + d.off_cpu_ns;
    let pct = |ns: u128| share(ns as u64, total as u64) * 100.0;
    let per_exit = |ns: u128| fmt_ns(ns as f64 / d.exits.max(1) as f64);
    let _ = writeln!(
        out,
        "{:<9} {} ({} exits{}): covers {}\n{:<9} mean {} per exit, {:.1}% of the exit; on CPU {} \
         per exit ({:.0}%), off CPU {} ({:.0}%: runnable {}, blocked {})",
        "stage:",
        d.stage,
        d.exits,
        selection(run),
        d.covers.join(", "),
        "time:",
        fmt_ns(d.mean_ns),
        d.share_of_exit * 100.0,
        per_exit(d.on_cpu_ns),
        pct(d.on_cpu_ns),
        per_exit(d.off_cpu_ns),
        pct(d.off_cpu_ns),
        per_exit(d.runnable_ns),
        per_exit(d.blocked_ns),
    );
    out.push_str(&on_cpu(d));
    out.push_str(&blocked(d));
    Ok(out)
}

fn on_cpu(d: &StageDetail) -> String {
    if d.samples == 0 {
        return "\non CPU: no samples in this stage (a higher --sample-hz takes more)\n".to_owned();
    }
    let mut functions =
        TextTable::new(["function", "samples", "share", "self", "est. time"]).figures_right();
    for f in d.functions.iter().take(FUNCTIONS_PRINTED) {
        functions.add_row([
            f.function.clone(),
            f.samples.to_string(),
            format!("{:.0}%", f.share * 100.0),
            format!("{:.0}%", f.self_share * 100.0),
            fmt_ns(f.est_ns),
        ]);
    }
    let mut stacks = TextTable::new(["stack", "samples", "share", "est. time"]).figures_right();
    for s in d.stacks.iter().take(STACKS_PRINTED) {
        stacks.add_row([
            describe_chain(&s.stack, FRAMES_PRINTED),
            s.samples.to_string(),
            format!("{:.0}%", s.share * 100.0),
            fmt_ns(s.est_ns),
        ]);
    }
    format!(
        "\non CPU: {} samples; share = of the samples with the function on their stack, self = \
         of those taken in its own code; est. time = share x the stage's on-CPU time\n\
         {functions}\n\nstacks sampled most:\n{stacks}\n",
        d.samples
    )
}

fn blocked(d: &StageDetail) -> String {
    if d.blocked_ns == 0 {
        return "\nblocked: never\n".to_owned();
    }
    let mut table =
        TextTable::new(["blocked in", "walked", "est. time", "of blocked"]).figures_right();
    for b in &d.blocked_in {
        table.add_row([
            b.describe(FRAMES_PRINTED),
            b.blocks.to_string(),
            fmt_ns(b.est_ns),
            format!("{:.0}%", b.est_ns / d.blocked_ns as f64 * 100.0),
        ]);
    }
    if d.blocked_unwalked_ns > 0 {
        table.add_row([
            "(no block's stack walked)".to_owned(),
            "0".to_owned(),
            fmt_ns(d.blocked_unwalked_ns as f64),
            "100%".to_owned(),
        ]);
    }
    format!(
        "\nblocked {} in all; each stack's share of the time walked shares it out\n{table}\n",
        fmt_ns(d.blocked_ns as f64)
    )
}

/// The run's first line: what ran, on which kernel.
fn header(doc: &RunDocument) -> String {
    format!(
        "{:<9} {} (kernel {}, attach {})\n",
        "run:",
        terminal::describe(&doc.workload),
        doc.kernel,
        doc.attach
    )
}

/// Whose exits a view shows, when not all of the run's.
fn selection(run: &RunOutcome) -> String {
    match run.selected {
        Some(s) => format!(" of {} ({} in the run)", s.filter.describe(), s.exits_in_run),
        None => String::new(),
    }
}

fn share(n: u64, of: u64) -> f64 {
    if of == 0 { 0.0 } else { n as f64 / of as f64 }
}

/// `--slowest --json`, `--exit --json`: the exits, each with its whole timeline.
#[derive(Serialize)]
struct ExitsDoc<'a> {
    exits_recorded: u64,
    exits: &'a [ExitTimeline],
}

/// Exits one by one: the slowest, each in a few lines (as `--slower-than` printed it), or one
/// exit's whole timeline.
pub fn exits(
    run: &RunOutcome,
    exits: &[ExitTimeline],
    shown: ExitsShown,
    json: bool,
) -> anyhow::Result<String> {
    if json {
        let doc = ExitsDoc { exits_recorded: run.profile.exits, exits };
        return Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?));
    }
    let mut out = header(&RunDocument::new(run));
    match shown {
        ExitsShown::Slowest(n) => {
            let _ = writeln!(
                out,
                "the {} slowest of {} exits recorded, longest first:\n",
                n.min(exits.len()),
                run.profile.exits
            );
            for exit in exits {
                let _ = writeln!(out, "{}", exit_timeline::summary(exit));
            }
        }
        ExitsShown::Of(_) => {
            for exit in exits {
                let _ = writeln!(out, "{}", exit_timeline::timeline(exit));
            }
        }
    }
    Ok(out)
}
