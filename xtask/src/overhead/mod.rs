//! `cargo xtask bench`: what exitprof itself costs, on the host (tracepoint mode here).
//!
//! 1. storm overhead: the threads storm at stagger 0 with exitprof attached and without;
//! 2. collateral overhead: programs unrelated to exits, with exitprof attached elsewhere;
//! 3. in-kernel cost: each eBPF program's run time per run and per exit recorded, and the part
//!    of it that wakes exitprof's reader up;
//! 4. the highest exit rate recorded without loss, and exitprof's own CPU time and peak RSS;
//! 5. side by side: the 2006 benchmark's C storm with nothing attached, a minimal probe, or exitprof;
//! 6. each part taken out (on-CPU sampling, block stacks, the ring buffer's sizing, and an
//!    earlier build with `--baseline`): what each costs.
//!
//! Every figure is a median of interleaved runs; the table compares each with its target and
//! says MET or MISSED, and `target/bench.json` holds it all. Missed targets do not fail the
//! command: it measures.

mod always_on;
pub(crate) mod background;
mod capacity;
mod collateral;
mod cost;
mod exitprof;
mod parts;
mod report;
mod side_by_side;
mod storm;
mod wakeups;

use std::{fs, path::PathBuf};

use anyhow::Context as _;
use clap::Args;

pub use self::{
    always_on::{AlwaysOnArgs, bench_always_on},
    exitprof::RunDoc,
};
use self::{
    exitprof::Exitprof,
    report::{BenchReport, Measured},
};
use crate::{
    command::{cargo, is_root, workspace_root},
    packages, setup,
};

#[derive(Args)]
pub struct BenchArgs {
    /// Runs of each side (and rounds of profiled runs); every figure is their median.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// An earlier exitprof binary, profiled beside this one in the table of parts taken out
    /// (named by its directory); repeat it for several.
    #[arg(long, value_name = "EXITPROF")]
    pub baseline: Vec<PathBuf>,
}

/// What every benchmark needs first: root, the build's tools and the bench's packages, exitprof
/// built in release mode, and the folder for the bench's programs. The workspace root and that
/// folder.
fn prepare(task: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    if !is_root() {
        anyhow::bail!("cargo xtask {task} loads eBPF programs: run it as root");
    }
    setup::setup()?;
    packages::ensure(packages::BENCH)?;
    cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
    let root = workspace_root();
    let out_dir = root.join("target/bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    Ok((root, out_dir))
}

pub fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    let (root, out_dir) = prepare("bench")?;
    let exitprof = Exitprof { binary: root.join("target/release/exitprof") };
    let storm = exitprof::Storm::threads(1000, 10);

    let measured = Measured {
        storm: storm::measure(&exitprof, &storm, args.runs)?,
        collateral: collateral::measure_all(&exitprof, &root, &out_dir, args.runs)?,
        costs: cost::measure(&exitprof, &storm, args.runs)?,
        wakeups: wakeups::measure_wakeups(&exitprof, &root, &out_dir, args.runs)?,
        capacity: capacity::measure(&exitprof)?,
        side_by_side: side_by_side::measure_side_by_side(&exitprof, &root, &out_dir, args.runs)?,
        parts: parts::measure(&exitprof, &args.baseline, &storm, args.runs)?,
    };
    let report = BenchReport::new(args.runs, measured);
    print!("{}", report.render());
    let path = root.join("target/bench.json");
    fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

/// The order of `sides` in `round`: each comes first, in the middle and last in turn, so that a
/// drift of the machine falls on all of them alike.
fn rotation<T: Copy>(round: u32, sides: &[T]) -> Vec<T> {
    let mut order = sides.to_vec();
    order.rotate_left(round as usize % sides.len().max(1));
    order
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_side_takes_each_place_in_turn() {
        let orders: Vec<Vec<char>> = (0..4).map(|r| super::rotation(r, &['a', 'b', 'c'])).collect();
        assert_eq!(orders, [['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b'], ['a', 'b', 'c']]);
    }
}
