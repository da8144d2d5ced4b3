//! The terminal report: what ran, where the time went, what was lost.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, Table, presets::NOTHING};

use super::{document::RunDocument, fmt_ns, fmt_rate};

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
