//! exitprof's overhead on the storm it profiles: the same storm with exitprof's probes attached
//! and without, interleaved.
//!
//! `exitprof compare --toggle probes` does exactly this, and does it the fair way: both sides
//! are started by the same process through the same gated spawn, timed alike (gate open to
//! reap, user and sys from `wait4`), and alternate on/off, off/on; on the probes' side exitprof
//! attaches before the gate opens and collects while the storm runs, as a real run does, so its
//! collector competes with the storm for the CPUs. Timing `exitprof __workload` against
//! `exitprof --json` from the outside would instead charge exitprof's loading and attaching to
//! one side only.

use serde::Serialize;

use super::exitprof::{Exitprof, Storm, StormRun, exits_lost};
use crate::measure::{Usage, median};

/// What the storm cost without exitprof and with it: medians of the runs of each side.
#[derive(Debug, Serialize)]
pub struct StormOverhead {
    pub storm: String,
    pub runs_per_side: usize,
    pub without: Usage,
    pub with: Usage,
    /// with / without.
    pub ratio: Usage,
    pub exit_rate_without: f64,
    pub exit_rate_with: f64,
    pub exits_expected: u64,
    pub exits_recorded: u64,
    pub lost: u64,
}

pub fn measure(exitprof: &Exitprof, storm: &Storm, runs: u32) -> anyhow::Result<StormOverhead> {
    eprintln!("bench: storm overhead, {} ({runs} runs per side, interleaved)", storm.name);
    let doc = exitprof.compare_probes(storm, runs, &[])?;
    let times = |runs: &[StormRun]| {
        let usages: Vec<Usage> = runs
            .iter()
            .map(|r| Usage { elapsed: r.elapsed_s, user: r.user_s, sys: r.sys_s })
            .collect();
        Usage::medians(&usages)
    };
    let (with, without) = (times(&doc.on.runs), times(&doc.off.runs));
    let exits_expected = storm.exits * doc.on.runs.len() as u64;
    Ok(StormOverhead {
        storm: storm.name.clone(),
        runs_per_side: doc.on.runs.len().min(doc.off.runs.len()),
        without,
        with,
        ratio: with.ratio_to(without),
        exit_rate_without: median(doc.off.runs.iter().map(|r| r.exit_rate)),
        exit_rate_with: median(doc.on.runs.iter().map(|r| r.exit_rate)),
        exits_expected,
        exits_recorded: doc.on.exits_recorded,
        lost: exits_lost(Some(exits_expected), doc.on.exits_recorded, doc.on.lost),
    })
}
