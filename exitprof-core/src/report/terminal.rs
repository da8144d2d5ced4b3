//! The terminal report: what ran, where the time went, what was lost.

use std::fmt::Write as _;

use exitprof_common::counters;

use crate::{
    analysis::{
        deferred::DeferredReport,
        histogram::Summary,
        on_cpu::describe_chain,
        probe_effect::ProbeEffect,
        teardown::{TeardownReport, TeardownReports},
    },
    document::{
        fmt_ns, fmt_rate,
        run::{KernelCostDoc, RateDoc, RunDocument, StageDoc, WorkloadDoc},
        table::TextTable,
    },
};

/// Renders a run for a person.
pub fn render(doc: &RunDocument) -> String {
    let mut out = String::new();
    if doc.partial {
        out.push_str("PARTIAL RESULTS: the run was interrupted before the workload finished\n");
    }
    let _ = writeln!(
        out,
        "{:<9} {} (kernel {}, attach {}{})",
        heading(&doc.workload),
        describe(&doc.workload),
        doc.kernel,
        doc.attach,
        if doc.object.is_compat() {
            format!(", compat eBPF object, for want of {}", doc.object.missing.join(", "))
        } else {
            String::new()
        }
    );
    let cpu = match (doc.user_s, doc.sys_s) {
        (Some(user), Some(sys)) => format!("user {user:.3} s, sys {sys:.3} s"),
        _ => "user and sys not measurable (not exitprof's children)".to_owned(),
    };
    let _ = writeln!(
        out,
        "{:<9} elapsed {:.3} s, {cpu}, {} exits/s",
        if heading(&doc.workload) == "workload:" { "storm:" } else { "run:" },
        doc.elapsed_s,
        fmt_rate(doc.exit_rate)
    );
    if let Some(rate) = &doc.rate {
        let _ = writeln!(out, "{:<9} {}", "rate:", describe_rate(rate, doc.exit_rate));
    }
    out.push_str(&exits_line(doc));
    out.push_str(&notes(doc));
    out.push('\n');
    out.push_str(&stage_table(&doc.stages).to_string());
    out.push('\n');
    let _ = writeln!(out, "{}", probe_effect_line(doc.probe_effect.as_ref()));
    // Thread exits and process exits apart, where both occur.
    if doc.by_kind.len() > 1 {
        for kind in &doc.by_kind {
            let _ = writeln!(out, "\n{} exits ({}):", kind.kind.name(), kind.exits);
            out.push_str(&stage_table(&kind.stages).to_string());
            out.push('\n');
        }
    }
    if let Some(groups) = &doc.groups {
        out.push_str(&groups.render());
    }
    let _ = writeln!(out, "\nverdict: {}", doc.verdict);
    out.push_str(&on_cpu_table(doc));
    out.push_str(&blocked_in_table(doc));
    out.push_str(&deferred_table(&doc.deferred, &doc.teardowns));
    if let Some(cost) = &doc.kernel_cost {
        out.push_str(&kernel_cost_table(cost));
    }
    out
}

/// How many exits were recorded and lost (of the exits a view selected, where one did).
fn exits_line(doc: &RunDocument) -> String {
    let mut out = String::new();
    let expected = match doc.exits_expected {
        Some(n) => format!(" of {n} expected"),
        None => String::new(),
    };
    match &doc.selected {
        Some(s) => {
            let lost = match doc.lost {
                0 => "none".to_owned(),
                n => format!("{n}{}: whose they were cannot be told", loss_detail(doc)),
            };
            let _ = writeln!(
                out,
                "{:<9} {} recorded of {} ({} in the run); the run lost {lost}",
                "exits:",
                doc.exits_recorded,
                s.selected.filter.describe(),
                s.selected.exits_in_run,
            );
        }
        None => {
            let _ = writeln!(
                out,
                "{:<9} {} recorded{expected}, {} lost{}",
                "exits:",
                doc.exits_recorded,
                doc.lost,
                loss_detail(doc)
            );
        }
    }
    out
}

/// What the reader should know of the exits' timing: those timed late, closed late, or cut.
fn notes(doc: &RunDocument) -> String {
    let mut out = String::new();
    if doc.late_starts > 0 {
        let _ = writeln!(
            out,
            "{:<9} {} exits had no start probe: each is timed from the first exit-only point it \
             reached",
            "note:", doc.late_starts
        );
    }
    if doc.unseen_returns > 0 {
        let _ = writeln!(
            out,
            "{:<9} {} times a followed exit was back on a CPU with no sched_switch showing it: \
             its off-CPU interval closed late, at its next probe point",
            "note:", doc.unseen_returns
        );
    }
    // Not losses, but each says that an exit's end went unseen: counted here so that the sum of
    // recorded and lost exits stays right.
    for counter in [counters::STRAY_ENDS, counters::STALE_REFUSALS] {
        let (n, count) = (doc.losses.get(counter), &counters::KERNEL[counter as usize]);
        if n > 0 {
            let _ = writeln!(out, "{:<9} {n} {}: {}", "note:", count.what, count.help);
        }
    }
    if doc.truncated > 0 {
        let _ = writeln!(
            out,
            "{:<9} {} exits ran out of hit slots: counted in the whole exit, left out of the \
             stages",
            "note:", doc.truncated
        );
    }
    out
}

/// How much of the exits is exitprof's own programs running, or how to know.
pub fn probe_effect_line(effect: Option<&ProbeEffect>) -> String {
    match effect {
        Some(e) => format!(
            "exitprof's own in-kernel time: {} of the exit's mean {} ({:.1}%), shown beside each \
             stage (probes), not subtracted",
            fmt_ns(e.ns_per_exit),
            fmt_ns(e.exit_mean_ns),
            e.share_of_exit * 100.0
        ),
        None => "exitprof's own in-kernel time inside the exits: not measured (--bpf-stats \
                 measures it and shows it beside each stage)"
            .to_owned(),
    }
}

/// exitprof's own cost in the kernel (--bpf-stats).
fn kernel_cost_table(cost: &KernelCostDoc) -> String {
    let or_dash = |ns: Option<f64>| ns.map_or_else(|| "-".to_owned(), fmt_ns);
    let mut table = TextTable::new(["eBPF program", "runs", "per run", "per exit"]).figures_right();
    for p in &cost.programs {
        table.add_row([
            p.program.clone(),
            p.runs.to_string(),
            or_dash(p.ns_per_run),
            or_dash(p.ns_per_exit),
        ]);
    }
    format!(
        "\nexitprof in the kernel (BPF run-time statistics): {} per exit recorded, {} runs, {} \
         in all\n{table}\n",
        or_dash(cost.ns_per_exit),
        cost.runs,
        fmt_ns(cost.run_ns as f64)
    )
}

fn heading(w: &WorkloadDoc) -> &'static str {
    match w {
        WorkloadDoc::Threads(_)
        | WorkloadDoc::Fork(_)
        | WorkloadDoc::Ipcns(_)
        | WorkloadDoc::Netns(_) => "workload:",
        WorkloadDoc::Command { .. } => "command:",
        WorkloadDoc::Pid { .. }
        | WorkloadDoc::Comm { .. }
        | WorkloadDoc::Cgroup { .. }
        | WorkloadDoc::All { .. } => "watched:",
    }
}

pub fn describe(w: &WorkloadDoc) -> String {
    let for_duration = |d: &Option<f64>| match d {
        Some(secs) => format!(" for up to {secs:.1} s"),
        None => String::new(),
    };
    let loops = |parallel: u32| match parallel {
        1 => String::new(),
        p => format!(", {p} loops in parallel"),
    };
    match w {
        WorkloadDoc::Threads(p) => {
            let pace = match p.rate {
                Some(rate) => format!("paced for {} exits/s", fmt_rate(rate as f64)),
                None => format!("stagger {} us", p.stagger_us),
            };
            format!("threads, {} threads x {} reps, {pace}", p.threads, p.reps)
        }
        WorkloadDoc::Fork(f) => format!("fork, {} x fork + exit{}", f.count, loops(f.parallel)),
        WorkloadDoc::Ipcns(f) => {
            format!("ipcns, {} x fork + unshare(CLONE_NEWIPC) + exit{}", f.count, loops(f.parallel))
        }
        WorkloadDoc::Netns(n) => format!(
            "netns, {} x fork + unshare(CLONE_NEWNET) + {} veth pairs + exit{}",
            n.forks.count,
            n.veth_pairs,
            loops(n.forks.parallel)
        ),
        WorkloadDoc::Command { command } => {
            let words: Vec<String> = command.iter().map(|w| shell_quoted(w)).collect();
            format!("{} and its descendants", words.join(" "))
        }
        WorkloadDoc::Pid { pid, duration_s } => {
            format!("pid {pid} and its descendants{}", for_duration(duration_s))
        }
        WorkloadDoc::Comm { comm, duration_s } => {
            format!("tasks named {comm:?}{}", for_duration(duration_s))
        }
        WorkloadDoc::Cgroup { cgroup, duration_s } => {
            format!("tasks in cgroup {cgroup} and below it{}", for_duration(duration_s))
        }
        WorkloadDoc::All { duration_s } => {
            format!("every exit on the machine{}", for_duration(duration_s))
        }
    }
}

/// `word` as a shell would need it typed.
fn shell_quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn describe_rate(rate: &RateDoc, achieved: f64) -> String {
    let staggers = match (rate.staggers_ns.iter().min(), rate.staggers_ns.iter().max()) {
        (Some(&lo), Some(&hi)) => format!(
            " (stagger {}-{} per thread, chosen rep by rep)",
            fmt_ns(lo as f64),
            fmt_ns(hi as f64)
        ),
        _ => String::new(),
    };
    let verdict = if rate.reached {
        "reached".to_owned()
    } else {
        let ceiling = match rate.burst_max {
            Some(max) => format!(
                "; bursts without probes reached {} exits/s here before attaching",
                fmt_rate(max)
            ),
            None => String::new(),
        };
        format!("NOT reached, {:+.1}% off{ceiling}", (achieved / rate.target as f64 - 1.0) * 100.0)
    };
    format!(
        "target {} exits/s, achieved {} exits/s: {verdict}{staggers}",
        fmt_rate(rate.target as f64),
        fmt_rate(achieved)
    )
}

pub fn loss_detail(doc: &RunDocument) -> String {
    let parts: Vec<String> = doc
        .losses
        .by_cause()
        .filter(|&(_, n)| n > 0)
        .map(|(count, n)| format!("{n} {}", count.what))
        .collect();
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// Deferred work, when there was any: a latency table, with a row of each kind of namespace
/// teardown, and what it says about IPC batches and the teardowns.
fn deferred_table(d: &DeferredReport, t: &TeardownReports) -> String {
    let mut rows: Vec<(String, &Summary)> = vec![
        ("free_ipc run (kworker)".to_owned(), &d.ipc.run_ns),
        ("  RCU grace period in it".to_owned(), &d.ipc.rcu_wait_ns),
        ("exit end → IPC namespace freed".to_owned(), &d.ipc.exit_to_free_ns),
    ];
    for teardown in t.each() {
        rows.extend([
            (format!("{} run (kworker)", teardown.function), &teardown.run_ns),
            (format!("  {} teardown (its share)", teardown.kind), &teardown.teardown_ns),
            (format!("exit end → {} starts", teardown.function), &teardown.exit_to_start_ns),
            (format!("exit end → {} torn down", teardown.kind), &teardown.exit_to_done_ns),
        ]);
    }
    rows.extend([
        ("parent's release_task (reap)".to_owned(), &d.reap.release_task_ns),
        ("exit end → reaped by parent".to_owned(), &d.reap.exit_to_reap_ns),
        ("exit end → task freed (RCU), 1 exit in 16".to_owned(), &d.task_free.exit_to_free_ns),
    ]);
    let mut table = TextTable::new(["deferred work", "count", "mean", "p50", "p90", "p99", "max"])
        .figures_right();
    for (name, s) in rows.into_iter().filter(|(_, s)| s.count > 0) {
        let mut row = vec![name];
        row.extend(latency_cells(s, &[s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns]));
        table.add_row(row);
    }
    if table.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{table}\n");
    let ipc = &d.ipc;
    if ipc.runs > 0 {
        let _ = writeln!(
            out,
            "IPC namespaces: {} freed in {} free_ipc runs (mean {:.1}, max {} per run), {} of them \
             from recorded exits{}",
            ipc.namespaces_freed,
            ipc.runs,
            ipc.mean_per_run,
            ipc.max_per_run,
            ipc.namespaces_joined,
            if ipc.every_namespace_seen { "" } else { " (tracepoint mode sees only those)" }
        );
    }
    for teardown in t.each() {
        out.push_str(&teardown_lines(teardown));
    }
    if d.task_free.not_freed_yet > 0 {
        let _ = writeln!(
            out,
            "{} exited tasks were not freed yet when the run ended (RCU callbacks pending)",
            d.task_free.not_freed_yet
        );
    }
    if d.reap.reaped_before_exit_end > 0 {
        let _ = writeln!(
            out,
            "{} zombies were reaped before their final switch-out",
            d.reap.reaped_before_exit_end
        );
    }
    out
}

/// Teardown stacks and namespaces shown in the terminal.
const TEARDOWN_ROWS_PRINTED: usize = 3;

/// What one kind of namespace teardown did: its runs and batches, what joined and what did not,
/// where its kworker waited and computed, and the slowest namespaces by name.
fn teardown_lines(t: &TeardownReport) -> String {
    let mut out = String::new();
    if t.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{}s: {} torn down in {} {} runs (mean {:.1}, max {} per run, a run's time shared \
         equally), {} joined to the exit that left them; {} without a recorded exit, {} \
         outlived their last exit{}; {} exits' {} teardowns not seen",
        capitalised(&t.kind),
        t.namespaces,
        t.runs,
        t.function,
        t.mean_per_run,
        t.max_per_run,
        t.joined,
        t.without_exit,
        t.outlived,
        if t.outlived > 0 {
            format!(" (by {} at the median)", fmt_ns(t.outlived_by_ns.p50_ns as f64))
        } else {
            String::new()
        },
        t.not_seen,
        t.kind,
    );
    if t.joined > 0 {
        let _ = writeln!(
            out,
            "  their teardown: {:.0}% blocked, {:.0}% on a CPU, {:.0}% runnable{}",
            t.blocked_share * 100.0,
            t.on_cpu_share * 100.0,
            t.runnable_share * 100.0,
            if t.started_before_exit_end > 0 {
                format!("; {} started before their exit's end", t.started_before_exit_end)
            } else {
                String::new()
            }
        );
    }
    for b in t.blocked_in.iter().take(TEARDOWN_ROWS_PRINTED) {
        let _ = writeln!(
            out,
            "  blocked {:>5.1}% in {}: {}",
            b.share * 100.0,
            b.wait,
            describe_chain(&b.stack, FRAMES_PRINTED)
        );
    }
    for c in t.on_cpu_in.iter().take(TEARDOWN_ROWS_PRINTED) {
        let _ = writeln!(
            out,
            "  on CPU  {:>5.1}%: {}",
            c.share * 100.0,
            describe_chain(&c.stack, FRAMES_PRINTED)
        );
    }
    for n in t.slowest.iter().take(TEARDOWN_ROWS_PRINTED) {
        let _ = writeln!(
            out,
            "  {} of {} (pid {}): {} (of a run of {} for {}), {}",
            n.namespace,
            n.process_comm,
            n.tgid,
            fmt_ns(n.teardown_ns as f64),
            fmt_ns(n.run_ns as f64),
            n.batch,
            match n.wait_ns {
                Some(w) => format!("{} after the exit", fmt_ns(w as f64)),
                None => "started before the exit's end".to_owned(),
            }
        );
    }
    out
}

/// `network namespace` → `Network namespace`.
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// Stacks shown per stage in the terminal (the JSON document has more).
const ON_CPU_IN_PRINTED: usize = 3;
/// Frames shown per stack, innermost first.
const FRAMES_PRINTED: usize = 5;

/// Where exits computed: the stacks sampled most in each stage that has samples.
pub fn on_cpu_table(doc: &RunDocument) -> String {
    let mut table =
        TextTable::new(["stage", "on CPU in", "samples", "of stage", "est. time"]).names_left(2);
    let mut sampled: Vec<&StageDoc> = doc.stages.iter().filter(|s| s.on_cpu_samples > 0).collect();
    sampled.sort_by_key(|s| std::cmp::Reverse(s.on_cpu_samples));
    for stage in sampled {
        for (i, s) in stage.on_cpu_in.iter().take(ON_CPU_IN_PRINTED).enumerate() {
            table.add_row([
                if i == 0 { stage.name.clone() } else { String::new() },
                describe_chain(&s.stack, FRAMES_PRINTED),
                s.samples.to_string(),
                format!("{:.0}%", s.share * 100.0),
                fmt_ns(s.est_ns),
            ]);
        }
    }
    let n = doc.samples;
    let missed = n.unjoined + n.unplaced;
    if table.is_empty() && missed == 0 {
        return String::new();
    }
    let missed = if missed > 0 {
        format!(
            ", {} not placed in a stage ({} of exits never recorded, {} of exits short of hits)",
            missed, n.unjoined, n.unplaced
        )
    } else {
        String::new()
    };
    format!(
        "\non CPU in: {} samples of the exits on a CPU{missed}; est. time = share of the stage's \
         samples x its on-CPU time\n{table}\n",
        n.joined
    )
}

/// `n` and a noun, plural unless `n` is 1.
fn counted(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Blocked-in rows shown; the rest are summed in one row.
const BLOCKED_IN_SHOWN: usize = 5;

/// Where exits blocked, by stage and kernel stack: all of their blocked time, in the stacks
/// shown, the others, and the stages where no block's stack was walked.
pub fn blocked_in_table(doc: &RunDocument) -> String {
    if doc.blocked_ns == 0 {
        return String::new();
    }
    let mut table =
        TextTable::new(["stage", "blocked in", "walked", "est. time", "of blocked time"])
            .names_left(2);
    let share = |ns: f64| format!("{:.0}%", ns / doc.blocked_ns as f64 * 100.0);
    for b in doc.blocked_in.iter().take(BLOCKED_IN_SHOWN) {
        table.add_row([
            b.stage.clone(),
            b.describe(5),
            b.blocks.to_string(),
            fmt_ns(b.est_ns),
            share(b.est_ns),
        ]);
    }
    let rest = &doc.blocked_in[doc.blocked_in.len().min(BLOCKED_IN_SHOWN)..];
    if !rest.is_empty() {
        let ns: f64 = rest.iter().map(|b| b.est_ns).sum();
        let walked: u64 = rest.iter().map(|b| b.blocks).sum();
        table.add_row([
            String::new(),
            format!("({} other stacks)", rest.len()),
            walked.to_string(),
            fmt_ns(ns),
            share(ns),
        ]);
    }
    if doc.blocked_unwalked_ns > 0 {
        let ns = doc.blocked_unwalked_ns as f64;
        table.add_row([
            String::new(),
            "(stages where no stack was walked)".to_owned(),
            "0".to_owned(),
            fmt_ns(ns),
            share(ns),
        ]);
    }
    format!(
        "\n{} blocked in all, in {} of {}; the stacks of {} were walked (at most a few hundred a \
         second and CPU: a walk costs microseconds), and each stage's blocked time is shared out \
         by theirs\n{table}\n",
        fmt_ns(doc.blocked_ns as f64),
        counted(doc.blocks, "block"),
        counted(doc.blocked_exits, "exit"),
        counted(doc.blocks_walked, "block")
    )
}

/// The stage table; with --bpf-stats, a last column `probes`: the mean time exitprof's own
/// programs ran in the stage, included in its figures.
pub fn stage_table(stages: &[StageDoc]) -> TextTable {
    let mut header = vec![
        "stage", "count", "mean", "p50", "p90", "p99", "p99.9", "max", "share", "off-CPU",
        "runnable",
    ];
    let probes = stages.first().is_some_and(|s| s.probe_effect_ns.is_some());
    if probes {
        header.push("probes");
    }
    let mut table = TextTable::new(header).figures_right();
    for (i, s) in stages.iter().enumerate() {
        let name = if i == 0 { s.name.clone() } else { format!("  {}", s.name) };
        let l = &s.latency;
        let mut row = vec![name];
        row.extend(latency_cells(l, &[l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.max_ns]));
        row.extend([
            format!("{:.1}%", s.share_of_exit * 100.0),
            format!("{:.1}%", s.off_cpu_share * 100.0),
            // Of the off-CPU time, the part spent runnable: preempted, waiting for a CPU.
            if s.off_cpu_share > 0.0 {
                format!("{:.0}%", s.runq_share * 100.0)
            } else {
                "-".into()
            },
        ]);
        row.extend(s.probe_effect_ns.map(fmt_ns));
        table.add_row(row);
    }
    table
}

/// A latency summary's cells as the tables show them: the count, the mean, then `quantiles`.
fn latency_cells(s: &Summary, quantiles: &[u64]) -> Vec<String> {
    let quantiles = quantiles.iter().map(|&ns| fmt_ns(ns as f64));
    [s.count.to_string(), fmt_ns(s.mean_ns)].into_iter().chain(quantiles).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_read_as_typed() {
        assert_eq!(shell_quoted("/bin/true"), "/bin/true");
        assert_eq!(shell_quoted("for i in 1; do x; done"), "'for i in 1; do x; done'");
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
        assert_eq!(shell_quoted(""), "''");
    }
}
