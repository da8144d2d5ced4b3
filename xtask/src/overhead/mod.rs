//! `cargo xtask bench`: what exitprof itself costs, on the host (tracepoint mode here).
//!
//! 1. storm overhead: the threads storm at stagger 0 with exitprof attached and without;
//! 2. collateral overhead: programs unrelated to exits, with exitprof attached elsewhere;
//! 3. in-kernel cost: each eBPF program's run time per run and per exit recorded, and the part
//!    of it that wakes exitprof's reader up;
//! 4. the highest exit rate recorded without loss, and exitprof's own CPU time and peak RSS.
//!
//! Every figure is a median of interleaved runs; the table compares each with its target and
//! says MET or MISSED, and `target/bench.json` holds it all. Missed targets do not fail the
//! command: it measures.

mod capacity;
mod collateral;
mod cost;
mod exitprof;
mod report;
mod storm;
mod wakeups;

use std::fs;

use anyhow::Context as _;
use clap::Args;

pub use self::exitprof::RunDoc;
use self::{exitprof::Exitprof, report::BenchReport};
use crate::{
    command::{cargo, is_root, workspace_root},
    setup,
};

#[derive(Args)]
pub struct BenchArgs {
    /// Runs of each side (and rounds of profiled runs); every figure is their median.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
}

pub fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    if !is_root() {
        anyhow::bail!("cargo xtask bench loads eBPF programs: run it as root");
    }
    setup::setup()?;
    cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
    let root = workspace_root();
    let out_dir = root.join("target/bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let exitprof = Exitprof { binary: root.join("target/release/exitprof") };
    let storm = exitprof::Storm::threads(1000, 10);

    let storm_overhead = storm::measure(&exitprof, &storm, args.runs)?;
    let collateral = collateral::measure_all(&exitprof, &root, &out_dir, args.runs)?;
    let costs = cost::measure(&exitprof, &storm, args.runs)?;
    let wakeups = wakeups::measure_wakeups(&exitprof, &root, &out_dir, args.runs)?;
    let capacity = capacity::measure(&exitprof)?;

    let report = BenchReport::new(args.runs, storm_overhead, collateral, costs, wakeups, capacity);
    print!("{}", report.render());
    let path = root.join("target/bench.json");
    fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}
