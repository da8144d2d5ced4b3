//! What exitprof itself spends on a storm: the run time of its eBPF programs in the kernel
//! (`--bpf-stats`), and the CPU time and memory of its own process, measured from the outside.
//!
//! `wait4` of the exitprof process counts the storm too (the storm's processes are exitprof's
//! children, and it reaps them): the storm's own user and sys time, which exitprof reports, are
//! taken off. What is left includes loading, verifying and attaching the programs, detaching,
//! and building the report, none of which grows with the storm; a run of a single exit measures
//! that fixed part. What collecting the storm's records costs is smaller than the noise of that
//! fixed part, so it is taken from exitprof's own account (`getrusage` from the storm's start
//! to its last record, the document's `exitprof.collecting`).
//!
//! Three runs per round, in turn (plain, 1-exit, with statistics), so that a drift of the
//! machine falls on all three.

use std::collections::BTreeMap;

use anyhow::Context as _;
use serde::Serialize;

use super::exitprof::{self, Exitprof, Profiled, Storm};
use crate::measure::median;

/// exitprof's eBPF programs during the storm, from the kernel's BPF run-time statistics.
#[derive(Debug, Serialize)]
pub struct KernelCostReport {
    pub storm: String,
    pub runs: usize,
    /// All programs' run time over the exits recorded (median over the runs).
    pub ns_per_exit: f64,
    /// Costliest per exit first.
    pub programs: Vec<ProgramCost>,
}

/// One program, medians over the runs.
#[derive(Debug, Serialize)]
pub struct ProgramCost {
    pub program: String,
    pub runs_per_exit: f64,
    pub ns_per_run: f64,
    pub ns_per_exit: f64,
}

/// exitprof's own process during the storm, medians over the runs.
#[derive(Debug, Serialize)]
pub struct ProcessCost {
    pub storm: String,
    pub runs: usize,
    /// user + sys of exitprof's process over the whole run, the storm's own taken off.
    pub cpu_whole_run_s: f64,
    /// The same for a storm of one exit: loading, attaching, detaching, reporting.
    pub cpu_fixed_s: f64,
    /// What collecting the storm cost, by exitprof's own account.
    pub cpu_collecting_s: f64,
    /// The storm's own user + sys.
    pub storm_cpu_s: f64,
    /// `cpu_collecting_s / storm_cpu_s`.
    pub collecting_share: f64,
    /// VmHWM of exitprof's process (its children's excluded), KiB.
    pub peak_rss_kib: f64,
    pub peak_rss_fixed_kib: f64,
    /// Over every run, with the storm's exit rate.
    pub lost: u64,
    pub exit_rate: f64,
}

/// Everything the profiled runs found.
pub struct Costs {
    pub kernel: KernelCostReport,
    pub process: ProcessCost,
    pub kernel_release: String,
}

pub fn measure(exitprof: &Exitprof, storm: &Storm, runs: u32) -> anyhow::Result<Costs> {
    eprintln!(
        "bench: exitprof's own cost, {} ({runs} rounds of a profiled run, a 1-exit run and a \
         run with BPF statistics)",
        storm.name
    );
    let one_exit = Storm::threads(1, 1);
    let (mut plain, mut fixed, mut stats) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..runs {
        for step in 0..3 {
            match (round + step) % 3 {
                0 => plain.push(exitprof.profile(storm, &[], true)?),
                1 => fixed.push(exitprof.profile(&one_exit, &[], true)?),
                _ => stats.push(exitprof.profile(storm, &["--bpf-stats"], false)?),
            }
        }
    }
    let kernel_release = plain.first().context("no profiled run")?.doc.kernel.clone();
    Ok(Costs {
        kernel: kernel_cost(storm, &stats)?,
        process: process_cost(storm, &plain, &fixed)?,
        kernel_release,
    })
}

fn kernel_cost(storm: &Storm, runs: &[Profiled]) -> anyhow::Result<KernelCostReport> {
    // Each program's figures in each run, with the exits that run recorded.
    let mut per_program: BTreeMap<&str, Vec<(&exitprof::ProgramCost, f64)>> = BTreeMap::new();
    let mut per_exit = Vec::new();
    for run in runs {
        let exits = run.doc.exits_recorded as f64;
        let cost =
            run.doc.kernel_cost.as_ref().context("exitprof --bpf-stats reported no kernel_cost")?;
        per_exit.extend(cost.ns_per_exit);
        for p in &cost.programs {
            per_program.entry(&p.program).or_default().push((p, exits));
        }
    }
    // A run without the figure (a program that never ran, a run without exits) has none to
    // give; with none at all the median is NaN, `null` in JSON.
    let mut programs: Vec<ProgramCost> = per_program
        .into_iter()
        .map(|(program, v)| ProgramCost {
            program: program.to_owned(),
            runs_per_exit: median(v.iter().map(|(p, exits)| p.runs as f64 / exits)),
            ns_per_run: median(v.iter().filter_map(|(p, _)| p.ns_per_run)),
            ns_per_exit: median(v.iter().filter_map(|(p, _)| p.ns_per_exit)),
        })
        .collect();
    programs.sort_by(|a, b| b.ns_per_exit.total_cmp(&a.ns_per_exit));
    Ok(KernelCostReport {
        storm: storm.name.clone(),
        runs: runs.len(),
        ns_per_exit: median(per_exit),
        programs,
    })
}

fn process_cost(
    storm: &Storm,
    plain: &[Profiled],
    fixed: &[Profiled],
) -> anyhow::Result<ProcessCost> {
    let cpu = |runs: &[Profiled]| -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        runs.iter().map(own_and_storm_cpu).collect()
    };
    let (whole, storm_cpu) = cpu(plain)?;
    let (fixed_cpu, _) = cpu(fixed)?;
    let collecting = median(
        plain.iter().map(|r| r.doc.exitprof.collecting.user_s + r.doc.exitprof.collecting.sys_s),
    );
    let storm_cpu_s = median(storm_cpu);
    let rss = |runs: &[Profiled]| {
        median(runs.iter().filter_map(|r| r.process.peak_rss_kib).map(|k| k as f64))
    };
    Ok(ProcessCost {
        storm: storm.name.clone(),
        runs: plain.len(),
        cpu_whole_run_s: median(whole),
        cpu_fixed_s: median(fixed_cpu),
        cpu_collecting_s: collecting,
        storm_cpu_s,
        collecting_share: collecting / storm_cpu_s,
        peak_rss_kib: rss(plain),
        peak_rss_fixed_kib: rss(fixed),
        lost: plain.iter().map(|r| r.doc.exits_lost()).sum(),
        exit_rate: median(plain.iter().map(|r| r.doc.exit_rate)),
    })
}

/// A profiled run's CPU time (s): exitprof's own (its process's, the storm's taken off) and the
/// storm's.
fn own_and_storm_cpu(run: &Profiled) -> anyhow::Result<(f64, f64)> {
    let storm = run.doc.storm_cpu_s()?;
    Ok((run.process.usage.cpu() - storm, storm))
}
