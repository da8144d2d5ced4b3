//! One exit as a person reads it: a few lines as a slow exit ends (`--slower-than`), or its
//! whole timeline (`report --exit`).

use std::fmt::Write as _;

use crate::{
    analysis::{
        exit_timeline::{Cause, ExitTimeline},
        on_cpu::describe_chain,
    },
    report::{fmt_ns, table::TextTable},
};

/// Frames of a stack shown, innermost first.
const FRAMES_SHOWN: usize = 8;
/// A stage is shown among those that matter when it holds this part of the exit or more.
const STAGE_MATTERS: f64 = 0.05;

/// The exit in a few lines: who, when, how long, on and off the CPU, its cause, and its stages
/// that matter.
pub fn summary(t: &ExitTimeline) -> String {
    let mut out = headline(t);
    let _ = writeln!(out, "  cause: {}", cause(&t.cause));
    let mut stages: Vec<(&str, u64, u64)> = Vec::new();
    for s in &t.stages {
        match stages.iter_mut().find(|(name, _, _)| *name == s.name) {
            Some(seen) => (seen.1, seen.2) = (seen.1 + s.ns, seen.2 + s.off_cpu_ns),
            None => stages.push((&s.name, s.ns, s.off_cpu_ns)),
        }
    }
    let whole = t.duration_ns.max(1) as f64;
    let matter: Vec<String> = stages
        .iter()
        .filter(|(_, ns, _)| *ns as f64 >= STAGE_MATTERS * whole)
        .map(|(name, ns, off)| {
            format!(
                "{name} {} ({:.0}%, {:.0}% off CPU)",
                fmt_ns(*ns as f64),
                *ns as f64 / whole * 100.0,
                *off as f64 / (*ns).max(1) as f64 * 100.0
            )
        })
        .collect();
    if !matter.is_empty() {
        let _ = writeln!(out, "  stages: {}", matter.join("; "));
    }
    if t.truncated {
        out.push_str("  (hits lost for want of slots: its last stages are unknown)\n");
    }
    out
}

/// The exit's whole timeline: every stage, every block with its stack, every sample.
pub fn timeline(t: &ExitTimeline) -> String {
    let mut out = headline(t);
    let _ = writeln!(out, "  cause: {}", cause(&t.cause));
    out.push_str("\nstages, from the exit's start\n");
    let mut stages = TextTable::new(["at", "stage", "time", "off CPU", "runnable"]).names_left(2);
    for s in &t.stages {
        stages.add_row([
            format!("+{}", fmt_ns(s.at_ns as f64)),
            s.name.clone(),
            fmt_ns(s.ns as f64),
            fmt_ns(s.off_cpu_ns as f64),
            fmt_ns(s.runq_ns as f64),
        ]);
    }
    let _ = writeln!(out, "{stages}");
    let walked: u64 = t.blocked.iter().map(|b| b.ns).sum();
    let _ = writeln!(
        out,
        "\nblocks: {} walked of {} ({} of {} blocked); off CPU {} = blocked {} + runnable {}",
        t.blocked.len(),
        t.blocks,
        fmt_ns(walked as f64),
        fmt_ns(t.blocked_ns as f64),
        fmt_ns(t.off_cpu_ns as f64),
        fmt_ns(t.blocked_ns as f64),
        fmt_ns(t.runq_ns as f64)
    );
    if !t.blocked.is_empty() {
        let mut blocks = TextTable::new(["at", "time", "stage", "blocked in"]).names_left(2);
        for b in &t.blocked {
            blocks.add_row([
                format!("+{}", fmt_ns(b.at_ns as f64)),
                fmt_ns(b.ns as f64),
                b.stage.clone().unwrap_or_else(|| "?".to_owned()),
                describe_chain(&b.stack, FRAMES_SHOWN),
            ]);
        }
        let _ = writeln!(out, "{blocks}");
    }
    if t.unwalked_blocked_ns > 0 {
        let _ = writeln!(
            out,
            "  {} blocked in blocks whose stack was not walked (over the budget of walks)",
            fmt_ns(t.unwalked_blocked_ns as f64)
        );
    }
    let _ = writeln!(out, "\nsamples on CPU: {}", t.samples.len());
    if !t.samples.is_empty() {
        let mut samples = TextTable::new(["at", "stage", "on CPU in"]).names_left(2);
        for s in &t.samples {
            samples.add_row([
                format!("+{}", fmt_ns(s.at_ns as f64)),
                s.stage.clone().unwrap_or_else(|| "?".to_owned()),
                describe_chain(&s.stack, FRAMES_SHOWN),
            ]);
        }
        let _ = writeln!(out, "{samples}");
    }
    out
}

/// `19:42:07.123 pid 4242 (process 4242) name/process, a process exit in cgroup ... took
/// 201.3ms: 0.1 ms on CPU, off CPU 201.2ms (blocked 201.1ms in 1 block, runnable 0.1ms)`.
fn headline(t: &ExitTimeline) -> String {
    let when = t.ended_at.map(clock).map(|c| format!("{c} ")).unwrap_or_default();
    let names = if t.comm == t.process_comm {
        t.comm.clone()
    } else {
        format!("{} of {}", t.comm, t.process_comm)
    };
    let pid = if t.ns_pid != 0 && t.ns_pid != t.pid {
        format!("pid {} (host {})", t.ns_pid, t.pid)
    } else {
        format!("pid {}", t.pid)
    };
    let process = if t.tgid == t.pid {
        String::new()
    } else {
        format!(" of process {}", t.ns_tgid.max(t.tgid))
    };
    let cgroup = match (&t.cgroup, &t.workload) {
        (Some(path), Some(workload)) if workload != path => format!(", cgroup {path} ({workload})"),
        (Some(path), _) => format!(", cgroup {path}"),
        (None, _) if t.cgroup_id != 0 => format!(", cgroup id {}", t.cgroup_id),
        _ => String::new(),
    };
    format!(
        "{when}{pid}{process} {names}, a {} exit{cgroup}: took {}, {} on CPU, {} off (blocked {} in \
         {} block{}, runnable {})\n",
        t.kind.name(),
        fmt_ns(t.duration_ns as f64),
        fmt_ns(t.on_cpu_ns as f64),
        fmt_ns(t.off_cpu_ns as f64),
        fmt_ns(t.blocked_ns as f64),
        t.blocks,
        if t.blocks == 1 { "" } else { "s" },
        fmt_ns(t.runq_ns as f64)
    )
}

/// The cause in words.
pub fn cause(c: &Cause) -> String {
    match c {
        Cause::Blocked { ns, stack, stack_ns } if !stack.is_empty() => format!(
            "blocked {} in all, {} of it in {}",
            fmt_ns(*ns as f64),
            fmt_ns(*stack_ns as f64),
            describe_chain(stack, FRAMES_SHOWN)
        ),
        Cause::Blocked { ns, .. } => {
            format!("blocked {} (no block's stack was walked)", fmt_ns(*ns as f64))
        }
        Cause::Runnable { ns } => {
            format!("waited {} for a CPU (preempted: the CPUs were busy)", fmt_ns(*ns as f64))
        }
        Cause::Computed { ns, chain, share, samples } if !chain.is_empty() => format!(
            "computed {}, mostly in {} ({:.0}% of its {samples} samples)",
            fmt_ns(*ns as f64),
            describe_chain(chain, FRAMES_SHOWN),
            share * 100.0
        ),
        Cause::Computed { ns, .. } => {
            format!("computed {} (no sample caught it)", fmt_ns(*ns as f64))
        }
    }
}

/// `HH:MM:SS.mmm` (UTC) of a time in seconds since the Unix epoch.
fn clock(unix_s: f64) -> String {
    let ms = (unix_s * 1000.0) as u64;
    let (s, ms) = (ms / 1000, ms % 1000);
    format!("{:02}:{:02}:{:02}.{ms:03}Z", s / 3600 % 24, s / 60 % 60, s % 60)
}
