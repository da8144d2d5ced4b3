//! `cargo xtask vm-test`: exitprof on real Debian kernels in qemu, for the kprobe and fentry
//! modes the developers' own kernel lacks, for kernels older and newer than theirs, and for
//! arm64 (Graviton's and Ampere's architecture) as for x86_64.
//!
//! Steps: make sure qemu is installed; fetch the newest Debian kernel of each series and
//! architecture, and each architecture's static busybox (cached; through a private apt
//! configuration, since the suites and the architecture need not be the machine's); build
//! exitprof (`cargo xtask dist`'s binary), its integration tests and their C programs static for
//! each architecture; pack them into an initramfs per guest whose `/init` runs what the
//! [schedule](SCHEDULE) gives that kernel: every [scenario](scenarios::SCENARIOS) and then
//! [a subset of the integration tests](suite::GUEST_TESTS) in the attach modes the host lacks,
//! or the ground truth alone and the recorded storm, or (arm64) the storm and the teardowns'
//! ground truth in each mode the kernel has; boot the kernels (as many at once as the host has
//! CPUs, each guest emulated on one host thread); check each scenario's JSON document and each
//! test run's summary; diff the storm recorded on two kernels ([`kernel_diff`]).

mod apt;
mod busybox;
mod cpio;
mod guest;
mod initramfs;
mod kernel_diff;
mod kernels;
mod qemu;
mod scenarios;
mod suite;

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use self::{
    guest::Run,
    kernel_diff::Recorded,
    kernels::{Kernel, Series},
    qemu::Boot,
    scenarios::{Checks, RECORDED, SCENARIOS, Scenario},
    suite::{GUEST_TESTS, GuestTests},
};
use crate::{arch::Arch, command::workspace_root, dist, packages};

#[derive(Args, Default)]
pub struct VmTestArgs {
    /// A kernel series to test (repeatable); all of them by default, each running what the
    /// schedule gives it.
    #[arg(long = "kernel", value_enum, value_name = "SERIES")]
    pub kernels: Vec<Series>,
    /// An architecture to test (repeatable); both by default.
    #[arg(long = "arch", value_enum, value_name = "ARCH")]
    pub arches: Vec<Arch>,
    /// Only this scenario or guest test run (repeatable), on every kernel tested, to look into
    /// one again; what the schedule gives each kernel by default.
    #[arg(long = "only", value_name = "NAME")]
    pub only: Vec<String>,
}

/// What a guest runs when no `--only` is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Every scenario, then every guest test run.
    Whole,
    /// The recorded storm the kernel diff compares, and the ground truth in kprobe and fentry
    /// modes.
    RecordAndGroundTruth,
    /// What arm64 must show: the plan; the threads storm and the ground truth of the teardowns
    /// (mm, files, sem) in kprobe mode, and in fentry mode where the kernel attaches fentry
    /// programs (`fentry`), with the storm recorded there; the storm in tracepoint mode, which
    /// has no x86 FPU marker there; and, where fentry is not offered, the forced-mode test,
    /// which checks that fentry is refused as the plan says (where it is, the storm shows every
    /// mode working, at a third of the forced-mode test's 94 s).
    Subset { fentry: bool },
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Whole => "whole suite",
            Self::RecordAndGroundTruth => "record, ground truth",
            Self::Subset { fentry: true } => "subset, kprobe+fentry",
            Self::Subset { fentry: false } => "subset, kprobe",
        })
    }
}

/// A kernel the VM tests boot, and what its guest runs.
#[derive(Clone, Copy, Debug)]
pub struct Scheduled {
    pub arch: Arch,
    pub series: Series,
    pub share: Share,
}

const fn scheduled(arch: Arch, series: Series, share: Share) -> Scheduled {
    Scheduled { arch, series, share }
}

/// What each kernel's guest runs, in the order the guests start (two at a time on CI's 2-CPU
/// machines, longest first): the oldest and the newest x86_64 kernels run the whole suite, the
/// two between them, which the kernel diff compares, the recorded storm and the ground truth in
/// both function-probe modes; arm64's 6.1 and newest kernels their subset (6.1 attaches no
/// fentry programs: arm64 has ftrace's direct calls since 6.4). All to keep CI within its time
/// (`docs/internals/testing.md` has the times measured).
pub const SCHEDULE: &[Scheduled] = &[
    scheduled(Arch::X86_64, Series::V5_10, Share::Whole),
    scheduled(Arch::X86_64, Series::Newest, Share::Whole),
    scheduled(Arch::Aarch64, Series::Newest, Share::Subset { fentry: true }),
    scheduled(Arch::X86_64, Series::V6_1, Share::RecordAndGroundTruth),
    scheduled(Arch::X86_64, Series::V6_12, Share::RecordAndGroundTruth),
    scheduled(Arch::Aarch64, Series::V6_1, Share::Subset { fentry: false }),
];

/// What the schedule gives `arch`'s `series`.
fn share(arch: Arch, series: Series) -> Option<Share> {
    SCHEDULE.iter().find(|s| s.arch == arch && s.series == series).map(|s| s.share)
}

/// A boot, userspace and poweroff take about 15 s under TCG; each scenario adds a few seconds.
/// The margin is for busy machines.
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);
/// A run of the integration tests in the guest: each test runs exitprof a few times, some
/// thirty.
const TESTS_TIMEOUT: Duration = Duration::from_secs(300);

/// One guest: its kernel and what it runs.
struct Guest {
    kernel: Kernel,
    /// What the schedule gives it, or `None` under `--only`.
    share: Option<Share>,
    scenarios: Vec<Scenario>,
    tests: Vec<GuestTests>,
}

impl Guest {
    fn timeout(&self) -> Duration {
        BOOT_TIMEOUT
            + SCENARIO_TIMEOUT * self.scenarios.len() as u32
            + TESTS_TIMEOUT * self.tests.len() as u32
    }

    /// What it runs: its share of the schedule, or the runs `--only` named.
    fn runs(&self) -> String {
        match self.share {
            Some(share) => share.to_string(),
            None => {
                let names: Vec<&str> = self
                    .scenarios
                    .iter()
                    .map(|s| s.name)
                    .chain(self.tests.iter().map(|t| t.name))
                    .collect();
                format!("--only {}", names.join(", "))
            }
        }
    }

    /// [`Self::runs`] in a few words, for the summary's column.
    fn runs_short(&self) -> String {
        match self.share {
            Some(share) => share.to_string(),
            None => format!("{} run(s)", self.scenarios.len() + self.tests.len()),
        }
    }
}

pub fn vm_test(args: &VmTestArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    packages::ensure(packages::VM)?;
    if let Some(unknown) = args.only.iter().find(|o| {
        !SCENARIOS.iter().any(|s| s.name == *o) && !GUEST_TESTS.iter().any(|t| t.name == *o)
    }) {
        bail!("--only {unknown}: no scenario or guest test run has that name");
    }
    // The schedule's order, whichever order the series were asked for in.
    let wanted: Vec<&Scheduled> = SCHEDULE
        .iter()
        .filter(|s| args.kernels.is_empty() || args.kernels.contains(&s.series))
        .filter(|s| args.arches.is_empty() || args.arches.contains(&s.arch))
        .collect();
    if wanted.is_empty() {
        bail!("the schedule boots no kernel of these series on these architectures");
    }
    let mut kernels: Vec<Option<Kernel>> = wanted.iter().map(|_| None).collect();
    let mut builds = Vec::new();
    for arch in Arch::ALL {
        let of_arch: Vec<usize> = (0..wanted.len()).filter(|&i| wanted[i].arch == arch).collect();
        if of_arch.is_empty() {
            continue;
        }
        let series: Vec<Series> = of_arch.iter().map(|&i| wanted[i].series).collect();
        for (i, kernel) in of_arch.into_iter().zip(kernels::fetch(arch, &series)?) {
            kernels[i] = Some(kernel);
        }
        builds.push(suite::build(arch)?);
    }
    let guests: Vec<Guest> = kernels.into_iter().flatten().map(|k| guest(k, &args.only)).collect();
    let build_of = |arch: Arch| {
        builds.iter().find(|b| b.arch == arch).expect("a build for every guest's architecture")
    };

    let target = workspace_root().join("target/vm");
    let mut initramfs = Vec::new();
    for guest in &guests {
        let path = target.join(&guest.kernel.binary.package).join("initramfs.cpio");
        initramfs::build(
            build_of(guest.kernel.arch),
            &guest.kernel.modules,
            &guest.scenarios,
            &guest.tests,
            &path,
        )
        .context("building the guest's initramfs")?;
        initramfs.push(path);
    }
    // The records are read on this machine, by its own exitprof.
    let exitprof = &match builds.iter().find(|b| b.arch == Arch::host()) {
        Some(build) => build.exitprof.clone(),
        None => dist::static_binary(Arch::host())?,
    };
    let boots = boot_all(&guests, &initramfs, &target);

    let mut failures = Vec::new();
    let mut summary = Vec::new();
    let mut records = Vec::new();
    for (guest, boot) in guests.iter().zip(boots) {
        let kernel = &guest.kernel;
        let (elapsed, verdict) = match boot {
            Ok(boot) => {
                let dir = target.join(&kernel.binary.package);
                let checked = check_boot(guest, &boot, exitprof, &dir);
                failures.extend(checked.failures);
                records.extend(checked.record);
                (format!("{:.1} s", boot.elapsed.as_secs_f64()), checked.verdict)
            }
            Err(e) => {
                failures.push(format!("{}: {e:#}", kernel.binary.package));
                ("-".to_owned(), "FAILED to boot or finish".to_owned())
            }
        };
        summary.push(format!(
            "vm:   {:<7} {:<7} {:<56} {:<22} {elapsed:>8}  {verdict}",
            kernel.arch.name(),
            kernel.series.name(),
            kernel.image.to_string(),
            guest.runs_short(),
        ));
    }
    failures.extend(diff_kernels(&guests, &records, exitprof, &target));
    eprintln!("vm: summary (arch, series, kernel package=version, what ran, guest time, runs):");
    for line in summary {
        eprintln!("{line}");
    }
    eprintln!("vm: done in {:.1} s", started.elapsed().as_secs_f64());
    if !failures.is_empty() {
        bail!("{} VM check(s) failed:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}

/// What `kernel`'s guest runs: what the schedule gives its series, or the runs `only` names.
fn guest(kernel: Kernel, only: &[String]) -> Guest {
    if only.is_empty() {
        let share = share(kernel.arch, kernel.series).unwrap_or(Share::Whole);
        let (scenarios, tests) = runs_of(share);
        Guest { kernel, share: Some(share), scenarios, tests }
    } else {
        let wanted = |name: &str| only.iter().any(|o| o == name);
        let scenarios = SCENARIOS.iter().filter(|s| wanted(s.name)).cloned().collect();
        let tests = GUEST_TESTS.iter().filter(|t| wanted(t.name)).cloned().collect();
        Guest { kernel, share: None, scenarios, tests }
    }
}

/// The scenarios and guest test runs of a share of the schedule.
fn runs_of(share: Share) -> (Vec<Scenario>, Vec<GuestTests>) {
    let scenario = |s: &Scenario| match share {
        Share::Whole => true,
        Share::RecordAndGroundTruth => s.name == RECORDED,
        Share::Subset { fentry } => {
            ["plan", "threads-kprobe", "threads-tracepoint"].contains(&s.name)
                || (fentry && ["threads-fentry", RECORDED].contains(&s.name))
        }
    };
    let test = |t: &GuestTests| match share {
        Share::Whole => !t.is_teardowns(),
        Share::RecordAndGroundTruth => t.is_ground_truth(),
        Share::Subset { fentry } => {
            (t.is_teardowns() && (fentry || t.attach != "fentry"))
                || (!fentry && t.name == "forced-modes")
        }
    };
    let scenarios = SCENARIOS.iter().filter(|s| scenario(s)).cloned().collect();
    let tests = GUEST_TESTS.iter().filter(|t| test(t)).cloned().collect();
    (scenarios, tests)
}

/// Boots every guest, each with its initramfs, and returns how each boot ended, in the guests'
/// order. Each guest is emulated on one host thread: as many run at once as the host has CPUs,
/// started in the guests' order (the schedule's, longest first).
fn boot_all(guests: &[Guest], initramfs: &[PathBuf], target: &Path) -> Vec<anyhow::Result<Boot>> {
    let parallel = thread::available_parallelism().map_or(1, usize::from).min(guests.len());
    for guest in guests {
        eprintln!(
            "vm: {}: {}, within {} s",
            guest.kernel.describe(),
            guest.runs(),
            guest.timeout().as_secs()
        );
    }
    eprintln!("vm: booting {} guest(s) in qemu (TCG), {parallel} at a time", guests.len());
    let next = Mutex::new(0..guests.len());
    let boots: Vec<Mutex<Option<anyhow::Result<Boot>>>> =
        guests.iter().map(|_| Mutex::new(None)).collect();
    thread::scope(|s| {
        for _ in 0..parallel {
            s.spawn(|| {
                loop {
                    // Not in the loop's condition: its guard would hold the queue for the boot.
                    let i = next.lock().expect("the queue's lock").next();
                    let Some(i) = i else { break };
                    let kernel = &guests[i].kernel;
                    eprintln!("vm: {} {}: booting {}", kernel.arch, kernel.series, kernel.release);
                    let dir = target.join(&kernel.binary.package);
                    let timeout = guests[i].timeout();
                    let boot =
                        qemu::boot(kernel.arch, &kernel.vmlinuz, &initramfs[i], &dir, timeout);
                    let how = match &boot {
                        Ok(b) => format!("powered off after {:.1} s", b.elapsed.as_secs_f64()),
                        Err(_) => "failed".to_owned(),
                    };
                    eprintln!("vm: {} {}: {} {how}", kernel.arch, kernel.series, kernel.release);
                    *boots[i].lock().expect("a boot's lock") = Some(boot);
                }
            });
        }
    });
    boots
        .into_iter()
        .map(|b| b.into_inner().expect("a boot's lock").expect("every guest was booted"))
        .collect()
}

/// What the checks of one boot found.
struct Checked {
    /// For the summary: runs passed and failed.
    verdict: String,
    failures: Vec<String>,
    /// The recorded storm, brought back to `dir`.
    record: Option<Recorded>,
}

/// Checks every scenario and test run of one boot, printing a summary line for each; a record
/// the guest sent is kept in `dir` and read with the host's `exitprof`.
fn check_boot(guest: &Guest, boot: &Boot, exitprof: &Path, dir: &Path) -> Checked {
    let Guest { kernel, scenarios, tests, .. } = guest;
    let report = &boot.report;
    let mut record = None;
    let mut failures = Vec::new();
    let mut failed = 0;
    let release = kernel.release.as_str();
    let package = &kernel.binary.package;
    if report.kernel != release {
        failures.push(format!(
            "{package}: expected the guest to run {release}, got {:?}",
            report.kernel
        ));
    }
    eprintln!(
        "vm: {release} ({}) booted, ran and powered off in {:.1} s",
        kernel.image,
        boot.elapsed.as_secs_f64()
    );
    for scenario in scenarios {
        let run = report.runs.iter().find(|r| r.name == scenario.name);
        let (mut checks, live) = check_run(scenario, run);
        if let (Some(live), Some(_)) = (live, scenario.sends) {
            let sent = report.files.iter().find(|f| f.run == scenario.name);
            let file = dir.join(format!("{}.rec", scenario.name));
            let brought = kernel_diff::bring_back(exitprof, sent, &live, &file, &mut checks);
            record = brought.map(|report| Recorded {
                arch: kernel.arch,
                series: kernel.series,
                file,
                report,
            });
        }
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
        failed += usize::from(!checks.failures.is_empty());
        failures
            .extend(checks.failures.iter().map(|f| format!("{package} {}: {f}", scenario.name)));
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
            failed += 1;
            failures.push(format!("{package} {} (--attach {}): {e}", guest.name, guest.attach));
        }
    }
    let runs = scenarios.len() + tests.len();
    let mut verdict = match failed {
        0 => format!("{runs} passed"),
        _ => format!("{} passed, {failed} FAILED", runs - failed),
    };
    if !report.done {
        verdict.push_str(", guest stopped early");
        failures.push(format!(
            "{package}: the guest stopped before the end of its /init; console tail ({}):\n{}",
            boot.console.display(),
            qemu::tail(&boot.console)
        ));
    }
    if report.kernel != release {
        verdict.push_str(", wrong kernel");
    }
    Checked { verdict, failures, record }
}

/// Checks a scenario's run; returns what was found and the run's document.
fn check_run(scenario: &Scenario, run: Option<&Run>) -> (Checks, Option<serde_json::Value>) {
    let mut checks = Checks::default();
    let Some(run) = run else {
        checks.failures.push("did not run".to_owned());
        return (checks, None);
    };
    match run.status {
        Some(0) => {}
        Some(status) => {
            checks.failures.push(format!("exitprof exited with status {status}: {}", run.stderr));
            return (checks, None);
        }
        None => {
            checks.failures.push(format!("exitprof did not finish: {}", run.stderr));
            return (checks, None);
        }
    }
    match serde_json::from_str(&run.stdout) {
        Ok(doc) => {
            (scenario.check)(&doc, &mut checks);
            (checks, Some(doc))
        }
        Err(e) => {
            checks.failures.push(format!(
                "expected a JSON document on stdout, got ({e}):\n{}",
                excerpt(&run.stdout)
            ));
            (checks, None)
        }
    }
}

/// Diffs the storm recorded on the [pair](kernel_diff::PAIR) of kernels, where both guests
/// recorded it, printing what was found; returns the failures. The diff is left out, with a
/// line saying why, when `--kernel` or `--only` left either recording out.
fn diff_kernels(
    guests: &[Guest],
    records: &[Recorded],
    exitprof: &Path,
    target: &Path,
) -> Vec<String> {
    let [a, b] = kernel_diff::PAIR;
    let arch = kernel_diff::ARCH;
    let what = format!("kernel diff {a} → {b}");
    let recorded_in = |series: Series| {
        guests.iter().any(|g| {
            (g.kernel.arch, g.kernel.series) == (arch, series)
                && g.scenarios.iter().any(|s| s.name == RECORDED)
        })
    };
    if let Some(left_out) = [a, b].into_iter().find(|s| !recorded_in(*s)) {
        eprintln!("vm: {what}: not run, this run does not record the storm on {left_out}");
        return Vec::new();
    }
    let record = |series: Series| records.iter().find(|r| (r.arch, r.series) == (arch, series));
    let (Some(ra), Some(rb)) = (record(a), record(b)) else {
        let missing = if record(a).is_none() { a } else { b };
        return vec![format!(
            "{what}: {missing}'s guest brought back no record (see its run above)"
        )];
    };
    let text = target.join(format!("diff-{a}-{b}.txt"));
    let checks = kernel_diff::check(exitprof, ra, rb, &text);
    let verdict = if checks.failures.is_empty() { "pass" } else { "FAIL" };
    eprintln!("vm: {what:<41} {verdict}  {}", checks.figures.join(", "));
    eprintln!("vm:     the diff's text: {}", text.display());
    checks.failures.iter().map(|f| format!("{what}: {f}")).collect()
}

fn excerpt(text: &str) -> &str {
    let end = text.char_indices().nth(2000).map_or(text.len(), |(i, _)| i);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_x86_series_is_scheduled_once_and_arm64_boots_6_1_and_the_newest() {
        for series in Series::ALL {
            let times = SCHEDULE.iter().filter(|s| s.series == *series).count();
            let arm64 = share(Arch::Aarch64, *series).is_some();
            assert_eq!(times, 1 + usize::from(arm64), "{series} is in the schedule {times} times");
            assert!(share(Arch::X86_64, *series).is_some(), "{series} on x86_64");
        }
        assert_eq!(share(Arch::Aarch64, Series::V6_1), Some(Share::Subset { fentry: false }));
        assert_eq!(share(Arch::Aarch64, Series::Newest), Some(Share::Subset { fentry: true }));
    }

    #[test]
    fn the_arm64_subset_runs_each_mode_the_kernel_has() {
        let names = |fentry| {
            let (scenarios, tests) = runs_of(Share::Subset { fentry });
            let mut names: Vec<&str> = scenarios.iter().map(|s| s.name).collect();
            names.extend(tests.iter().map(|t| t.name));
            names
        };
        assert_eq!(
            names(false),
            ["plan", "threads-kprobe", "threads-tracepoint", "forced-modes", "teardowns-kprobe"]
        );
        assert_eq!(
            names(true),
            [
                "plan",
                "threads-kprobe",
                "threads-fentry",
                "threads-tracepoint",
                RECORDED,
                "teardowns-kprobe",
                "teardowns-fentry"
            ]
        );
        // The whole suite has them in the ground truth already.
        let (_, whole) = runs_of(Share::Whole);
        assert!(whole.iter().all(|t| !t.is_teardowns()));
    }

    #[test]
    fn both_kernels_of_the_diff_record_the_storm() {
        // So that the schedule's own run diffs the pair.
        for series in kernel_diff::PAIR {
            let (scenarios, _) = runs_of(share(kernel_diff::ARCH, series).unwrap());
            let recorded = scenarios.iter().find(|s| s.name == RECORDED);
            assert!(recorded.is_some_and(|s| s.sends.is_some()), "{series} sends no record");
        }
    }

    #[test]
    fn the_ground_truth_share_is_the_ground_truth_in_both_function_modes() {
        let runs: Vec<(&str, &str)> = GUEST_TESTS
            .iter()
            .filter(|t| t.is_ground_truth())
            .map(|t| (t.name, t.attach))
            .collect();
        assert_eq!(runs, [("ground-truth-kprobe", "kprobe"), ("ground-truth-fentry", "fentry")]);
    }
}
