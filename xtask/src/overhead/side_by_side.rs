//! The 2006 LKML taskstats benchmark's C storm (`threads_ref 1000 10 0`) with nothing attached, with a minimal probe
//! that times each exit and nothing else (the bpftrace script `xtask/bench/minimal_probe.bt`:
//! three tracepoints, one line per exit), and with exitprof watching it by name, interleaved:
//! exitprof, which records far more, must cost less than the minimal probe.
//!
//! Then each is priced in the kernel over a few more rounds of the storm, with the kernel's BPF
//! statistics on (they lengthen every program run, so the rounds that are timed run without
//! them): the least a probe that times each exit costs per exit, beside exitprof's.

use std::{fs, path::Path, process::Command};

use anyhow::{Context as _, bail};
use serde::Serialize;

use super::{
    background::Background,
    exitprof::{self, Exitprof},
    rotation,
};
use crate::{
    command::which,
    measure::{compile_c, measure, median},
};

/// The storm: 1000 threads x 10 reps at stagger 0.
const STORM_ARGS: [&str; 3] = ["1000", "10", "0"];
/// Its exits: the threads' and the process's own.
const STORM_EXITS: u64 = 1000 * 10 + 1;

/// What bpftrace prints once its probes are attached.
const BPFTRACE_READY: &str = "Attaching";

#[derive(Debug, Serialize)]
pub struct SideBySide {
    pub storm: String,
    pub runs_per_side: usize,
    /// Median elapsed seconds of the storm: nothing attached, the minimal probe, exitprof.
    pub nothing_s: f64,
    pub minimal_probe_s: f64,
    pub exitprof_s: f64,
    /// Each over nothing.
    pub minimal_probe_ratio: f64,
    pub exitprof_ratio: f64,
    /// Exits each probe saw over every run (the minimal probe's lines), against the storms'.
    pub exits: u64,
    pub minimal_probe_exits: u64,
    pub exitprof_exits: u64,
    /// In-kernel cost per exit of each probe (BPF statistics, medians of the priced rounds).
    pub minimal_probe_in_kernel: InKernel,
    pub exitprof_in_kernel: InKernel,
}

/// A probe's eBPF programs over a storm: their runs and run time per exit of the storm, counted
/// by the kernel's BPF statistics from the probe's attaching to its stopping.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct InKernel {
    pub runs_per_exit: f64,
    pub ns_per_exit: f64,
}

#[derive(Clone, Copy)]
enum Side {
    Nothing,
    MinimalProbe,
    Exitprof,
}

pub fn measure_side_by_side(
    exitprof: &Exitprof,
    root: &Path,
    out_dir: &Path,
    runs: u32,
) -> anyhow::Result<SideBySide> {
    let bpftrace = which("bpftrace").context(
        "the side-by-side benchmark needs bpftrace for its minimal probe (apt install bpftrace)",
    )?;
    let script = root.join("xtask/bench/minimal_probe.bt");
    let storm = compile_c(&root.join("xtask/bench/threads_ref.c"), out_dir, &[])?;
    let comm = storm.file_name().and_then(|n| n.to_str()).context("the storm's name")?.to_owned();
    let name = format!("{comm} {}", STORM_ARGS.join(" "));
    eprintln!(
        "bench: {name} with nothing, a minimal bpftrace probe, or exitprof --comm {comm} \
         attached ({runs} runs per side, interleaved)"
    );
    let mut elapsed: [Vec<f64>; 3] = Default::default();
    let (mut minimal_probe_exits, mut exitprof_exits) = (0, 0);
    for round in 0..runs {
        for side in rotation(round, &[Side::Nothing, Side::MinimalProbe, Side::Exitprof]) {
            let attached = match side {
                Side::Nothing => None,
                Side::MinimalProbe => {
                    Some(Background::start(Command::new(&bpftrace).arg(&script), BPFTRACE_READY)?)
                }
                Side::Exitprof => {
                    Some(exitprof.watch_comm(&comm, &["--syscall-tracepoints", "on"])?)
                }
            };
            let usage = measure(Command::new(&storm).args(STORM_ARGS))?;
            elapsed[side as usize].push(usage.elapsed);
            match (side, attached) {
                (Side::MinimalProbe, Some(probe)) => {
                    minimal_probe_exits += probe.stop()?.lines().count() as u64;
                }
                (Side::Exitprof, Some(watching)) => {
                    let doc = exitprof::report(watching)?;
                    exitprof_exits += doc.exits_recorded;
                    if doc.lost > 0 {
                        bail!("exitprof lost {} exits of {name}", doc.lost);
                    }
                }
                _ => {}
            }
        }
    }
    let (minimal_probe_in_kernel, exitprof_in_kernel) =
        price_in_kernel(exitprof, &bpftrace, &script, &storm, &comm, runs.min(PRICED_ROUNDS))?;
    let [nothing, minimal_probe, exitprof] = elapsed.map(median);
    Ok(SideBySide {
        storm: name,
        runs_per_side: runs as usize,
        nothing_s: nothing,
        minimal_probe_s: minimal_probe,
        exitprof_s: exitprof,
        minimal_probe_ratio: minimal_probe / nothing,
        exitprof_ratio: exitprof / nothing,
        exits: STORM_EXITS * u64::from(runs),
        minimal_probe_exits,
        exitprof_exits,
        minimal_probe_in_kernel,
        exitprof_in_kernel,
    })
}

/// Rounds of the storm in which the probes' in-kernel cost is counted.
const PRICED_ROUNDS: u32 = 5;

/// The in-kernel cost per exit of the minimal probe and of exitprof, `rounds` storms each,
/// interleaved: exitprof counts its own (`--bpf-stats`); the minimal probe's programs are read
/// from bpftrace's file descriptors (`/proc/PID/fdinfo`) with the statistics switched on.
fn price_in_kernel(
    exitprof: &Exitprof,
    bpftrace: &Path,
    script: &Path,
    storm: &Path,
    comm: &str,
    rounds: u32,
) -> anyhow::Result<(InKernel, InKernel)> {
    eprintln!("bench: the same storm, {rounds} rounds a side, each probe priced in the kernel");
    let _stats = BpfStats::enable()?;
    let (mut minimal_probe, mut exitprof_priced) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let probe = Background::start(Command::new(bpftrace).arg(script), BPFTRACE_READY)?;
        measure(Command::new(storm).args(STORM_ARGS))?;
        let pid = probe.pid().context("the minimal probe's pid")?;
        let (runs, run_ns) = programs_run(pid)?;
        probe.stop()?;
        minimal_probe.push(InKernel::over_exits(runs as f64, run_ns as f64, STORM_EXITS));

        let watching =
            exitprof.watch_comm(comm, &["--syscall-tracepoints", "on", "--bpf-stats"])?;
        measure(Command::new(storm).args(STORM_ARGS))?;
        let doc = exitprof::report(watching)?;
        let cost = doc.kernel_cost.context("exitprof --bpf-stats reported no kernel_cost")?;
        let runs: u64 = cost.programs.iter().map(|p| p.runs).sum();
        let run_ns: f64 =
            cost.programs.iter().map(|p| p.runs as f64 * p.ns_per_run.unwrap_or(0.0)).sum();
        exitprof_priced.push(InKernel::over_exits(runs as f64, run_ns, doc.exits_recorded));
    }
    Ok((InKernel::median(&minimal_probe), InKernel::median(&exitprof_priced)))
}

impl InKernel {
    fn over_exits(runs: f64, run_ns: f64, exits: u64) -> Self {
        let exits = exits.max(1) as f64;
        Self { runs_per_exit: runs / exits, ns_per_exit: run_ns / exits }
    }

    fn median(priced: &[Self]) -> Self {
        Self {
            runs_per_exit: median(priced.iter().map(|p| p.runs_per_exit)),
            ns_per_exit: median(priced.iter().map(|p| p.ns_per_exit)),
        }
    }
}

/// The runs and run time (ns) of every eBPF program the process `pid` holds, as the kernel's
/// statistics count them (`run_cnt` and `run_time_ns` in the fdinfo of a program's descriptor).
fn programs_run(pid: u32) -> anyhow::Result<(u64, u64)> {
    let dir = format!("/proc/{pid}/fdinfo");
    let (mut runs, mut run_ns) = (0, 0);
    for entry in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        // A descriptor closed since the listing has nothing to count.
        let Ok(info) = fs::read_to_string(entry?.path()) else { continue };
        let field = |name: &str| {
            info.lines().find_map(|line| line.strip_prefix(name)?.trim().parse::<u64>().ok())
        };
        if let (Some(cnt), Some(ns)) = (field("run_cnt:"), field("run_time_ns:")) {
            runs += cnt;
            run_ns += ns;
        }
    }
    Ok((runs, run_ns))
}

/// The kernel's BPF run-time statistics, switched on (`kernel.bpf_stats_enabled`) until dropped,
/// when the setting found is put back.
struct BpfStats {
    was: String,
}

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> anyhow::Result<Self> {
        let was = fs::read_to_string(BPF_STATS_SYSCTL)
            .with_context(|| format!("reading {BPF_STATS_SYSCTL}"))?;
        fs::write(BPF_STATS_SYSCTL, "1")
            .with_context(|| format!("writing 1 to {BPF_STATS_SYSCTL}"))?;
        Ok(Self { was })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = fs::write(BPF_STATS_SYSCTL, self.was.trim());
    }
}
