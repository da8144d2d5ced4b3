//! `cargo xtask vm-test`: exitprof on real Debian kernels in qemu, for the kprobe and fentry
//! modes the developers' own kernel lacks.
//!
//! Steps: make sure qemu and busybox are installed; fetch the newest Debian kernel of each
//! series (cached); build exitprof (`cargo xtask dist`'s binary) and its integration tests
//! static; pack them with busybox
//! into an initramfs whose `/init` runs every [scenario](scenarios::SCENARIOS) and then
//! [a subset of the integration tests](suite::GUEST_TESTS) in the attach modes the host lacks;
//! boot each kernel (concurrently: on two cores that is about twice as fast as one after the
//! other); check each scenario's JSON document and each test run's summary.

mod cpio;
mod guest;
mod initramfs;
mod kernels;
mod packages;
mod qemu;
mod scenarios;
mod suite;

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use self::{
    guest::Run,
    kernels::{Kernel, Series},
    qemu::Boot,
    scenarios::{Checks, SCENARIOS, Scenario},
    suite::{GUEST_TESTS, GuestTests},
};
use crate::command::workspace_root;

#[derive(Args, Default)]
pub struct VmTestArgs {
    /// A kernel series to test (repeatable); all of them by default.
    #[arg(long = "kernel", value_enum, value_name = "SERIES")]
    pub kernels: Vec<Series>,
    /// Only this scenario or guest test run (repeatable), to look into one again; all of them
    /// by default.
    #[arg(long = "only", value_name = "NAME")]
    pub only: Vec<String>,
}

/// A boot, userspace and poweroff take about 15 s under TCG; each scenario adds a few seconds.
/// The margin is for busy machines.
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);
/// A run of the integration tests in the guest: each test runs exitprof a few times, some
/// thirty.
const TESTS_TIMEOUT: Duration = Duration::from_secs(300);

pub fn vm_test(args: &VmTestArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    packages::ensure()?;
    let requested = if args.kernels.is_empty() { Series::ALL } else { &args.kernels[..] };
    let mut series: Vec<Series> = Vec::new();
    for s in requested {
        if !series.contains(s) {
            series.push(*s);
        }
    }
    let kernels = series.into_iter().map(kernels::fetch).collect::<anyhow::Result<Vec<_>>>()?;

    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let scenarios: Vec<Scenario> = SCENARIOS.iter().filter(|s| wanted(s.name)).cloned().collect();
    let tests: Vec<GuestTests> = GUEST_TESTS.iter().filter(|t| wanted(t.name)).cloned().collect();
    if let Some(unknown) = args.only.iter().find(|o| {
        !SCENARIOS.iter().any(|s| s.name == *o) && !GUEST_TESTS.iter().any(|t| t.name == *o)
    }) {
        bail!("--only {unknown}: no scenario or guest test run has that name");
    }

    let binaries = suite::build()?;
    let target = workspace_root().join("target");
    let initramfs = target.join("vm/initramfs.cpio");
    initramfs::build(&binaries, &scenarios, &tests, &initramfs)
        .context("building the guest's initramfs")?;

    let names: Vec<&str> = kernels.iter().map(|k| k.package.as_str()).collect();
    eprintln!("vm: booting {} in qemu (TCG)", names.join(" and "));
    let timeout = BOOT_TIMEOUT
        + SCENARIO_TIMEOUT * scenarios.len() as u32
        + TESTS_TIMEOUT * tests.len() as u32;
    let boots: Vec<anyhow::Result<Boot>> = thread::scope(|s| {
        let guests: Vec<_> = kernels
            .iter()
            .map(|k| {
                let dir = target.join("vm").join(&k.package);
                let initramfs = &initramfs;
                s.spawn(move || qemu::boot(&k.vmlinuz, initramfs, &dir, timeout))
            })
            .collect();
        guests.into_iter().map(|g| g.join().expect("a boot thread panicked")).collect()
    });

    let mut failures = Vec::new();
    for (kernel, boot) in kernels.iter().zip(boots) {
        match boot {
            Ok(boot) => failures.extend(check_boot(kernel, &boot, &scenarios, &tests)),
            Err(e) => failures.push(format!("{}: {e:#}", kernel.package)),
        }
    }
    eprintln!("vm: done in {:.1} s", started.elapsed().as_secs_f64());
    if !failures.is_empty() {
        bail!("{} VM check(s) failed:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}

/// Checks every scenario of one boot, printing a summary line for each; returns the failures.
fn check_boot(
    kernel: &Kernel,
    boot: &Boot,
    scenarios: &[Scenario],
    tests: &[GuestTests],
) -> Vec<String> {
    let report = &boot.report;
    let mut failures = Vec::new();
    let release = kernel.release();
    if report.kernel != release {
        failures.push(format!(
            "{}: expected the guest to run {release}, got {:?}",
            kernel.package, report.kernel
        ));
    }
    eprintln!("vm: {release} booted, ran and powered off in {:.1} s", boot.elapsed.as_secs_f64());
    for scenario in scenarios {
        let run = report.runs.iter().find(|r| r.name == scenario.name);
        let checks = check_run(scenario, run);
        let (verdict, summary) = match checks.failures.first() {
            None => ("pass", checks.figures.join(", ")),
            Some(first) if checks.figures.is_empty() => {
                ("FAIL", first.lines().next().unwrap_or_default().to_owned())
            }
            Some(_) => ("FAIL", checks.figures.join(", ")),
        };
        eprintln!("vm: {release:<22} {:<18} {verdict}  {summary}", scenario.name);
        // exitprof's warnings matter even when the figures pass.
        for line in run.iter().flat_map(|r| r.stderr.lines()).filter(|l| !l.trim().is_empty()) {
            eprintln!("vm:     stderr: {line}");
        }
        failures.extend(
            checks.failures.iter().map(|f| format!("{} {}: {f}", kernel.package, scenario.name)),
        );
    }
    for guest in tests {
        let run = report.runs.iter().find(|r| r.name == guest.name);
        let checked = match run {
            None => Err("did not run".to_owned()),
            Some(run) => suite::check(&run.stdout).map_err(|e| format!("{e}\n{}", run.stdout)),
        };
        let summary = checked.as_ref().map_or_else(
            |e| format!("FAIL  {}", e.lines().next().unwrap_or_default()),
            |s| format!("pass  {s}"),
        );
        eprintln!("vm: {release:<22} {:<18} {summary}", guest.name);
        // The tests' own figures, which they print to stderr.
        for line in run.iter().flat_map(|r| r.stderr.lines()).filter(|l| !l.trim().is_empty()) {
            eprintln!("vm:     {line}");
        }
        if let Err(e) = checked {
            failures.push(format!(
                "{} {} (--attach {}): {e}",
                kernel.package, guest.name, guest.attach
            ));
        }
    }
    if !report.done {
        failures.push(format!(
            "{}: the guest stopped before the end of its /init; console tail ({}):\n{}",
            kernel.package,
            boot.console.display(),
            qemu::tail(&boot.console)
        ));
    }
    failures
}

fn check_run(scenario: &Scenario, run: Option<&Run>) -> Checks {
    let mut checks = Checks::default();
    let Some(run) = run else {
        checks.failures.push("did not run".to_owned());
        return checks;
    };
    match run.status {
        Some(0) => {}
        Some(status) => {
            checks.failures.push(format!("exitprof exited with status {status}: {}", run.stderr));
            return checks;
        }
        None => {
            checks.failures.push(format!("exitprof did not finish: {}", run.stderr));
            return checks;
        }
    }
    match serde_json::from_str(&run.stdout) {
        Ok(doc) => (scenario.check)(&doc, &mut checks),
        Err(e) => checks.failures.push(format!(
            "expected a JSON document on stdout, got ({e}):\n{}",
            excerpt(&run.stdout)
        )),
    }
    checks
}

fn excerpt(text: &str) -> &str {
    let end = text.char_indices().nth(2000).map_or(text.len(), |(i, _)| i);
    &text[..end]
}
