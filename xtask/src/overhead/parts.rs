//! What each part of exitprof costs, measured by taking it out again: the same storm profiled
//! with the defaults and with one part off, interleaved, and with the exitprof binary of
//! `--baseline` (earlier builds) where given. Per variant: the storm's elapsed
//! overhead (`compare --toggle probes`, one run per side per round), the in-kernel cost per exit
//! (`--bpf-stats`), on-CPU sampling's own share of it, and exitprof's peak RSS.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{
    exitprof::{Exitprof, Storm, StormRun},
    rotation,
};
use crate::measure::median;

/// The program that samples exits on a CPU.
const SAMPLER: &str = "sample_cpu";
/// The ring buffer's size before it was sized from the storm.
const OLD_RINGBUF_BYTES: &str = "16777216";

/// One way of running exitprof.
struct Variant {
    name: String,
    exitprof: Exitprof,
    args: Vec<&'static str>,
}

/// What one variant cost, medians over the rounds.
#[derive(Debug, Serialize)]
pub struct PartCost {
    pub variant: String,
    /// Storm elapsed with exitprof over without, minus 1.
    pub storm_overhead: f64,
    /// All programs, per exit recorded.
    pub kernel_ns_per_exit: f64,
    /// The sampling program per run (one sample) and per exit recorded; NaN where it did not run.
    pub sample_ns: f64,
    pub sample_ns_per_exit: f64,
    pub peak_rss_kib: f64,
    pub lost: u64,
}

#[derive(Debug, Serialize)]
pub struct PartsReport {
    pub storm: String,
    pub rounds: u32,
    /// The defaults first.
    pub variants: Vec<PartCost>,
}

impl PartsReport {
    /// The variant named `name`.
    pub fn variant(&self, name: &str) -> Option<&PartCost> {
        self.variants.iter().find(|v| v.variant == name)
    }
}

/// The defaults' row.
pub const DEFAULTS: &str = "defaults";
/// The row without on-CPU sampling.
pub const NO_SAMPLING: &str = "--no-cpu-stacks";

/// How a baseline build is named in the table: its directory's name (a commit, say), or the
/// binary's own name.
fn build_name(binary: &Path) -> String {
    let dir = binary.parent().and_then(Path::file_name);
    dir.or_else(|| binary.file_name())
        .map_or_else(|| binary.display().to_string(), |name| name.to_string_lossy().into_owned())
}

pub fn measure(
    exitprof: &Exitprof,
    baselines: &[PathBuf],
    storm: &Storm,
    rounds: u32,
) -> anyhow::Result<PartsReport> {
    let current = |args: &[&'static str]| Variant {
        name: if args.is_empty() { DEFAULTS.to_owned() } else { args.join(" ") },
        exitprof: Exitprof { binary: exitprof.binary.clone() },
        args: args.to_vec(),
    };
    let mut variants = vec![
        current(&[]),
        current(&[NO_SAMPLING]),
        current(&["--no-block-stacks"]),
        current(&["--ringbuf-bytes", OLD_RINGBUF_BYTES]),
    ];
    variants.extend(baselines.iter().map(|binary| Variant {
        name: format!("baseline {}", build_name(binary)),
        exitprof: Exitprof { binary: binary.clone() },
        args: Vec::new(),
    }));
    eprintln!(
        "bench: each part taken out, {} ({rounds} rounds of {} variants, interleaved)",
        storm.name,
        variants.len()
    );
    let mut rounds_of: Vec<Vec<Round>> = variants.iter().map(|_| Vec::new()).collect();
    let indices: Vec<usize> = (0..variants.len()).collect();
    for round in 0..rounds {
        for i in rotation(round, &indices) {
            rounds_of[i].push(Round::take(&variants[i], storm)?);
        }
    }
    Ok(PartsReport {
        storm: storm.name.clone(),
        rounds,
        variants: variants
            .iter()
            .zip(&rounds_of)
            .map(|(v, s)| Round::medians(&v.name, s))
            .collect(),
    })
}

/// One round of one variant.
struct Round {
    storm_ratio: f64,
    kernel_ns_per_exit: f64,
    sample_ns: Option<f64>,
    sample_ns_per_exit: Option<f64>,
    peak_rss_kib: Option<f64>,
    lost: u64,
}

impl Round {
    fn take(variant: &Variant, storm: &Storm) -> anyhow::Result<Self> {
        let compared = variant.exitprof.compare_probes(storm, 1, &variant.args)?;
        let elapsed = |runs: &[StormRun]| median(runs.iter().map(|r| r.elapsed_s));
        let storm_ratio = elapsed(&compared.on.runs) / elapsed(&compared.off.runs);
        let mut args = variant.args.clone();
        args.push("--bpf-stats");
        let profiled = variant.exitprof.profile(storm, &args, true)?;
        let cost = profiled.doc.kernel_cost.as_ref();
        let sampler = cost.and_then(|c| c.programs.iter().find(|p| p.program == SAMPLER));
        Ok(Self {
            storm_ratio,
            kernel_ns_per_exit: cost.and_then(|c| c.ns_per_exit).unwrap_or(f64::NAN),
            sample_ns: sampler.and_then(|p| p.ns_per_run),
            sample_ns_per_exit: sampler.and_then(|p| p.ns_per_exit),
            peak_rss_kib: profiled.process.peak_rss_kib.map(|k| k as f64),
            lost: compared.on.lost + profiled.doc.exits_lost(),
        })
    }

    fn medians(name: &str, rounds: &[Self]) -> PartCost {
        PartCost {
            variant: name.to_owned(),
            storm_overhead: median(rounds.iter().map(|s| s.storm_ratio)) - 1.0,
            kernel_ns_per_exit: median(rounds.iter().map(|s| s.kernel_ns_per_exit)),
            sample_ns: median(rounds.iter().filter_map(|s| s.sample_ns)),
            sample_ns_per_exit: median(rounds.iter().filter_map(|s| s.sample_ns_per_exit)),
            peak_rss_kib: median(rounds.iter().filter_map(|s| s.peak_rss_kib)),
            lost: rounds.iter().map(|s| s.lost).sum(),
        }
    }
}
