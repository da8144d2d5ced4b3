//! `cargo xtask bench-driver`: exitprof's storm drivers against C programs with the seeds'
//! semantics, with no probes attached, so that a storm driven by exitprof costs what the seeds'
//! programs cost.
//!
//! Both sides are measured the way `/usr/bin/time` measured the seeds: elapsed from spawn to
//! reap, user and sys from `wait4`. Runs alternate (reference, driver, reference, ...) so that
//! the machine's noise falls on both; the table shows medians and the driver/reference ratios.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{
    command::{cargo, run, workspace_root},
    setup,
};

#[derive(Args)]
pub struct BenchArgs {
    /// Runs of each side per case (alternating).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
}

/// One comparison: the same storm from the C reference and from exitprof's driver.
struct Case {
    name: &'static str,
    reference: Vec<String>,
    driver: Vec<String>,
}

/// Medians of one side of a case.
#[derive(Clone, Copy, Default)]
struct Medians {
    elapsed: f64,
    user: f64,
    sys: f64,
}

/// One run: elapsed, user, sys in seconds.
type Sample = [f64; 3];

pub fn bench_driver(args: &BenchArgs) -> anyhow::Result<()> {
    setup::setup()?;
    cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
    let root = workspace_root();
    let out_dir = root.join("target/bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let threads_ref = compile(&root.join("xtask/bench/threads_ref.c"), &out_dir)?;
    let forks_ref = compile(&root.join("xtask/bench/forks_ref.c"), &out_dir)?;
    let exitprof = root.join("target/release/exitprof");

    let program = |p: &Path, args: &[&str]| {
        std::iter::once(p.display().to_string()).chain(args.iter().map(|a| a.to_string())).collect()
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
        measure(&case.reference)?;
        measure(&case.driver)?;
        let (mut reference, mut driver) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            reference.push(measure(&case.reference)?);
            driver.push(measure(&case.driver)?);
        }
        rows.push((case, medians(&reference), medians(&driver)));
    }

    print!("{}", table(&rows, args.runs));
    let json = serde_json::json!({
        "runs": args.runs,
        "cases": rows.iter().map(|(case, r, d)| serde_json::json!({
            "name": case.name,
            "reference": case.reference.join(" "),
            "driver": case.driver.join(" "),
            "reference_median_s": { "elapsed": r.elapsed, "user": r.user, "sys": r.sys },
            "driver_median_s": { "elapsed": d.elapsed, "user": d.user, "sys": d.sys },
            "ratio": {
                "elapsed": d.elapsed / r.elapsed,
                "user": ratio(d.user, r.user),
                "sys": ratio(d.sys, r.sys),
            },
        })).collect::<Vec<_>>(),
    });
    let path = root.join("target/bench-driver.json");
    fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench-driver: wrote {}", path.display());
    Ok(())
}

/// Compiles a reference program into `out_dir` with `cc -O2 -pthread`.
fn compile(source: &Path, out_dir: &Path) -> anyhow::Result<PathBuf> {
    let stem = source.file_stem().context("a source file name")?;
    let binary = out_dir.join(stem);
    run(Command::new("cc").args(["-O2", "-pthread", "-o"]).arg(&binary).arg(source))
        .with_context(|| format!("compiling {} (is a C compiler installed?)", source.display()))?;
    Ok(binary)
}

/// Runs `argv` to completion; elapsed from spawn to reap, user and sys from wait4.
fn measure(argv: &[String]) -> anyhow::Result<Sample> {
    let started = Instant::now();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .spawn()
        .with_context(|| format!("starting {}", argv[0]))?;
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals; the pid is our own unreaped child.
    if unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) } < 0 {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    let elapsed = started.elapsed();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{} failed: wait status {status:#x}", argv.join(" "));
    }
    let secs =
        |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000).as_secs_f64();
    Ok([elapsed.as_secs_f64(), secs(usage.ru_utime), secs(usage.ru_stime)])
}

fn medians(samples: &[Sample]) -> Medians {
    let median = |i: usize| {
        let mut v: Vec<f64> = samples.iter().map(|s| s[i]).collect();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        if v.len().is_multiple_of(2) { (v[mid - 1] + v[mid]) / 2.0 } else { v[mid] }
    };
    Medians { elapsed: median(0), user: median(1), sys: median(2) }
}

/// `a / b`, or NaN when the reference used no measurable time (rusage ticks are coarse).
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

fn table(rows: &[(&Case, Medians, Medians)], runs: u32) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nmedians of {runs} alternating runs each, seconds; ratio = exitprof driver / C reference\n"
    );
    let _ = writeln!(
        out,
        "{:<27} {:>9} {:>9} {:>7}   {:>7} {:>7} {:>6}   {:>7} {:>7} {:>6}",
        "case", "elapsed", "", "ratio", "user", "", "ratio", "sys", "", "ratio"
    );
    let _ = writeln!(
        out,
        "{:<27} {:>9} {:>9} {:>7}   {:>7} {:>7} {:>6}   {:>7} {:>7} {:>6}",
        "", "C", "exitprof", "", "C", "exitprof", "", "C", "exitprof", ""
    );
    for (case, r, d) in rows {
        let _ = writeln!(
            out,
            "{:<27} {:>9.3} {:>9.3} {:>7.3}   {:>7.3} {:>7.3} {:>6.2}   {:>7.3} {:>7.3} {:>6.2}",
            case.name,
            r.elapsed,
            d.elapsed,
            d.elapsed / r.elapsed,
            r.user,
            d.user,
            ratio(d.user, r.user),
            r.sys,
            d.sys,
            ratio(d.sys, r.sys),
        );
    }
    out
}
