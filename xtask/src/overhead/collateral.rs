//! exitprof's overhead on work that has nothing to do with exits: programs that never exit
//! mid-run, timed with exitprof attached to another target and without it, interleaved.
//!
//! Attached, exitprof's programs still run on events of the whole machine: `sched_switch` on
//! every context switch, and its system-call tracepoints (`sys_enter_exit`, `sys_exit_wait4`)
//! make every system call of every task take the kernel's slow path, even calls no program
//! is attached to. Two C programs show each at full scale: a pipe ping-pong pinned to one CPU
//! (two context switches and four system calls per round trip) and a loop of `getppid`.

use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use super::{
    exitprof::{self, Exitprof, KernelCost, NOBODY},
    rotation,
};
use crate::measure::{Usage, compile_c, measure_argv};

/// Round trips of the ping-pong.
const PINGPONG_TRIPS: u64 = 200_000;
/// The CPU both ping-pong processes are pinned to.
const PINGPONG_CPU: u32 = 0;
/// The ping-pong's event, whose cost has a target of its own.
pub const CONTEXT_SWITCH: &str = "context switch";
/// System calls of the getppid loop.
const SYSCALLS: u64 = 5_000_000;

/// A program unrelated to exits.
struct Workload {
    name: String,
    argv: Vec<String>,
    /// Events of one kind the program makes, to put the overhead per event.
    events: u64,
    event: &'static str,
}

impl Workload {
    fn run(&self) -> anyhow::Result<Usage> {
        measure_argv(&self.argv)
    }
}

/// What such a program cost without exitprof, with exitprof, and with only an empty
/// `sched_switch` program (the floor of anything attached there).
#[derive(Debug, Serialize)]
pub struct Collateral {
    pub workload: String,
    pub runs_per_side: usize,
    /// Medians, seconds.
    pub without: Usage,
    pub with: Usage,
    pub floor: Usage,
    /// with / without.
    pub ratio: Usage,
    /// What exitprof added to each event (ns of elapsed time, from the medians).
    pub added_ns_per_event: f64,
    /// What the empty program added to each event.
    pub floor_ns_per_event: f64,
    pub event: &'static str,
}

/// Everything the collateral benchmark found.
#[derive(Debug, Serialize)]
pub struct CollateralReport {
    pub attached_to: String,
    pub workloads: Vec<Collateral>,
    /// `sched_switch` when nothing exits: what the kernel's BPF statistics counted during one
    /// more ping-pong, in ns per run.
    pub idle_sched_switch_ns_per_run: Option<f64>,
    /// An empty program on `sched_switch`, counted alike during one more ping-pong: the floor
    /// of any program run there (the tracepoint's dispatch, the program's call, the
    /// statistics' own clock reads).
    pub empty_program_ns_per_run: f64,
}

/// The three ways each workload runs.
#[derive(Clone, Copy)]
enum Side {
    Without,
    Floor,
    With,
}

/// Compiles the programs into `out_dir`.
fn workloads(root: &Path, out_dir: &Path) -> anyhow::Result<Vec<Workload>> {
    let pingpong = compile_c(&root.join("xtask/bench/pingpong.c"), out_dir, &[])?;
    let syscalls = compile_c(&root.join("xtask/bench/syscalls.c"), out_dir, &[])?;
    Ok(vec![
        Workload {
            name: format!("pipe ping-pong, {PINGPONG_TRIPS} round trips on one CPU"),
            argv: vec![
                pingpong.display().to_string(),
                PINGPONG_TRIPS.to_string(),
                PINGPONG_CPU.to_string(),
            ],
            events: 2 * PINGPONG_TRIPS,
            event: CONTEXT_SWITCH,
        },
        Workload {
            name: format!("getppid x {SYSCALLS}"),
            argv: vec![syscalls.display().to_string(), SYSCALLS.to_string()],
            events: SYSCALLS,
            event: "system call",
        },
    ])
}

pub fn measure_all(
    exitprof: &Exitprof,
    root: &Path,
    out_dir: &Path,
    runs: u32,
) -> anyhow::Result<CollateralReport> {
    let workloads = workloads(root, out_dir)?;
    eprintln!(
        "bench: collateral overhead, exitprof watching tasks that do not exist, an empty \
         sched_switch program, or nothing ({runs} runs per side, interleaved)"
    );
    let mut samples: [Vec<Vec<Usage>>; 3] = Default::default();
    for side in &mut samples {
        side.resize(workloads.len(), Vec::new());
    }
    for round in 0..runs {
        for side in rotation(round, &[Side::Without, Side::Floor, Side::With]) {
            let attached = match side {
                Side::Without => None,
                Side::Floor => Some(exitprof.attach_floor(&[])?),
                Side::With => Some(exitprof.attach_elsewhere(&[])?),
            };
            for (w, samples) in workloads.iter().zip(samples[side as usize].iter_mut()) {
                samples.push(w.run()?);
            }
            if let Some(attached) = attached {
                attached.stop()?;
            }
        }
    }
    let [without, floor, with] = samples;
    let results = workloads
        .iter()
        .zip(with.iter().zip(&without).zip(&floor))
        .map(|(w, ((with, without), floor))| {
            let [with, without, floor] = [with, without, floor].map(|s| Usage::medians(s));
            let per_event =
                |usage: Usage| (usage.elapsed - without.elapsed) * 1e9 / w.events as f64;
            Collateral {
                workload: w.name.clone(),
                runs_per_side: runs as usize,
                without,
                with,
                floor,
                ratio: with.ratio_to(without),
                added_ns_per_event: per_event(with),
                floor_ns_per_event: per_event(floor),
                event: w.event,
            }
        })
        .collect();
    Ok(CollateralReport {
        attached_to: format!("--comm {NOBODY}"),
        workloads: results,
        idle_sched_switch_ns_per_run: idle_sched_switch(exitprof, &workloads[0])?,
        empty_program_ns_per_run: empty_program(exitprof, &workloads[0])?,
    })
}

/// The empty `sched_switch` program's ns per run while the ping-pong switches.
fn empty_program(exitprof: &Exitprof, pingpong: &Workload) -> anyhow::Result<f64> {
    #[derive(serde::Deserialize)]
    struct Counted {
        runs: u64,
        run_ns: u64,
    }
    let floor = exitprof.attach_floor(&["--bpf-stats"])?;
    pingpong.run()?;
    let out = floor.stop()?;
    let counted: Counted = serde_json::from_str(out.trim())
        .with_context(|| format!("reading the empty program's statistics from {out:?}"))?;
    Ok(counted.run_ns as f64 / counted.runs as f64)
}

/// `sched_switch`'s ns per run while the ping-pong switches and nothing exits.
fn idle_sched_switch(exitprof: &Exitprof, pingpong: &Workload) -> anyhow::Result<Option<f64>> {
    let watching = exitprof.attach_elsewhere(&["--bpf-stats"])?;
    pingpong.run()?;
    let doc = exitprof::report(watching)?;
    Ok(doc.kernel_cost.as_ref().and_then(|cost| ns_per_run(cost, "sched_switch")))
}

/// A program's ns per run, when it ran.
pub fn ns_per_run(cost: &KernelCost, program: &str) -> Option<f64> {
    cost.programs.iter().find(|p| p.program == program)?.ns_per_run
}
