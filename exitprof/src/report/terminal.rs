//! The terminal report: what ran, where the time went, what was lost.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, Table, presets::NOTHING};

use super::{
    document::{RateDoc, RunDocument, WorkloadDoc},
    fmt_ns, fmt_rate,
};

/// Renders a run for a person.
pub fn render(doc: &RunDocument) -> String {
    let mut out = String::new();
    if doc.partial {
        out.push_str("PARTIAL RESULTS: the run was interrupted before the workload finished\n");
    }
    let _ = writeln!(
        out,
        "{:<9} {} (kernel {}, attach {})",
        heading(&doc.workload),
        describe(&doc.workload),
        doc.kernel,
        doc.attach
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
    let expected = match doc.exits_expected {
        Some(n) => format!(" of {n} expected"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "{:<9} {} recorded{expected}, {} lost{}",
        "exits:",
        doc.exits_recorded,
        doc.lost,
        loss_detail(doc)
    );
    out.push('\n');
    out.push_str(&stage_table(doc).to_string());
    out.push('\n');
    out
}

fn heading(w: &WorkloadDoc) -> &'static str {
    match w {
        WorkloadDoc::Threads(_) | WorkloadDoc::Fork(_) | WorkloadDoc::Ipcns(_) => "workload:",
        WorkloadDoc::Command { .. } => "command:",
        WorkloadDoc::Pid { .. } | WorkloadDoc::Comm { .. } | WorkloadDoc::All { .. } => "watched:",
    }
}

fn describe(w: &WorkloadDoc) -> String {
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

fn loss_detail(doc: &RunDocument) -> String {
    let l = &doc.losses;
    let parts: Vec<String> = [
        (l.kernel.ringbuf_full, "ring buffer full"),
        (l.kernel.state_map_full, "state map full"),
        (l.undecodable, "undecodable"),
        (l.unfinished, "unfinished"),
        (l.hits, "probe hits over the per-exit limit"),
        (l.kernel.tracked_map_full, "forks not followed"),
    ]
    .into_iter()
    .filter(|&(n, _)| n > 0)
    .map(|(n, what)| format!("{n} {what}"))
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
