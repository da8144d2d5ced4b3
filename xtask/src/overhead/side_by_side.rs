//! The 2006 LKML taskstats benchmark's C storm (`threads_ref 1000 10 0`) with nothing attached, with a minimal probe
//! that times each exit and nothing else (the bpftrace script `xtask/bench/minimal_probe.bt`:
//! three tracepoints, one line per exit), and with exitprof watching it by name, interleaved:
//! exitprof, which records far more, must cost less than the minimal probe.

use std::{path::Path, process::Command};

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
    })
}
