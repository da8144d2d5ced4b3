//! `cargo xtask bench-scale`: exitprof on a storm of a million exits and on the same storm at a
//! tenth of the size. It reports what exitprof itself costs (its own CPU time and peak memory,
//! the report's `exitprof` key) against the storm's, and fails when exitprof's memory grows with
//! the number of exits or when recorded and lost exits do not add up to the storm's.

use std::{fmt::Write as _, fs};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{
    command::{cargo, output, root_command, workspace_root},
    overhead::RunDoc,
    setup,
};

/// Threads per rep of the storm.
const THREADS: u64 = 1000;
const MIB: f64 = (1 << 20) as f64;

#[derive(Args)]
pub struct ScaleArgs {
    /// Exits of the large storm (1000 threads per rep).
    #[arg(long, default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(10 * THREADS..))]
    pub exits: u64,
    /// How much exitprof's peak memory may grow from the small storm to the large one (MiB).
    #[arg(long, default_value_t = 16)]
    pub max_growth_mib: u64,
}

/// One storm as exitprof reported it.
struct Row {
    expected: u64,
    recorded: u64,
    lost: u64,
    /// The storm's elapsed, user and sys time (s).
    storm: [f64; 3],
    /// exitprof's own user and sys time (s), and peak RSS (bytes).
    own_cpu: [f64; 2],
    own_peak: u64,
}

pub fn bench_scale(args: &ScaleArgs) -> anyhow::Result<()> {
    setup::setup()?;
    cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
    let root = workspace_root();
    let exitprof = root.join("target/release/exitprof");
    let mut rows = Vec::new();
    for exits in [args.exits / 10, args.exits] {
        let reps = (exits / THREADS).to_string();
        eprintln!("bench-scale: {THREADS} threads x {reps} reps, no stagger");
        let storm = ["--threads", &THREADS.to_string(), "--reps", &reps, "--stagger-us", "0"];
        let mut cmd = root_command(&exitprof, &[&["--json"][..], &storm].concat())?;
        let doc: RunDoc = serde_json::from_str(&output(&mut cmd)?).context("exitprof's report")?;
        rows.push(Row::read(&doc).context("exitprof's report lacks a figure")?);
    }
    print!("{}", table(&rows));
    let json = serde_json::json!({
        "storms": rows.iter().map(|r| serde_json::json!({
            "exits_expected": r.expected,
            "exits_recorded": r.recorded,
            "lost": r.lost,
            "storm_s": { "elapsed": r.storm[0], "user": r.storm[1], "sys": r.storm[2] },
            "exitprof": {
                "user_s": r.own_cpu[0],
                "sys_s": r.own_cpu[1],
                "peak_rss_bytes": r.own_peak,
            },
        })).collect::<Vec<_>>(),
    });
    let path = root.join("target/bench-scale.json");
    fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench-scale: wrote {}", path.display());

    for r in &rows {
        if r.recorded + r.lost != r.expected {
            bail!(
                "{} recorded + {} lost exits, not the storm's {}",
                r.recorded,
                r.lost,
                r.expected
            );
        }
    }
    let (small, large) = (&rows[0], &rows[1]);
    let growth = large.own_peak.saturating_sub(small.own_peak) as f64 / MIB;
    if growth > args.max_growth_mib as f64 {
        bail!(
            "exitprof's peak memory grew by {growth:.1} MiB from {} to {} exits (more than \
             --max-growth-mib {}): something keeps per-exit state",
            small.expected,
            large.expected,
            args.max_growth_mib
        );
    }
    eprintln!("bench-scale: peak memory grew by {growth:.1} MiB over {}x the exits", 10);
    Ok(())
}

impl Row {
    /// `None` where the report has no figure: exitprof did not drive the storm, or could not
    /// read its own peak RSS.
    fn read(doc: &RunDoc) -> Option<Self> {
        let own = &doc.exitprof;
        Some(Self {
            expected: doc.exits_expected?,
            recorded: doc.exits_recorded,
            lost: doc.lost,
            storm: [doc.elapsed_s, doc.user_s?, doc.sys_s?],
            own_cpu: [own.cpu.user_s, own.cpu.sys_s],
            own_peak: own.peak_rss_bytes?,
        })
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:>9} {:>9} {:>6}   {:>8} {:>7} {:>7}   {:>13} {:>7} {:>9}",
        "exits", "recorded", "lost", "storm s", "user", "sys", "exitprof user", "sys", "peak RSS"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:>9} {:>9} {:>6}   {:>8.2} {:>7.2} {:>7.2}   {:>13.2} {:>7.2} {:>5.1} MiB",
            r.expected,
            r.recorded,
            r.lost,
            r.storm[0],
            r.storm[1],
            r.storm[2],
            r.own_cpu[0],
            r.own_cpu[1],
            r.own_peak as f64 / MIB,
        );
    }
    out
}
