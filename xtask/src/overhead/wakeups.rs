//! How much of the in-kernel cost is waking exitprof up. A BPF ring buffer wakes its reader
//! (through `irq_work`) for each record committed while the reader has caught up, which a
//! reader as fast as exitprof's nearly always has; with the reader stopped, the records queue
//! up and nothing is woken. So the same storm is recorded twice, exitprof's process running or
//! suspended (SIGSTOP) while it lasts, with BPF statistics on: the difference is the wakeups.
//!
//! exitprof cannot start a storm it is suspended for, so it watches one by name (`--comm`):
//! the 2006 LKML taskstats benchmark's thread program, compiled from C.

use std::{path::Path, process::Command};

use anyhow::Context as _;
use serde::Serialize;

use super::exitprof::{self, Exitprof, RunDoc};
use crate::measure::{compile_c, measure, median};

/// The storm: the 2006 benchmark's program, 1000 threads x 10 reps at stagger 0.
const STORM_ARGS: [&str; 3] = ["1000", "10", "0"];

/// Room for every record of the storm while its reader is suspended, on both sides alike: a
/// full ring buffer would drop records, and their cost with them (a target of unknown size
/// gets 1 MiB, some 2,000 records).
const RINGBUF_BYTES: &str = "16777216";

#[derive(Debug, Serialize)]
pub struct WakeupCost {
    pub storm: String,
    pub runs_per_side: usize,
    /// All programs per exit recorded, exitprof reading the ring buffers as it does.
    pub ns_per_exit_reading: f64,
    /// The same with exitprof suspended while the storm ran.
    pub ns_per_exit_suspended: f64,
    /// `sched_switch`, which sends each exit's record, per exit recorded.
    pub sched_switch_ns_per_exit_reading: f64,
    pub sched_switch_ns_per_exit_suspended: f64,
    pub lost: u64,
}

pub fn measure_wakeups(
    exitprof: &Exitprof,
    root: &Path,
    out_dir: &Path,
    runs: u32,
) -> anyhow::Result<WakeupCost> {
    let storm = compile_c(&root.join("xtask/bench/threads_ref.c"), out_dir, &[])?;
    let comm = storm.file_name().and_then(|n| n.to_str()).unwrap_or("threads_ref").to_owned();
    eprintln!(
        "bench: ring-buffer wakeups, {comm} {} watched by name, exitprof reading or suspended \
         ({runs} runs per side, interleaved)",
        STORM_ARGS.join(" ")
    );
    // Per side, each run's (all programs, sched_switch) ns per exit.
    let (mut reading, mut suspended) = (Vec::new(), Vec::new());
    let mut lost = 0;
    for round in 0..runs {
        for suspend in [round % 2 != 0, round % 2 == 0] {
            let watching =
                exitprof.watch_comm(&comm, &["--bpf-stats", "--ringbuf-bytes", RINGBUF_BYTES])?;
            watching.suspend(suspend);
            let ran = measure(Command::new(&storm).args(STORM_ARGS));
            watching.suspend(false);
            let doc = exitprof::report(watching)?;
            ran?;
            lost += doc.exits_lost();
            let figures = (per_exit(&doc, None)?, per_exit(&doc, Some("sched_switch"))?);
            if suspend { &mut suspended } else { &mut reading }.push(figures);
        }
    }
    let medians =
        |side: &[(f64, f64)]| (median(side.iter().map(|f| f.0)), median(side.iter().map(|f| f.1)));
    let ((all_reading, switch_reading), (all_suspended, switch_suspended)) =
        (medians(&reading), medians(&suspended));
    Ok(WakeupCost {
        storm: format!("{comm} {}", STORM_ARGS.join(" ")),
        runs_per_side: runs as usize,
        ns_per_exit_reading: all_reading,
        ns_per_exit_suspended: all_suspended,
        sched_switch_ns_per_exit_reading: switch_reading,
        sched_switch_ns_per_exit_suspended: switch_suspended,
        lost,
    })
}

/// Run time per exit recorded, of one program or (`None`) of all; NaN without exits.
fn per_exit(doc: &RunDoc, program: Option<&str>) -> anyhow::Result<f64> {
    let cost = doc.kernel_cost.as_ref().context("exitprof --bpf-stats reported no kernel_cost")?;
    let ns_per_exit = match program {
        Some(name) => {
            cost.programs.iter().filter(|p| p.program == name).map(|p| p.ns_per_exit).sum()
        }
        None => cost.ns_per_exit,
    };
    Ok(ns_per_exit.unwrap_or(f64::NAN))
}
