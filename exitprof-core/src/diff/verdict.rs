//! The diff's verdict in words: how much the exit changed, whether the runs can tell that from
//! run-to-run noise, and where the change is.

use super::{
    document::{DiffDocument, MovedCode, NoiseDoc, ROWS_NAMED, RowDoc, named_rows},
    noise::Change,
};
use crate::{
    analysis::on_cpu::describe_chain,
    document::{fmt_ns, run::RunDocument, signed},
};

/// Frames of a chain the verdict names, innermost first (as a run's verdict does).
const CHAIN_SHOWN: usize = 6;
/// Functions of what a row covers the verdict names.
const COVERS_SHOWN: usize = 4;
/// A part of a row's change (on or off a CPU) worth naming the code of.
const WORTH_NAMING: f64 = 0.25;

impl DiffDocument {
    /// Sides `a` and `b` compared, with the verdict.
    pub fn judged(a: &[(String, RunDocument)], b: &[(String, RunDocument)]) -> Self {
        let mut doc = Self::new(a, b);
        doc.verdict = verdict(&doc);
        doc
    }
}

/// The verdict in words on `doc`.
fn verdict(doc: &DiffDocument) -> String {
    let exit = &doc.rows[0].ns_per_exit;
    let mut text = format!(
        "An exit takes {} in B against {} in A, {}{}: {}.",
        fmt_ns(exit.b),
        fmt_ns(exit.a),
        signed(exit.delta),
        percent(exit),
        judgement(exit, &doc.noise)
    );
    let moved = named_rows(&doc.rows);
    let beyond = doc.rows[1..].iter().filter(|r| r.ns_per_exit.is_beyond_noise()).count();
    if moved.is_empty() {
        if doc.rows.len() > 1 {
            text.push_str(" No stage's time per exit changes beyond noise.");
        }
    } else {
        let named: Vec<String> = moved
            .iter()
            .map(|r| {
                let share = match r.share_of_change {
                    Some(share) if exit.is_beyond_noise() => {
                        format!(", {:.0}% of the exit's change", share * 100.0)
                    }
                    _ => String::new(),
                };
                format!(
                    "{} {}{}{share}",
                    r.group.name,
                    signed(r.ns_per_exit.delta),
                    percent(&r.ns_per_exit)
                )
            })
            .collect();
        let more = beyond.saturating_sub(ROWS_NAMED);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        text.push_str(&format!(" Beyond noise, per exit: {}{more}.", named.join("; ")));
        if let (Some(top), Some(code)) = (moved.first(), doc.moved_code.first()) {
            text.push_str(&where_it_moved(top, code));
        }
    }
    if !doc.same_cut {
        text.push_str(&format!(" {}", cut_note(doc)));
    }
    if doc.a.partial || doc.b.partial {
        text.push_str(" Some runs were cut short: their figures cover what ran until then.");
    }
    if !doc.warnings.is_empty() {
        text.push_str(" The sides' losses make this comparison less than fair (see the warnings).");
    }
    text
}

/// The code of the row that moved most: what it covers, and where its change on a CPU and
/// off it went (each where it is a fair part of the row's change).
fn where_it_moved(row: &RowDoc, code: &MovedCode) -> String {
    let mut text = String::new();
    // A stage of one function names its code already.
    if code.covers.len() > 1 || code.covers.first().is_some_and(|c| *c != row.group.name) {
        let more = code.covers.len().saturating_sub(COVERS_SHOWN);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let shown: Vec<&str> = code.covers.iter().take(COVERS_SHOWN).map(String::as_str).collect();
        text.push_str(&format!(" {} covers {}{more}", row.group.name, shown.join(", ")));
    }
    let delta = row.ns_per_exit.delta;
    let worth = |part: f64| delta != 0.0 && part / delta >= WORTH_NAMING;
    let mut parts = Vec::new();
    if let Some(chain) = &code.on_cpu
        && worth(row.on_cpu_ns_per_exit.delta)
    {
        parts.push(format!(
            "on a CPU {} per exit, mostly in {} ({:.0}% of that)",
            signed(row.on_cpu_ns_per_exit.delta),
            describe_chain(&chain.frames, CHAIN_SHOWN),
            chain.share * 100.0
        ));
    }
    if let Some(stack) = &code.blocked
        && worth(row.off_cpu_ns_per_exit.delta)
    {
        parts.push(format!(
            "off a CPU {} per exit, blocked most in {} ({})",
            signed(row.off_cpu_ns_per_exit.delta),
            describe_chain(&stack.frames, CHAIN_SHOWN),
            signed(stack.delta_ns_per_exit)
        ));
    }
    match (text.is_empty(), parts.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!("{text}."),
        (true, false) => format!(" Its time moved {}.", parts.join("; ")),
        (false, false) => format!("{text}; its time moved {}.", parts.join("; ")),
    }
}

/// ` (+12%)`, or nothing when A's figure is 0.
pub fn percent(c: &Change) -> String {
    c.relative.map(|r| format!(" ({:+.0}%)", r * 100.0)).unwrap_or_default()
}

/// Whether a change can be told from run-to-run noise, and how that was judged.
pub fn judgement(c: &Change, noise: &NoiseDoc) -> String {
    let runs = match (noise.runs_a, noise.runs_b) {
        (1, 1) => "one run a side".to_owned(),
        (a, b) if a == b => format!("{a} runs a side"),
        (a, b) => format!("{a} runs of A and {b} of B"),
    };
    if c.no_spread && c.delta != 0.0 {
        return format!(
            "this cannot be judged: the {runs} do not differ at all in this figure, so they say              nothing of how far runs of one workload differ (no interval)"
        );
    }
    match (c.interval, c.beyond_noise) {
        (Some(i), Some(true)) => format!(
            "beyond run-to-run noise (interval {} to {} over {runs})",
            signed(i.low),
            signed(i.high)
        ),
        (Some(i), _) => format!(
            "within run-to-run noise (its interval, {} to {} over {runs}, includes 0)",
            signed(i.low),
            signed(i.high)
        ),
        (None, Some(true)) => format!(
            "more than {}x either way, beyond what runs of one workload differ by; with {runs} \
             there is no interval (3 runs a side or more give one)",
            noise.factor
        ),
        (None, Some(false)) => format!(
            "with {runs} this cannot be told from run-to-run noise (without 3 runs a side, only \
             a change past {}x either way, by {:.0}% of the whole exit or more, can)",
            noise.factor,
            noise.floor * 100.0
        ),
        (None, None) => format!(
            "with {runs} this cannot be told from run-to-run noise: it is mostly time off a CPU, \
             which varies far more than that between runs"
        ),
    }
}

/// Where the sides cut the exit differently, how they were compared.
pub fn cut_note(doc: &DiffDocument) -> String {
    let differ = |what: &str, a: &[String], b: &[String]| {
        (a != b).then(|| format!("{what} {} vs {}", a.join(", "), b.join(", ")))
    };
    let why: Vec<String> = [
        differ("kernel", &doc.a.kernels, &doc.b.kernels),
        differ("attach", &doc.a.attach, &doc.b.attach),
    ]
    .into_iter()
    .flatten()
    .collect();
    let why = if why.is_empty() { String::new() } else { format!(" ({})", why.join("; ")) };
    let merged = doc.rows.iter().filter(|r| !r.group.is_same_cut()).count();
    let mut note = format!(
        "A and B cut the exit differently{why}: stages are compared by the kernel code they \
         cover, at the finest cut both share ({merged} of {} rows join differing stages)",
        doc.rows.len() - 1
    );
    let only = |side: &str, code: &dyn Fn(&RowDoc) -> &Vec<String>| {
        let names: Vec<&str> = doc.rows.iter().flat_map(code).map(String::as_str).collect();
        (!names.is_empty()).then(|| format!("; only {side} covers {}", names.join(", ")))
    };
    note.extend(only("A", &|r| &r.group.only_a));
    note.extend(only("B", &|r| &r.group.only_b));
    note.push('.');
    note
}
