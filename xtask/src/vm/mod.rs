//! `cargo xtask vm-test`: exitprof on real Debian kernels in qemu, for the kprobe and fentry
//! modes the developers' own kernel lacks, and for kernels older and newer than theirs.
//!
//! Steps: make sure qemu and busybox are installed; fetch the newest Debian kernel of each
//! series (cached; through a private apt configuration, since the suites need not be the
//! machine's); build exitprof (`cargo xtask dist`'s binary) and its integration tests static;
//! pack them with busybox into an initramfs per guest whose `/init` runs what the
//! [schedule](SCHEDULE) gives that kernel: every [scenario](scenarios::SCENARIOS) and then
//! [a subset of the integration tests](suite::GUEST_TESTS) in the attach modes the host lacks,
//! or the ground truth alone and the recorded storm; boot the kernels (as many at once as the
//! host has CPUs, each guest emulated on one host thread); check each scenario's JSON document
//! and each test run's summary; diff the storm recorded on two kernels
//! ([`kernel_diff`]).

mod apt;
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
use crate::{command::workspace_root, packages};

#[derive(Args, Default)]
pub struct VmTestArgs {
    /// A kernel series to test (repeatable); all of them by default, each running what the
    /// schedule gives it.
    #[arg(long = "kernel", value_enum, value_name = "SERIES")]
    pub kernels: Vec<Series>,
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
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Whole => "whole suite",
            Self::RecordAndGroundTruth => "record, ground truth",
        })
    }
}

/// What each kernel's guest runs, in the order the guests start (two at a time on CI's 2-CPU
/// machines): the oldest and the newest kernels run the whole suite, the two between them, which
/// the kernel diff compares, the recorded storm and the ground truth in both function-probe
/// modes, to keep CI within its time (`docs/testing.md` has the times measured).
pub const SCHEDULE: &[(Series, Share)] = &[
    (Series::V5_10, Share::Whole),
    (Series::Newest, Share::Whole),
    (Series::V6_1, Share::RecordAndGroundTruth),
    (Series::V6_12, Share::RecordAndGroundTruth),
];

fn share(series: Series) -> Share {
    SCHEDULE.iter().find(|(s, _)| *s == series).map_or(Share::Whole, |(_, share)| *share)
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
    let series: Vec<Series> = SCHEDULE
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| args.kernels.is_empty() || args.kernels.contains(s))
        .collect();
    let guests: Vec<Guest> =
        kernels::fetch(&series)?.into_iter().map(|k| guest(k, &args.only)).collect();

    let binaries = suite::build()?;
    let target = workspace_root().join("target/vm");
    let mut initramfs = Vec::new();
    for guest in &guests {
        let path = target.join(&guest.kernel.binary.package).join("initramfs.cpio");
        initramfs::build(&binaries, &guest.scenarios, &guest.tests, &path)
            .context("building the guest's initramfs")?;
        initramfs.push(path);
    }
    let boots = boot_all(&guests, &initramfs, &target);

    let mut failures = Vec::new();
    let mut summary = Vec::new();
    let mut records = Vec::new();
    for (guest, boot) in guests.iter().zip(boots) {
        let kernel = &guest.kernel;
        let (elapsed, verdict) = match boot {
            Ok(boot) => {
                let dir = target.join(&kernel.binary.package);
                let checked = check_boot(guest, &boot, &binaries.exitprof, &dir);
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
            "vm:   {:<7} {:<56} {:<20} {elapsed:>8}  {verdict}",
            kernel.series.name(),
            kernel.image.to_string(),
            guest.runs_short(),
        ));
    }
    failures.extend(diff_kernels(&guests, &records, &binaries.exitprof, &target));
    eprintln!("vm: summary (series, kernel package=version, what ran, guest time, runs):");
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
        let share = share(kernel.series);
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
    let whole = share == Share::Whole;
    let scenarios = SCENARIOS.iter().filter(|s| whole || s.name == RECORDED).cloned().collect();
    let tests = GUEST_TESTS.iter().filter(|t| whole || t.is_ground_truth()).cloned().collect();
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
                    eprintln!("vm: {}: booting {}", kernel.series, kernel.release);
                    let dir = target.join(&kernel.binary.package);
                    let boot =
                        qemu::boot(&kernel.vmlinuz, &initramfs[i], &dir, guests[i].timeout());
                    let how = match &boot {
                        Ok(b) => format!("powered off after {:.1} s", b.elapsed.as_secs_f64()),
                        Err(_) => "failed".to_owned(),
                    };
                    eprintln!("vm: {}: {} {how}", kernel.series, kernel.release);
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
            record = brought.map(|report| Recorded { series: kernel.series, file, report });
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
    let what = format!("kernel diff {a} → {b}");
    let recorded_in = |series: Series| {
        guests
            .iter()
            .any(|g| g.kernel.series == series && g.scenarios.iter().any(|s| s.name == RECORDED))
    };
    if let Some(left_out) = [a, b].into_iter().find(|s| !recorded_in(*s)) {
        eprintln!("vm: {what}: not run, this run does not record the storm on {left_out}");
        return Vec::new();
    }
    let record = |series: Series| records.iter().find(|r| r.series == series);
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
    fn every_series_is_scheduled_once() {
        for series in Series::ALL {
            let times = SCHEDULE.iter().filter(|(s, _)| s == series).count();
            assert_eq!(times, 1, "{series} is in the schedule {times} times");
        }
        assert_eq!(SCHEDULE.len(), Series::ALL.len());
    }

    #[test]
    fn both_kernels_of_the_diff_record_the_storm() {
        // So that the schedule's own run diffs the pair.
        for series in kernel_diff::PAIR {
            let (scenarios, _) = runs_of(share(series));
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
