//! One exit as a person reads it: a few lines as a slow exit ends (`--slower-than`), or its
//! whole timeline (`report --exit`).

use std::fmt::Write as _;

use crate::{
    analysis::{
        exit_teardown::ExitTeardown,
        exit_timeline::{Cause, ExitTimeline},
        on_cpu::describe_chain,
    },
    document::{fmt_ns, table::TextTable},
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
    for d in &t.teardowns {
        let _ = write!(out, "  then {}", teardown_body(d));
    }
    out
}

/// A namespace teardown joined to an exit, as `--slower-than` prints it when it is joined:
/// whose it is, when it ran after the exit, its share of its run, on and off a CPU, and where
/// its run blocked and computed. `exit_shown`: its exit was printed before (else it is printed
/// for its own length, and says how long the exit took).
pub fn teardown(d: &ExitTeardown, exit_shown: bool) -> String {
    let when = d.done_at.map(clock).map(|c| format!("{c} ")).unwrap_or_default();
    let names = if d.named.comm == d.named.process_comm {
        d.named.comm.to_string()
    } else {
        format!("{} of {}", d.named.comm, d.named.process_comm)
    };
    let exit = if exit_shown {
        String::new()
    } else {
        format!(" (its exit took {}, under the threshold)", fmt_ns(d.exit_ns as f64))
    };
    format!("{when}pid {} {names}{exit}: {}", d.named.pid, teardown_body(d))
}

/// `the teardown of its network namespace net:[4026532008] in cleanup_net, 1.2ms after the
/// exit's end: took 480ms (...)`, and where it blocked and computed.
fn teardown_body(d: &ExitTeardown) -> String {
    let n = &d.named;
    let after = match n.wait_ns {
        Some(w) => format!("{} after the exit's end", fmt_ns(w as f64)),
        None => "begun before the exit's end".to_owned(),
    };
    let run = if n.batch == 1 {
        format!("a run of {} for it alone", fmt_ns(n.run_ns as f64))
    } else {
        format!("its share of a run of {} for {} namespaces", fmt_ns(n.run_ns as f64), n.batch)
    };
    let mut out = format!(
        "the teardown of its {} {} in {}, {after}: took {} ({run}), {} on CPU, blocked {}, \
         runnable {}\n",
        d.kind.what(),
        n.namespace,
        d.function,
        fmt_ns(n.teardown_ns as f64),
        fmt_ns(n.on_cpu_ns as f64),
        fmt_ns(n.blocked_ns as f64),
        fmt_ns(d.runq_ns as f64)
    );
    if let Some(b) = d.blocked_in.first() {
        let _ = writeln!(
            out,
            "    blocked most in {} ({}, {})",
            b.wait,
            fmt_ns(b.est_ns),
            describe_chain(&b.stack, FRAMES_SHOWN)
        );
    }
    if let Some(path) = &d.computes_mostly_in {
        let _ = writeln!(
            out,
            "    computed mostly in {} ({:.0}% of its run's samples)",
            describe_chain(&path.frames, FRAMES_SHOWN),
            path.share * 100.0
        );
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
    if !t.teardowns.is_empty() {
        out.push_str("\nnamespace teardowns joined to it\n");
        for d in &t.teardowns {
            let _ = write!(out, "  {}", teardown_body(d));
        }
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
