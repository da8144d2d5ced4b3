//! `cargo xtask soak`: `exitprof serve --all --group-by cgroup` for as long as asked (30 minutes
//! by default) under a churn of every way tasks end (`xtask/soak/soak_churn.c`), with a `--comm`
//! serve of the churn's name beside it (the compat object forced, whose marks and slot owners are
//! hashes), and exits counted without exitprof: the churn counts the tasks it creates, and the
//! kernel's perf events count `sched_process_exit` (`counting`). At the end:
//!
//! - every exit that began while serve watched was opened or refused by exitprof once (its
//!   kernel counters against the perf count, read between two reads of it), and every exit whose
//!   account closed was recorded or counted lost once (serve's `/metrics` against the kernel
//!   side's ends and refusals, scraped between two reads of them); the `--comm` serve's recorded
//!   + lost is exactly the churn's own count of its exits;
//! - every map of both instances (exit slot owners, refusals, awaited frees, the free watch,
//!   heirs, early exits, the compat object's marks) back to its size before the churn, read from
//!   outside by id (`bpf_maps`), and serve's groups back too: none of the churn's cgroups left;
//! - serve's resident memory flat: its least-squares slope over the last two thirds of the churn
//!   (the last 20 minutes of 30), at most [`RSS_BOUND_BYTES`] over that window (a shorter soak,
//!   which ends before serve's memory settles, checks it against what its groups may hold);
//! - every counter and histogram of `/metrics` monotonic across the scrapes (every 10 s), and
//!   `promtool check metrics` clean.
//!
//! The figures go to `target/soak.json`; any check that fails fails the command, naming it.
//! `cargo xtask test` runs a 3-minute soak after the root integration tests.

mod bpf_maps;
mod counting;
mod host;
mod instance;
mod metrics;
mod report;

use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use self::{
    bpf_maps::Occupancy,
    counting::ExitCounter,
    host::{Cgroup, CorePattern},
    instance::Instance,
    metrics::Scrape,
    report::{Boundary, Churn, SoakReport, Soaked},
};
use crate::{
    command::{cargo, is_root, workspace_root},
    measure::compile_c,
    packages, setup,
};

#[derive(Args)]
pub struct SoakArgs {
    /// How long the churn runs, in seconds.
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(60..))]
    pub seconds: u64,
    /// The exitprof binary to soak (default: the release build, built first).
    #[arg(long)]
    pub exitprof: Option<PathBuf>,
}

/// The name the churn's tasks exit under, which the `--comm` serve watches.
const CHURN_COMM: &str = "soak_churn";
/// The name of the churn's deep chain, deeper than any ancestry walk: no `--comm` serve of
/// [`CHURN_COMM`] may count these exits, recorded or lost.
const DEEP_COMM: &str = "soak_deep";

/// serve's `--group-ttl`: the churn's groups must be gone this long after it.
const GROUP_TTL: Duration = Duration::from_secs(30);
/// How often both serves are scraped during the soak.
const SCRAPE_EVERY: Duration = Duration::from_secs(10);
/// How often `promtool check metrics` reads a scrape (and the last one always).
const PROMTOOL_EVERY: usize = 6;
/// How often the maps are read during the churn, for the record of their occupancy.
const MAPS_EVERY: Duration = Duration::from_secs(60);
/// Reads of the maps before and after the churn: a leaked entry is in every one after, an exit
/// in progress of the machine's own passes.
const MAP_READS: usize = 5;
/// What serve's resident memory may grow by over the last two thirds of the churn, as its
/// least-squares slope predicts it.
pub const RSS_BOUND_BYTES: f64 = 1024.0 * 1024.0;

pub fn soak(args: &SoakArgs) -> anyhow::Result<()> {
    if !is_root() {
        bail!("cargo xtask soak loads eBPF programs: run it as root");
    }
    setup::setup()?;
    packages::ensure(packages::INTEGRATION)?;
    let binary = match &args.exitprof {
        Some(binary) => binary.clone(),
        None => {
            cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
            workspace_root().join("target/release/exitprof")
        }
    };
    run(&binary, Duration::from_secs(args.seconds))
}

/// The soak of `binary` with a churn of `churn` and its checks; fails if one fails.
pub fn run(binary: &Path, churn: Duration) -> anyhow::Result<()> {
    let out_dir = workspace_root().join("target/soak");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let churn_binary = compile_c(&workspace_root().join("xtask/soak/soak_churn.c"), &out_dir, &[])?;
    let report = soak_with(binary, &churn_binary, &out_dir, churn)?;
    print!("{}", report.render());
    let path = workspace_root().join("target/soak.json");
    fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("soak: wrote {}", path.display());
    let failed: Vec<&str> =
        report.checks.iter().filter(|c| !c.passed).map(|c| c.what.as_str()).collect();
    if !failed.is_empty() {
        bail!(
            "the soak failed {} of {} checks: {}",
            failed.len(),
            report.checks.len(),
            failed.join("; ")
        );
    }
    Ok(())
}

/// The machine's exits counted by perf: all, the churn's by name, its deep chain's.
struct Counters {
    all: ExitCounter,
    churn: ExitCounter,
    deep: ExitCounter,
}

impl Counters {
    fn read(&self) -> anyhow::Result<[u64; 3]> {
        Ok([self.all.read()?, self.churn.read()?, self.deep.read()?])
    }
}

fn soak_with(
    binary: &Path,
    churn_binary: &Path,
    out_dir: &Path,
    churn_for: Duration,
) -> anyhow::Result<SoakReport> {
    let tracefs = host::tracefs()?;
    let counters = Counters {
        all: ExitCounter::new(&tracefs, None)?,
        churn: ExitCounter::new(&tracefs, Some(CHURN_COMM))?,
        deep: ExitCounter::new(&tracefs, Some(DEEP_COMM))?,
    };
    let _core_pattern = CorePattern::discard()?;
    let cgroup = Cgroup::make()?;
    let ttl = format!("{}s", GROUP_TTL.as_secs());
    let instances = [
        Instance::start(
            binary,
            "all",
            &["--all", "--group-by", "cgroup", "--group-ttl", &ttl],
            false,
        )?,
        Instance::start(binary, "comm", &["--comm", CHURN_COMM], true)?,
    ];
    eprintln!(
        "soak: serving: {}",
        instances
            .iter()
            .map(|i| format!("{} (pid {})", i.args.join(" "), i.pid))
            .collect::<Vec<_>>()
            .join("; ")
    );
    // serve walks the cgroup tree and publishes its first snapshots meanwhile.
    thread::sleep(Duration::from_secs(5));
    let maps_before = read_maps(&instances)?;
    let groups_before = instances[0].scrape()?.sum("exitprof_groups");
    let before = boundary(&counters, &instances)?;
    let mut watch = Watch::new(&instances, out_dir)?;

    eprintln!("soak: churning for {} s", churn_for.as_secs());
    let counts_file = out_dir.join("churn-counts");
    let started = Instant::now();
    let mut churn = Command::new(churn_binary)
        .arg(&counts_file)
        .arg(churn_for.as_secs().to_string())
        .arg(&cgroup.path)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", churn_binary.display()))?;
    let mut maps_during = Vec::new();
    let mut last_maps = Instant::now();
    let status = loop {
        if let Some(status) = churn.try_wait()? {
            break status;
        }
        thread::sleep(Duration::from_millis(200));
        watch.tick(&instances, started)?;
        if last_maps.elapsed() >= MAPS_EVERY {
            maps_during.push((started.elapsed().as_secs_f64(), read_once(&instances)?));
            last_maps = Instant::now();
        }
    };
    let churned = started.elapsed();
    let mut stdout = String::new();
    std::io::Read::read_to_string(
        &mut churn.stdout.take().context("the churn's stdout")?,
        &mut stdout,
    )?;
    if !status.success() {
        bail!("the churn failed: {status}");
    }
    let churn_counts: serde_json::Value =
        serde_json::from_str(&stdout).with_context(|| format!("the churn's counts: {stdout}"))?;
    eprintln!("soak: churn done in {:.0} s: {stdout}", churned.as_secs_f64());

    // The churn's groups expire after their time to live; the frees of its last tasks come an
    // RCU grace period after their exits.
    let settle = Instant::now();
    while settle.elapsed() < GROUP_TTL + 2 * SCRAPE_EVERY {
        thread::sleep(Duration::from_millis(200));
        watch.tick(&instances, started)?;
    }
    let after = boundary(&counters, &instances)?;
    let maps_after = read_maps(&instances)?;
    watch.last(&instances, started)?;
    let serves = instances.each_ref().map(|i| i.args.join(" "));
    let [all, comm] = instances;
    all.stop()?;
    comm.stop()?;

    Ok(SoakReport::new(Soaked {
        churn: Churn::new(&churn_counts, churned)?,
        ends: [before, after],
        maps_before,
        maps_after,
        maps_during,
        groups_before,
        cgroup: cgroup.name.clone(),
        watch,
        serves,
    }))
}

/// The maps of each instance, read [`MAP_READS`] times a second apart.
fn read_maps(instances: &[Instance; 2]) -> anyhow::Result<[Vec<Occupancy>; 2]> {
    let mut reads = [Vec::new(), Vec::new()];
    for i in 0..MAP_READS {
        if i > 0 {
            thread::sleep(Duration::from_secs(1));
        }
        for (reads, instance) in reads.iter_mut().zip(instances) {
            reads.push(instance.occupancy()?);
        }
    }
    Ok(reads)
}

fn read_once(instances: &[Instance; 2]) -> anyhow::Result<[BTreeMap<String, u64>; 2]> {
    Ok([instances[0].occupancy()?.entries, instances[1].occupancy()?.entries])
}

/// The counts at one end of the soak: the perf counts read around the kernel side's counters
/// (exits that began), and the kernel side's ends and refusals read around a scrape (exits
/// accounted), for each instance.
fn boundary(counters: &Counters, instances: &[Instance; 2]) -> anyhow::Result<Boundary> {
    let perf_before = counters.read()?;
    let began = [instances[0].kernel_counts()?, instances[1].kernel_counts()?];
    let perf_after = counters.read()?;
    // serve reads its ring buffers every 250 ms and publishes a snapshot every second: its
    // scrape holds every record the kernel side had sent before it once it has caught up, which
    // takes longer while the machine is loaded. Waited for, 30 s at most: a record never
    // folded in shows as a failed check.
    thread::sleep(Duration::from_millis(1500));
    let accounted_before = [instances[0].kernel_counts()?, instances[1].kernel_counts()?];
    let caught_up = Instant::now();
    let scrapes = loop {
        let scrapes = [instances[0].scrape()?, instances[1].scrape()?];
        let behind = scrapes.iter().zip(&accounted_before).any(|(scrape, kernel)| {
            let (recorded, lost) = report::recorded_lost(scrape);
            recorded + lost < kernel.accounted()
        });
        if !behind || caught_up.elapsed() > Duration::from_secs(30) {
            break scrapes;
        }
        thread::sleep(Duration::from_millis(500));
    };
    let accounted_after = [instances[0].kernel_counts()?, instances[1].kernel_counts()?];
    Ok(Boundary {
        perf: [perf_before, perf_after],
        began,
        accounted: [0, 1].map(|i| [accounted_before[i], accounted_after[i]]),
        recorded_lost: scrapes.each_ref().map(report::recorded_lost),
        losses: scrapes.each_ref().map(report::losses_by_cause),
    })
}

/// What the scrapes during the soak found: series that went down, promtool's complaints,
/// serve's resident memory over time.
pub struct Watch {
    previous: [Option<Scrape>; 2],
    last_scrape: Option<Instant>,
    pub scrapes: usize,
    pub decreases: Vec<String>,
    pub promtool: Vec<String>,
    pub promtool_runs: usize,
    /// (seconds since the churn started, bytes) of each instance.
    pub rss: [Vec<(f64, f64)>; 2],
    pub groups_after: f64,
    pub group_names_after: Vec<String>,
    out_dir: PathBuf,
}

impl Watch {
    fn new(instances: &[Instance; 2], out_dir: &Path) -> anyhow::Result<Self> {
        let mut watch = Self {
            previous: [None, None],
            last_scrape: None,
            scrapes: 0,
            decreases: Vec::new(),
            promtool: Vec::new(),
            promtool_runs: 0,
            rss: [Vec::new(), Vec::new()],
            groups_after: 0.0,
            group_names_after: Vec::new(),
            out_dir: out_dir.to_owned(),
        };
        watch.scrape(instances, None, false)?;
        Ok(watch)
    }

    /// Scrapes both serves when it is time.
    fn tick(&mut self, instances: &[Instance; 2], started: Instant) -> anyhow::Result<()> {
        if self.last_scrape.is_some_and(|t| t.elapsed() < SCRAPE_EVERY) {
            return Ok(());
        }
        let promtool = self.scrapes.is_multiple_of(PROMTOOL_EVERY);
        self.scrape(instances, Some(started), promtool)
    }

    /// The last scrape, after the soak, checked by promtool: what groups are left.
    fn last(&mut self, instances: &[Instance; 2], started: Instant) -> anyhow::Result<()> {
        self.scrape(instances, Some(started), true)?;
        let all = self.previous[0].as_ref().context("a scrape")?;
        self.groups_after = all.sum("exitprof_groups");
        self.group_names_after = all
            .label_values("exitprof_exit_stage_latency_seconds_count", "group")
            .into_iter()
            .collect();
        Ok(())
    }

    fn scrape(
        &mut self,
        instances: &[Instance; 2],
        started: Option<Instant>,
        promtool: bool,
    ) -> anyhow::Result<()> {
        self.last_scrape = Some(Instant::now());
        for (i, instance) in instances.iter().enumerate() {
            let scrape = instance.scrape()?;
            if let Some(previous) = &self.previous[i] {
                let expired = scrape.sum("exitprof_groups_expired_total")
                    > previous.sum("exitprof_groups_expired_total");
                for decrease in scrape.decreases_since(previous, expired) {
                    self.decreases.push(format!("{}: {decrease}", instance.name));
                }
            }
            if let Some(started) = started {
                let rss = scrape.sum("process_resident_memory_bytes");
                self.rss[i].push((started.elapsed().as_secs_f64(), rss));
            }
            if promtool {
                self.promtool_runs += 1;
                if let Some(complaint) = promtool_check(&scrape.text, &self.out_dir)? {
                    self.promtool.push(format!("{}: {complaint}", instance.name));
                }
            }
            self.previous[i] = Some(scrape);
        }
        self.scrapes += 1;
        Ok(())
    }
}

/// `promtool check metrics` of a scrape: what it complains of, if anything.
fn promtool_check(text: &str, out_dir: &Path) -> anyhow::Result<Option<String>> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .current_dir(out_dir)
        .spawn()
        .context("running promtool (Debian's prometheus package)")?;
    child.stdin.take().context("promtool's stdin")?.write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((!out.status.success() || !said.trim().is_empty()).then(|| said.trim().to_owned()))
}
