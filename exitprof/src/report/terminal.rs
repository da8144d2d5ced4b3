//! The terminal report: what ran, where the time went, what was lost.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, Table, presets::NOTHING};

use super::{document::RunDocument, fmt_ns, fmt_rate};
use crate::{deferred::DeferredReport, histogram::Summary};

/// Renders a run for a person.
pub fn render(doc: &RunDocument) -> String {
    let mut out = String::new();
    if doc.partial {
        out.push_str("PARTIAL RESULTS: the run was interrupted before the workload finished\n");
    }
    let w = &doc.workload;
    let _ = writeln!(
        out,
        "workload: threads, {} threads x {} reps, stagger {} us (kernel {}, attach {})",
        w.threads.threads, w.threads.reps, w.threads.stagger_us, doc.kernel, doc.attach
    );
    let _ = writeln!(
        out,
        "storm:    elapsed {:.3} s, user {:.3} s, sys {:.3} s, {} exits/s",
        doc.elapsed_s,
        doc.user_s,
        doc.sys_s,
        fmt_rate(doc.exit_rate)
    );
    let _ = writeln!(
        out,
        "exits:    {} recorded of {} expected, {} lost{}",
        doc.exits_recorded,
        doc.exits_expected,
        doc.lost,
        loss_detail(doc)
    );
    out.push('\n');
    out.push_str(&stage_table(doc).to_string());
    out.push('\n');
    let _ = writeln!(out, "\nverdict: {}", doc.verdict);
    out.push_str(&deferred_table(&doc.deferred));
    out
}

fn loss_detail(doc: &RunDocument) -> String {
    let parts: Vec<String> = doc
        .losses
        .by_cause()
        .into_iter()
        .filter(|&(_, _, n)| n > 0)
        .map(|(_, what, n)| format!("{n} {what}"))
        .collect();
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// Deferred work, when there was any: a latency table and what it says about IPC batches.
fn deferred_table(d: &DeferredReport) -> String {
    let rows: [(&str, &Summary); 6] = [
        ("free_ipc run (kworker)", &d.ipc.run_ns),
        ("  RCU grace period in it", &d.ipc.rcu_wait_ns),
        ("exit end → IPC namespace freed", &d.ipc.exit_to_free_ns),
        ("parent's release_task (reap)", &d.reap.release_task_ns),
        ("exit end → reaped by parent", &d.reap.exit_to_reap_ns),
        ("exit end → task freed (RCU)", &d.task_free.exit_to_free_ns),
    ];
    let mut table = Table::new();
    table.load_preset(NOTHING);
    table.set_header(["deferred work", "count", "mean", "p50", "p90", "p99", "max"]);
    for (name, s) in rows.into_iter().filter(|(_, s)| s.count > 0) {
        table.add_row([
            name.to_owned(),
            s.count.to_string(),
            fmt_ns(s.mean_ns),
            fmt_ns(s.p50_ns as f64),
            fmt_ns(s.p90_ns as f64),
            fmt_ns(s.p99_ns as f64),
            fmt_ns(s.max_ns as f64),
        ]);
    }
    if table.row_iter().next().is_none() {
        return String::new();
    }
    for column in table.column_iter_mut().skip(1) {
        column.set_cell_alignment(CellAlignment::Right);
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

fn stage_table(doc: &RunDocument) -> Table {
    let mut table = Table::new();
    table.load_preset(NOTHING);
    table.set_header([
        "stage", "count", "mean", "p50", "p90", "p99", "p99.9", "max", "share", "off-CPU",
    ]);
    for (i, s) in doc.stages.iter().enumerate() {
        let name = if i == 0 { s.name.clone() } else { format!("  {}", s.name) };
        table.add_row([
            name,
            s.count.to_string(),
            fmt_ns(s.mean_ns),
            fmt_ns(s.p50_ns as f64),
            fmt_ns(s.p90_ns as f64),
            fmt_ns(s.p99_ns as f64),
            fmt_ns(s.p999_ns as f64),
            fmt_ns(s.max_ns as f64),
            format!("{:.1}%", s.share_of_exit * 100.0),
            format!("{:.1}%", s.off_cpu_share * 100.0),
        ]);
    }
    for column in table.column_iter_mut().skip(1) {
        column.set_cell_alignment(CellAlignment::Right);
    }
    table
}
