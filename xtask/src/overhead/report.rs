//! The benchmark's table, its targets, and `target/bench.json`.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    capacity::Capacity,
    collateral::{CONTEXT_SWITCH, CollateralReport},
    cost::{Costs, KernelCostReport, ProcessCost},
    parts::{DEFAULTS, NO_SAMPLING, PartsReport},
    side_by_side::SideBySide,
    storm::StormOverhead,
    wakeups::WakeupCost,
};

/// Storm elapsed time with exitprof attached, at most this much above without.
const STORM_OVERHEAD: f64 = 0.03;
/// Programs unrelated to exits, at most this much slower with exitprof attached elsewhere.
const COLLATERAL_OVERHEAD: f64 = 0.01;
/// What exitprof may add to each context switch of other tasks (the ping-pong's), in ns.
const NS_PER_CONTEXT_SWITCH: f64 = 15.0;
/// All eBPF programs together, per exit recorded, as a multiple of its floor (as many runs of
/// an empty program).
const KERNEL_TIMES_FLOOR: f64 = 2.5;
/// `sched_switch` per run while nothing exits, as a multiple of an empty program's.
const IDLE_SWITCH_TIMES_FLOOR: f64 = 1.3;
/// The 2006 benchmark's C storm under exitprof, elapsed, at most this many times without.
const SIDE_BY_SIDE_RATIO: f64 = 1.05;
/// exitprof's process collecting a storm, as a share of the storm's own CPU time.
const COLLECTING_SHARE: f64 = 0.05;
/// What on-CPU sampling at its default rate may add to the storm's overhead, in percentage
/// points: more, and it would not stay on by default.
const SAMPLING_POINTS: f64 = 1.0;
/// exitprof's peak resident memory during the storm, KiB.
const PEAK_RSS_KIB: f64 = 40.0 * 1024.0;
/// exitprof's CPU for a run of a single exit (loading, attaching, reporting), seconds.
const FIXED_CPU_S: f64 = 0.15;

/// Everything `cargo xtask bench` measured (`target/bench.json`).
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub kernel: String,
    pub cpus: usize,
    /// Runs per side, rounds of profiled runs.
    pub runs: u32,
    pub storm: StormOverhead,
    pub collateral: CollateralReport,
    pub kernel_cost: KernelCostReport,
    /// What the in-kernel cost cannot go below with as many program runs per exit.
    pub kernel_floor: KernelFloor,
    pub ring_buffer_wakeups: WakeupCost,
    pub exitprof_process: ProcessCost,
    pub capacity: Capacity,
    pub side_by_side: SideBySide,
    pub parts: PartsReport,
    pub targets: Vec<Verdict>,
}

/// The floor of the in-kernel cost: exitprof's program runs per exit, each at what a run of an
/// empty program on `sched_switch` costs (measured beside the ping-pong): the tracepoint's
/// dispatch, the program's call and the statistics' own clock reads.
#[derive(Debug, Serialize)]
pub struct KernelFloor {
    pub runs_per_exit: f64,
    pub ns_per_run: f64,
    pub ns_per_exit: f64,
}

impl KernelFloor {
    fn new(cost: &KernelCostReport, collateral: &CollateralReport) -> Self {
        let ns_per_run = collateral.empty_program_ns_per_run;
        let runs_per_exit: f64 = cost.programs.iter().map(|p| p.runs_per_exit).sum();
        Self { runs_per_exit, ns_per_run, ns_per_exit: runs_per_exit * ns_per_run }
    }

    /// The in-kernel cost per exit against its target: a multiple of the floor.
    fn verdict(&self, cost: &KernelCostReport) -> Verdict {
        Verdict::at_most(
            format!(
                "in-kernel cost per exit recorded ({}) / its floor ({:.2} runs x {})",
                fmt_ns(cost.ns_per_exit),
                self.runs_per_exit,
                fmt_ns(self.ns_per_run)
            ),
            cost.ns_per_exit / self.ns_per_exit,
            KERNEL_TIMES_FLOOR,
            times,
        )
    }

    /// `sched_switch` while nothing exits against its target: a multiple of the empty program.
    fn idle_switch_verdict(&self, collateral: &CollateralReport) -> Verdict {
        let idle = collateral.idle_sched_switch_ns_per_run.unwrap_or(f64::NAN);
        Verdict::at_most(
            format!(
                "sched_switch per run while nothing exits ({}) / an empty program's ({})",
                fmt_ns(idle),
                fmt_ns(self.ns_per_run)
            ),
            idle / self.ns_per_run,
            IDLE_SWITCH_TIMES_FLOOR,
            times,
        )
    }
}

/// The 2006 benchmark's C storm under exitprof: below a minimal probe, and near nothing at all.
fn side_by_side_verdicts(s: &SideBySide) -> [Verdict; 2] {
    [
        Verdict {
            quantity: format!(
                "{}: exitprof's ratio below a minimal probe's ({:.3})",
                s.storm, s.minimal_probe_ratio
            ),
            value: s.exitprof_ratio,
            limit: s.minimal_probe_ratio,
            met: s.exitprof_ratio < s.minimal_probe_ratio,
            measured: format!("{:.3}", s.exitprof_ratio),
            target: format!("< {:.3}", s.minimal_probe_ratio),
        },
        Verdict::at_most(
            format!("{}: elapsed under exitprof / with nothing attached", s.storm),
            s.exitprof_ratio,
            SIDE_BY_SIDE_RATIO,
            |v| format!("{v:.3}"),
        ),
    ]
}

/// A multiple: `2.41x`; `-` where nothing was measured (a program that never ran).
fn times(v: f64) -> String {
    if v.is_nan() { "-".to_owned() } else { format!("{v:.2}x") }
}

/// One figure against its target.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub quantity: String,
    pub value: f64,
    /// The highest value that meets the target.
    pub limit: f64,
    pub met: bool,
    /// Both, as the table shows them.
    pub measured: String,
    pub target: String,
}

impl Verdict {
    fn at_most(quantity: String, value: f64, limit: f64, show: impl Fn(f64) -> String) -> Self {
        Self {
            quantity,
            value,
            limit,
            // NaN (nothing measured) misses.
            met: value <= limit,
            measured: show(value),
            target: format!("<= {}", show(limit)),
        }
    }
}

/// Everything the benchmark measured, before it is set against the targets.
pub struct Measured {
    pub storm: StormOverhead,
    pub collateral: CollateralReport,
    pub costs: Costs,
    pub wakeups: WakeupCost,
    pub capacity: Capacity,
    pub side_by_side: SideBySide,
    pub parts: PartsReport,
}

impl BenchReport {
    pub fn new(runs: u32, measured: Measured) -> Self {
        let Measured { storm, collateral, costs, wakeups, capacity, side_by_side, parts } =
            measured;
        let Costs { kernel: kernel_cost, process, kernel_release } = costs;
        let percent = |v: f64| format!("{:+.1}%", v * 100.0);
        let mut targets = vec![Verdict::at_most(
            format!("storm elapsed overhead ({})", storm.storm),
            storm.ratio.elapsed - 1.0,
            STORM_OVERHEAD,
            percent,
        )];
        for c in &collateral.workloads {
            targets.push(if c.event == CONTEXT_SWITCH {
                Verdict::at_most(
                    format!(
                        "collateral: ns per {} of {} (an empty program: {:+.0} ns)",
                        c.event, c.workload, c.floor_ns_per_event
                    ),
                    c.added_ns_per_event,
                    NS_PER_CONTEXT_SWITCH,
                    |v| format!("{v:+.0} ns"),
                )
            } else {
                Verdict::at_most(
                    format!("collateral overhead: {}", c.workload),
                    c.ratio.elapsed - 1.0,
                    COLLATERAL_OVERHEAD,
                    percent,
                )
            });
        }
        let kernel_floor = KernelFloor::new(&kernel_cost, &collateral);
        targets.push(kernel_floor.verdict(&kernel_cost));
        targets.push(kernel_floor.idle_switch_verdict(&collateral));
        let lost = capacity.lost + process.lost + storm.lost + wakeups.lost;
        targets.push(Verdict {
            quantity: "exits lost, storms at full speed".to_owned(),
            value: lost as f64,
            limit: 0.0,
            met: lost == 0,
            measured: format!(
                "{lost} (to {} exits/s)",
                fmt_rate(capacity.max_rate_without_loss.max(storm.exit_rate_with))
            ),
            target: "0".to_owned(),
        });
        targets.push(Verdict::at_most(
            "exitprof CPU collecting / the storm's CPU".to_owned(),
            process.collecting_share,
            COLLECTING_SHARE,
            |v| format!("{:.1}%", v * 100.0),
        ));
        targets.push(Verdict::at_most(
            format!("exitprof peak RSS ({})", process.storm),
            process.peak_rss_kib,
            PEAK_RSS_KIB,
            fmt_kib,
        ));
        targets.push(Verdict::at_most(
            "exitprof CPU, fixed (a run of 1 exit)".to_owned(),
            process.cpu_fixed_s,
            FIXED_CPU_S,
            fmt_s,
        ));
        if let (Some(on), Some(off)) = (parts.variant(DEFAULTS), parts.variant(NO_SAMPLING)) {
            targets.push(Verdict::at_most(
                format!("on-CPU sampling's storm overhead ({DEFAULTS} against {NO_SAMPLING})"),
                (on.storm_overhead - off.storm_overhead) * 100.0,
                SAMPLING_POINTS,
                |v| format!("{v:+.1} points"),
            ));
        }
        targets.extend(side_by_side_verdicts(&side_by_side));
        Self {
            kernel: kernel_release,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            runs,
            storm,
            collateral,
            kernel_cost,
            kernel_floor,
            ring_buffer_wakeups: wakeups,
            exitprof_process: process,
            capacity,
            side_by_side,
            parts,
            targets,
        }
    }

    /// The table for a person.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nexitprof's own cost on Linux {}, {} CPUs; medians of {} interleaved runs\n",
            self.kernel, self.cpus, self.runs
        );
        self.render_storm(&mut out);
        self.render_collateral(&mut out);
        render_kernel_cost(
            &mut out,
            &self.kernel_cost,
            &self.kernel_floor,
            &self.ring_buffer_wakeups,
        );
        render_process(&mut out, &self.exitprof_process);
        render_capacity(&mut out, &self.capacity);
        render_side_by_side(&mut out, &self.side_by_side, &self.kernel_floor);
        render_parts(&mut out, &self.parts);
        let _ = writeln!(out, "targets");
        let width = self.targets.iter().map(|t| t.quantity.chars().count()).max().unwrap_or(0);
        let _ = writeln!(out, "  {:<width$}  {:>22}  {:>11}", "quantity", "measured", "target");
        for t in &self.targets {
            let verdict = if t.met { "MET" } else { "MISSED" };
            let _ = writeln!(
                out,
                "  {:<width$}  {:>22}  {:>11}  {verdict}",
                t.quantity, t.measured, t.target
            );
        }
        out
    }

    fn render_storm(&self, out: &mut String) {
        let s = &self.storm;
        let _ = writeln!(
            out,
            "storm overhead: {}, exitprof attached or not (exitprof compare --toggle probes)",
            s.storm
        );
        let _ = writeln!(out, "  {:<12} {:>10} {:>10} {:>8}", "", "without", "with", "ratio");
        for (name, without, with, ratio) in [
            ("elapsed", s.without.elapsed, s.with.elapsed, s.ratio.elapsed),
            ("user", s.without.user, s.with.user, s.ratio.user),
            ("sys", s.without.sys, s.with.sys, s.ratio.sys),
        ] {
            let _ = writeln!(
                out,
                "  {name:<12} {:>10} {:>10} {ratio:>8.3}",
                fmt_s(without),
                fmt_s(with)
            );
        }
        let _ = writeln!(
            out,
            "  {:<12} {:>10} {:>10}",
            "exits/s",
            fmt_rate(s.exit_rate_without),
            fmt_rate(s.exit_rate_with)
        );
        let _ = writeln!(
            out,
            "  exits recorded {} of {}, lost {}\n",
            s.exits_recorded, s.exits_expected, s.lost
        );
    }

    fn render_collateral(&self, out: &mut String) {
        let c = &self.collateral;
        let _ = writeln!(
            out,
            "collateral overhead: programs unrelated to exits, exitprof attached elsewhere ({})",
            c.attached_to
        );
        let _ = writeln!(
            out,
            "  {:<46} {:>10} {:>10} {:>8}   exitprof added   {:>10}   an empty program added",
            "workload", "without", "with", "ratio", "empty prog"
        );
        for w in &c.workloads {
            let _ = writeln!(
                out,
                "  {:<46} {:>10} {:>10} {:>8.3}   {:+.0} ns per {}   {:>10}   {:+.0} ns",
                w.workload,
                fmt_s(w.without.elapsed),
                fmt_s(w.with.elapsed),
                w.ratio.elapsed,
                w.added_ns_per_event,
                w.event,
                fmt_s(w.floor.elapsed),
                w.floor_ns_per_event
            );
            let _ = writeln!(
                out,
                "  {:<46} {:>10} {:>10} {:>8.3}",
                "  its sys time",
                fmt_s(w.without.sys),
                fmt_s(w.with.sys),
                w.ratio.sys
            );
        }
        if let Some(ns) = c.idle_sched_switch_ns_per_run {
            let _ = writeln!(
                out,
                "  sched_switch program while nothing exits: {} per run (BPF statistics)",
                fmt_ns(ns)
            );
        }
        out.push('\n');
    }
}

fn render_kernel_cost(out: &mut String, k: &KernelCostReport, floor: &KernelFloor, w: &WakeupCost) {
    let _ = writeln!(out, "in-kernel cost: BPF run-time statistics during {}", k.storm);
    let _ = writeln!(
        out,
        "  {:<28} {:>10} {:>10} {:>8} {:>10}",
        "eBPF program", "runs/exit", "per run", "x floor", "per exit"
    );
    for p in &k.programs {
        let _ = writeln!(
            out,
            "  {:<28} {:>10.2} {:>10} {:>8} {:>10}",
            p.program,
            p.runs_per_exit,
            fmt_ns(p.ns_per_run),
            times(p.ns_per_run / floor.ns_per_run),
            fmt_ns(p.ns_per_exit)
        );
    }
    let _ = writeln!(
        out,
        "  {:<28} {:>10} {:>10} {:>8} {:>10}",
        "all programs",
        "",
        "",
        times(k.ns_per_exit / floor.ns_per_exit),
        fmt_ns(k.ns_per_exit)
    );
    let _ = writeln!(
        out,
        "  {:<28} {:>10.2} {:>10} {:>8} {:>10}\n  (the floor: as many runs of an empty program \
         on sched_switch, measured beside the ping-pong)",
        "floor",
        floor.runs_per_exit,
        fmt_ns(floor.ns_per_run),
        "1.00x",
        fmt_ns(floor.ns_per_exit)
    );
    let _ = writeln!(
        out,
        "  ring-buffer wakeups ({} watched by name): {} per exit with exitprof reading, {} with \
         it suspended\n  (sched_switch, which sends the records: {} against {})\n",
        w.storm,
        fmt_ns(w.ns_per_exit_reading),
        fmt_ns(w.ns_per_exit_suspended),
        fmt_ns(w.sched_switch_ns_per_exit_reading),
        fmt_ns(w.sched_switch_ns_per_exit_suspended)
    );
}

fn render_process(out: &mut String, p: &ProcessCost) {
    let _ = writeln!(
        out,
        "exitprof's process during {} (wait4 of exitprof less its storm's own CPU)",
        p.storm
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>10}   load, verify, attach, collect, detach, report",
        "CPU, whole run",
        fmt_s(p.cpu_whole_run_s)
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>10}   the same for a storm of 1 exit: the fixed part",
        "CPU, fixed",
        fmt_s(p.cpu_fixed_s)
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>10}   {:.1}% of the storm's own {} (exitprof's getrusage, storm start to last record)",
        "CPU, collecting",
        fmt_s(p.cpu_collecting_s),
        p.collecting_share * 100.0,
        fmt_s(p.storm_cpu_s)
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>10}   {} for a storm of 1 exit\n",
        "peak RSS",
        fmt_kib(p.peak_rss_kib),
        fmt_kib(p.peak_rss_fixed_kib)
    );
}

fn render_side_by_side(out: &mut String, s: &SideBySide, floor: &KernelFloor) {
    let _ = writeln!(
        out,
        "side by side: {}, elapsed, each attached or not; in the kernel (BPF statistics, further \
         rounds), per exit and as a multiple of its floor (its runs, each an empty program's)",
        s.storm
    );
    let _ = writeln!(
        out,
        "  {:<44} {:>10} {:>8} {:>14} {:>10} {:>9} {:>8}",
        "", "elapsed", "ratio", "exits seen", "in-kernel", "runs/exit", "x floor"
    );
    for (name, elapsed, exits, in_kernel) in [
        ("nothing attached", s.nothing_s, None, None),
        (
            "minimal probe (xtask/bench/minimal_probe.bt)",
            s.minimal_probe_s,
            Some(s.minimal_probe_exits),
            Some(s.minimal_probe_in_kernel),
        ),
        (
            "exitprof --comm, syscall tracepoints on",
            s.exitprof_s,
            Some(s.exitprof_exits),
            Some(s.exitprof_in_kernel),
        ),
    ] {
        let seen = exits.map_or_else(String::new, |n| format!("{n} of {}", s.exits));
        let in_kernel = in_kernel.map_or_else(String::new, |k| {
            format!(
                "{:>10} {:>9.2} {:>8}",
                fmt_ns(k.ns_per_exit),
                k.runs_per_exit,
                times(k.ns_per_exit / (k.runs_per_exit * floor.ns_per_run))
            )
        });
        let _ = writeln!(
            out,
            "  {name:<44} {:>10} {:>8.3} {seen:>14} {in_kernel}",
            fmt_s(elapsed),
            elapsed / s.nothing_s
        );
    }
    out.push('\n');
}

fn render_parts(out: &mut String, p: &PartsReport) {
    let _ = writeln!(
        out,
        "each part taken out: {}, {} interleaved rounds (storm overhead from compare --toggle \
         probes, one run per side a round; in-kernel cost and samples from --bpf-stats)",
        p.storm, p.rounds
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>9} {:>10} {:>10} {:>12} {:>10} {:>5}",
        "variant", "overhead", "in-kernel", "per sample", "sampling", "peak RSS", "lost"
    );
    for v in &p.variants {
        let _ = writeln!(
            out,
            "  {:<34} {:>8.1}% {:>10} {:>10} {:>12} {:>10} {:>5}",
            v.variant,
            v.storm_overhead * 100.0,
            fmt_ns(v.kernel_ns_per_exit),
            fmt_ns(v.sample_ns),
            format!("{}/exit", fmt_ns(v.sample_ns_per_exit)),
            fmt_kib(v.peak_rss_kib),
            v.lost
        );
    }
    out.push('\n');
}

fn render_capacity(out: &mut String, c: &Capacity) {
    let _ = writeln!(out, "exit rate without loss: storms at full speed, the default ring buffer");
    let _ = writeln!(out, "  {:<28} {:>10} {:>10} {:>6}", "storm", "exits", "exits/s", "lost");
    for s in &c.steps {
        let _ = writeln!(
            out,
            "  {:<28} {:>10} {:>10} {:>6}",
            s.storm,
            s.exits_recorded,
            fmt_rate(s.exit_rate),
            s.lost
        );
    }
    let _ = writeln!(
        out,
        "  highest rate without loss: {} exits/s\n",
        fmt_rate(c.max_rate_without_loss)
    );
}

fn fmt_s(s: f64) -> String {
    format!("{s:.3} s")
}

fn fmt_ns(ns: f64) -> String {
    if ns.is_nan() {
        "-".to_owned()
    } else if ns.abs() < 1e3 {
        format!("{ns:.0} ns")
    } else {
        format!("{:.2} µs", ns / 1e3)
    }
}

fn fmt_rate(per_s: f64) -> String {
    format!("{:.1}k", per_s / 1e3)
}

fn fmt_kib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_met_at_or_below_its_limit() {
        let show = |v: f64| format!("{v}");
        assert!(Verdict::at_most("x".into(), 0.03, 0.03, show).met);
        assert!(!Verdict::at_most("x".into(), 0.031, 0.03, show).met);
        assert!(!Verdict::at_most("x".into(), f64::NAN, 0.03, show).met);
        let v = Verdict::at_most("ns".into(), 412.0, 500.0, fmt_ns);
        assert_eq!((v.measured.as_str(), v.target.as_str()), ("412 ns", "<= 500 ns"));
    }
}
