//! The diff as a person reads it: what was compared, how noise was judged, the tables, the
//! verdict.

use std::fmt::Write as _;

use crate::{
    analysis::on_cpu::describe_chain,
    diff::{
        document::{DiffDocument, RowDoc, SideDoc, StackChange},
        noise::Change,
        verdict::percent,
    },
    document::{fmt_ns, signed, table::TextTable},
};

/// Frames shown per stack, innermost first.
const FRAMES_SHOWN: usize = 5;

pub fn render(doc: &DiffDocument) -> String {
    let mut out = String::new();
    for (name, side) in [("A", &doc.a), ("B", &doc.b)] {
        let _ = writeln!(out, "{name}: {}", describe_side(side));
    }
    let _ = writeln!(out, "noise: {}", describe_noise(doc));
    out.push_str("\ntime per exit (of all exits, whether they passed through the row or not)\n");
    out.push_str(&time_table(doc).to_string());
    out.push('\n');
    let latency = latency_table(&doc.rows);
    if !latency.is_empty() {
        out.push_str("\nlatency of the exits through each row (rows of one stage a side)\n");
        out.push_str(&latency.to_string());
        out.push('\n');
    }
    for (title, stacks) in [("blocked in", &doc.blocked_in), ("on CPU in", &doc.on_cpu_in)] {
        if !stacks.is_empty() {
            let _ = writeln!(
                out,
                "\n{title}: the stacks whose time per exit changed most (means of each side's \
                 runs; a run that does not list a stack counts as none)"
            );
            out.push_str(&stack_table(title, stacks).to_string());
            out.push('\n');
        }
    }
    let teardowns = teardown_table(doc);
    if !teardowns.is_empty() {
        out.push_str(
            "\nnamespace teardowns the exits set off (each joined namespace's share of its run; \
             means of each side's runs)\n",
        );
        out.push_str(&teardowns.to_string());
        out.push('\n');
    }
    for warning in &doc.warnings {
        let _ = writeln!(out, "\nwarning: {warning}");
    }
    let _ = writeln!(out, "\nverdict: {}", doc.verdict);
    out
}

/// Each kind of teardown: its time and wait on both sides, and its shares blocked and on a CPU.
fn teardown_table(doc: &DiffDocument) -> TextTable {
    let mut table = TextTable::new(["teardown", "figure", "A", "B", "change", "interval", "noise"])
        .names_left(2);
    for t in &doc.teardowns {
        let times = [("teardown", &t.teardown_ns), ("exit end → start", &t.wait_ns)];
        let shares = [("blocked", &t.blocked_share), ("on CPU", &t.on_cpu_share)];
        let rows =
            times.into_iter().map(|(figure, c)| (figure, c, fmt_ns as fn(f64) -> String)).chain(
                shares.into_iter().map(|(figure, c)| (figure, c, share_cell as fn(f64) -> String)),
            );
        for (i, (figure, change, fmt)) in rows.enumerate() {
            let name = if i == 0 { t.name.clone() } else { String::new() };
            match change {
                Some(c) => table.add_row([
                    name,
                    figure.to_owned(),
                    fmt(c.a),
                    fmt(c.b),
                    change_cell(c),
                    interval_cell(c),
                    noise_cell(c).to_owned(),
                ]),
                None => table.add_row([
                    name,
                    figure.to_owned(),
                    side_cell(&t.a_joined),
                    side_cell(&t.b_joined),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                ]),
            };
        }
    }
    table
}

fn share_cell(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// What a side of a teardown row has where it joined none: `none`.
fn side_cell(joined: &[u64]) -> String {
    if joined.iter().all(|&n| n == 0) { "none".to_owned() } else { String::new() }
}

pub fn describe_side(side: &SideDoc) -> String {
    let runs = match side.files.as_slice() {
        [one] => format!("1 run ({one})"),
        files => format!("{} runs ({})", files.len(), files.join(" ")),
    };
    let exits = match (side.exits.iter().min(), side.exits.iter().max()) {
        (Some(n), _) if side.exits.len() == 1 => format!("{n} exits"),
        (Some(lo), Some(hi)) if lo == hi => format!("{lo} exits each"),
        (Some(lo), Some(hi)) => format!("{lo} to {hi} exits each"),
        _ => String::new(),
    };
    let partial = if side.partial { "; some cut short" } else { "" };
    let lost: u64 = side.lost.iter().sum();
    let full: u64 = side.lost_ringbuf_full.iter().sum();
    let full = if full > 0 { format!(", {full} to a full ring buffer") } else { String::new() };
    format!(
        "{runs}: kernel {}, attach {}, {}, {exits}; {lost} lost ({:.1}%{full}){partial}",
        side.kernels.join(" / "),
        side.attach.join(" / "),
        side.workloads.join(" / "),
        side.loss_rate * 100.0
    )
}

fn describe_noise(doc: &DiffDocument) -> String {
    let n = &doc.noise;
    if n.method == "interval" {
        format!(
            "the run is the unit; intervals are Welch's t over the runs, {:.0}% for all {} rows \
             of a column together ({:.2}% each)",
            n.confidence * 100.0,
            doc.rows.len(),
            n.row_level * 100.0
        )
    } else {
        format!(
            "the run is the unit, and with fewer than 3 runs a side there is no interval: a \
             change counts as beyond noise only past {}x either way and by {:.0}% of the whole \
             exit's figure or more, and tails (p99) and time off a CPU not at all",
            n.factor,
            n.floor * 100.0
        )
    }
}

/// `+1.2µs (+5%)`.
fn change_cell(c: &Change) -> String {
    format!("{}{}", signed(c.delta), percent(c))
}

fn interval_cell(c: &Change) -> String {
    c.interval.map(|i| format!("{} to {}", signed(i.low), signed(i.high))).unwrap_or_default()
}

fn noise_cell(c: &Change) -> &'static str {
    match c.beyond_noise {
        Some(true) => "beyond",
        Some(false) => "within",
        None => "-",
    }
}

pub fn time_table(doc: &DiffDocument) -> TextTable {
    let mut table = TextTable::new([
        "row",
        "A",
        "B",
        "change",
        "interval",
        "noise",
        "share",
        "on-CPU change",
        "off-CPU change",
    ])
    .figures_right();
    for r in &doc.rows {
        let c = &r.ns_per_exit;
        // A share of a change the runs cannot tell from none means nothing.
        let share = match r.share_of_change {
            Some(share) if doc.rows[0].ns_per_exit.is_beyond_noise() => {
                format!("{:.0}%", share * 100.0)
            }
            _ => "-".to_owned(),
        };
        table.add_row([
            row_name(r),
            fmt_ns(c.a),
            fmt_ns(c.b),
            change_cell(c),
            interval_cell(c),
            noise_cell(c).to_owned(),
            share,
            signed(r.on_cpu_ns_per_exit.delta),
            signed(r.off_cpu_ns_per_exit.delta),
        ]);
    }
    table
}

/// The row's name, with the stages of each side where they are not one and the same.
fn row_name(r: &RowDoc) -> String {
    let g = &r.group;
    if g.a_stages == g.b_stages && g.a_stages.len() == 1 {
        return g.name.clone();
    }
    let stages = |stages: &[String]| match stages {
        [] => "none in its runs".to_owned(),
        stages => stages.join(" + "),
    };
    format!("{}\n  A: {}\n  B: {}", g.name, stages(&g.a_stages), stages(&g.b_stages))
}

pub fn latency_table(rows: &[RowDoc]) -> TextTable {
    let mut table =
        TextTable::new(["row", "figure", "A", "B", "change", "interval", "noise"]).names_left(2);
    for r in rows {
        let figures = [("mean", &r.mean_ns), ("p50", &r.p50_ns), ("p99", &r.p99_ns)];
        for (i, (figure, change)) in figures.into_iter().enumerate() {
            let Some(c) = change else { continue };
            table.add_row([
                if i == 0 { r.group.name.clone() } else { String::new() },
                figure.to_owned(),
                fmt_ns(c.a),
                fmt_ns(c.b),
                change_cell(c),
                interval_cell(c),
                noise_cell(c).to_owned(),
            ]);
        }
    }
    table
}

pub fn stack_table(title: &str, stacks: &[StackChange]) -> TextTable {
    let mut table = TextTable::new(["row", title, "A", "B", "change"]).names_left(2);
    for s in stacks {
        table.add_row([
            s.row.clone(),
            describe_chain(&s.stack, FRAMES_SHOWN),
            fmt_ns(s.a_ns_per_exit),
            fmt_ns(s.b_ns_per_exit),
            signed(s.delta_ns_per_exit),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::document::tests::{
        a_path_one_side_never_took, a_side_that_lost_most_exits, network_namespace_teardowns,
    };

    #[test]
    fn the_tables_say_what_the_document_found() {
        assert!(render(&a_path_one_side_never_took()).contains("B: none in its runs"));
        let text = render(&a_side_that_lost_most_exits());
        assert!(text.contains("9900 lost (99.0%, 9900 to a full ring buffer)"), "{text}");
        let text = render(&network_namespace_teardowns());
        assert!(text.contains("network namespace teardown (cleanup_net)"), "{text}");
    }
}
