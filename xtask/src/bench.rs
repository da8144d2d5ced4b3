//! `cargo xtask bench-driver`: exitprof's storm drivers against C programs that do what the
//! programs of the 2006 LKML taskstats benchmark and the 2012 LKML CLONE_NEWIPC report did, with
//! no probes attached, so that a storm driven by exitprof costs what those programs cost.
//!
//! Both sides are measured the way `/usr/bin/time` measured those programs: elapsed from spawn to
//! reap, user and sys from `wait4`. Runs alternate (reference, driver, reference, ...) so that
//! the machine's noise falls on both; the table shows medians and the driver/reference ratios.

use std::{fmt::Write as _, fs, path::Path};

use anyhow::Context as _;
use clap::Args;

use crate::{
    arch::Arch,
    command::{cargo, workspace_root},
    dist,
    measure::{Usage, compile_c, measure_argv},
    setup,
};

#[derive(Args)]
pub struct BenchArgs {
    /// Runs of each side per case (alternating).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Measures the statically linked binary of `cargo xtask dist` (musl) instead of the
    /// release build (glibc); writes target/bench-driver-static.json.
    #[arg(long = "static")]
    pub static_binary: bool,
}

/// One comparison: the same storm from the C reference and from exitprof's driver.
struct Case {
    name: &'static str,
    reference: Vec<String>,
    driver: Vec<String>,
}

/// A case's medians, and the driver's over the reference's.
struct Row<'a> {
    case: &'a Case,
    reference: Usage,
    driver: Usage,
    ratio: Usage,
}

pub fn bench_driver(args: &BenchArgs) -> anyhow::Result<()> {
    setup::setup()?;
    let root = workspace_root();
    let (exitprof, linked, json_name) = if args.static_binary {
        (dist::static_binary(Arch::host())?, "static, musl", "bench-driver-static.json")
    } else {
        cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
        (root.join("target/release/exitprof"), "dynamic, glibc", "bench-driver.json")
    };
    let out_dir = root.join("target/bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let threads_ref = compile_c(&root.join("xtask/bench/threads_ref.c"), &out_dir, &[])?;
    let forks_ref = compile_c(&root.join("xtask/bench/forks_ref.c"), &out_dir, &[])?;

    let program = |p: &Path, args: &[&str]| {
        std::iter::once(p.display().to_string())
            .chain(args.iter().map(ToString::to_string))
            .collect()
    };
    let driver = |args: &[&str]| {
        let mut all = vec!["__workload"];
        all.extend_from_slice(args);
        program(&exitprof, &all)
    };
    let cases = [
        Case {
            name: "threads 1000x10 stagger 2",
            reference: program(&threads_ref, &["1000", "10", "2"]),
            driver: driver(&["threads", "--threads", "1000", "--reps", "10", "--stagger-us", "2"]),
        },
        Case {
            name: "threads 1000x10 stagger 0",
            reference: program(&threads_ref, &["1000", "10", "0"]),
            driver: driver(&["threads", "--threads", "1000", "--reps", "10", "--stagger-us", "0"]),
        },
        Case {
            name: "ipcns 1024",
            reference: program(&forks_ref, &["1024", "ipcns"]),
            driver: driver(&["ipcns", "--count", "1024"]),
        },
        Case {
            name: "fork 1024",
            reference: program(&forks_ref, &["1024", "fork"]),
            driver: driver(&["fork", "--count", "1024"]),
        },
    ];

    let mut rows = Vec::new();
    for case in &cases {
        eprintln!("bench-driver: {} ({} runs each, alternating)", case.name, args.runs);
        // One unmeasured run each: page cache, stack caches.
        measure_argv(&case.reference)?;
        measure_argv(&case.driver)?;
        let (mut reference, mut driver) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            reference.push(measure_argv(&case.reference)?);
            driver.push(measure_argv(&case.driver)?);
        }
        let (reference, driver) = (Usage::medians(&reference), Usage::medians(&driver));
        rows.push(Row { case, reference, driver, ratio: driver.ratio_to(reference) });
    }

    print!("{}", table(&rows, args.runs, linked));
    let json = serde_json::json!({
        "runs": args.runs,
        "exitprof": format!("{} ({linked})", exitprof.display()),
        "cases": rows.iter().map(|row| serde_json::json!({
            "name": row.case.name,
            "reference": row.case.reference.join(" "),
            "driver": row.case.driver.join(" "),
            "reference_median_s": row.reference,
            "driver_median_s": row.driver,
            "ratio": row.ratio,
        })).collect::<Vec<_>>(),
    });
    let path = root.join("target").join(json_name);
    fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench-driver: wrote {}", path.display());
    Ok(())
}

fn table(rows: &[Row], runs: u32, linked: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nmedians of {runs} alternating runs each, seconds; ratio = exitprof driver ({linked}) / C \
         reference\n"
    );
    let _ = writeln!(
        out,
        "{:<27} {:>9} {:>9} {:>7}   {:>7} {:>7} {:>6}   {:>7} {:>7} {:>6}",
        "case", "elapsed", "", "ratio", "user", "", "ratio", "sys", "", "ratio"
    );
    let sides = format!(
        "{:<27} {:>9} {:>9} {:>7}   {:>7} {:>7} {:>6}   {:>7} {:>7} {:>6}",
        "", "C", "exitprof", "", "C", "exitprof", "", "C", "exitprof", ""
    );
    let _ = writeln!(out, "{}", sides.trim_end());
    for Row { case, reference: r, driver: d, ratio } in rows {
        let _ = writeln!(
            out,
            "{:<27} {:>9.3} {:>9.3} {:>7.3}   {:>7.3} {:>7.3} {:>6.2}   {:>7.3} {:>7.3} {:>6.2}",
            case.name,
            r.elapsed,
            d.elapsed,
            ratio.elapsed,
            r.user,
            d.user,
            ratio.user,
            r.sys,
            d.sys,
            ratio.sys,
        );
    }
    out
}
