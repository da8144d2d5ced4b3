//! Running exitprof from the benchmark: profiled storms measured from the outside, comparisons,
//! and exitprof attached in the background to a target that never exits.

use std::{path::PathBuf, process::Command};

use anyhow::Context as _;
use serde::Deserialize;

use super::background::Background;
use crate::measure::{Finished, measure_captured};

/// The name `--comm` watches while exitprof sits attached without a target: no task has it.
pub const NOBODY: &str = "no-such-task";

/// What exitprof prints on stderr once its probes are attached and it watches.
const WATCHING: &str = "exitprof: watching";

/// The exitprof binary under test.
pub struct Exitprof {
    pub binary: PathBuf,
}

/// A storm exitprof drives: its flags, and a name for the table.
#[derive(Clone, Debug)]
pub struct Storm {
    pub name: String,
    pub args: Vec<String>,
    /// Exits it makes.
    pub exits: u64,
}

impl Storm {
    /// The threads storm at stagger 0, its maximum exit rate.
    pub fn threads(threads: u32, reps: u32) -> Self {
        Self {
            name: format!("threads {threads}x{reps} stagger 0"),
            args: words(&format!(
                "--workload threads --threads {threads} --reps {reps} --stagger-us 0"
            )),
            exits: u64::from(threads) * u64::from(reps),
        }
    }

    /// `parallel` sequential fork loops sharing `count` forks.
    pub fn forks(count: u32, parallel: u32) -> Self {
        Self {
            name: format!("fork {count}, {parallel} loops at once"),
            args: words(&format!("--workload fork --count {count} --parallel {parallel}")),
            exits: u64::from(count),
        }
    }
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// The parts of exitprof's `--json` run document the benchmarks read.
#[derive(Debug, Deserialize)]
pub struct RunDoc {
    pub kernel: String,
    pub exits_expected: Option<u64>,
    pub exits_recorded: u64,
    pub lost: u64,
    pub elapsed_s: f64,
    pub user_s: Option<f64>,
    pub sys_s: Option<f64>,
    pub exit_rate: f64,
    pub kernel_cost: Option<KernelCost>,
    pub exitprof: OwnCost,
}

/// `exitprof` of the run document: what exitprof's process used, by its own `getrusage`.
#[derive(Debug, Deserialize)]
pub struct OwnCost {
    /// Over the whole run.
    #[serde(flatten)]
    pub cpu: CpuTime,
    /// While the storm ran and its last records came in.
    pub collecting: CpuTime,
    /// Its peak resident memory, in bytes; `None` where exitprof could not read it.
    pub peak_rss_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct CpuTime {
    pub user_s: f64,
    pub sys_s: f64,
}

/// Exits lost: those exitprof counted as lost, or more if fewer than `expected` were recorded
/// (a loss exitprof did not see is a loss all the same).
pub fn exits_lost(expected: Option<u64>, recorded: u64, lost: u64) -> u64 {
    lost.max(expected.map_or(0, |e| e.saturating_sub(recorded)))
}

impl RunDoc {
    pub fn exits_lost(&self) -> u64 {
        exits_lost(self.exits_expected, self.exits_recorded, self.lost)
    }

    /// CPU time of the storm's processes (`wait4` of exitprof's workload children).
    pub fn storm_cpu_s(&self) -> anyhow::Result<f64> {
        Ok(self.user_s.context("a storm has user time")? + self.sys_s.context("and sys time")?)
    }
}

/// `kernel_cost` of the run document (`--bpf-stats`).
#[derive(Debug, Deserialize)]
pub struct KernelCost {
    pub programs: Vec<ProgramCost>,
    /// All programs' run time over the exits recorded; `None` without exits.
    pub ns_per_exit: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct ProgramCost {
    pub program: String,
    pub runs: u64,
    /// `None` when it never ran.
    pub ns_per_run: Option<f64>,
    /// `None` without exits.
    pub ns_per_exit: Option<f64>,
}

/// The parts of `compare --json` the benchmark reads.
#[derive(Debug, Deserialize)]
pub struct CompareDoc {
    pub on: CompareSide,
    pub off: CompareSide,
}

#[derive(Debug, Deserialize)]
pub struct CompareSide {
    pub runs: Vec<StormRun>,
    pub exits_recorded: u64,
    pub lost: u64,
}

/// One storm of a comparison, as exitprof measured its workload children.
#[derive(Clone, Copy, Debug, Deserialize)]
pub struct StormRun {
    pub user_s: f64,
    pub sys_s: f64,
    pub elapsed_s: f64,
    pub exit_rate: f64,
}

/// A profiled storm: exitprof's process measured from the outside, and its report.
pub struct Profiled {
    pub process: Finished,
    pub doc: RunDoc,
}

impl Exitprof {
    /// `exitprof --json STORM EXTRA`, measured from the outside (peak RSS sampled with
    /// `watch_rss`).
    pub fn profile(
        &self,
        storm: &Storm,
        extra: &[&str],
        watch_rss: bool,
    ) -> anyhow::Result<Profiled> {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--json").args(&storm.args).args(extra);
        let process = measure_captured(&mut cmd, watch_rss)?;
        let doc = serde_json::from_str(&process.stdout)
            .with_context(|| format!("reading the JSON report of {cmd:?}"))?;
        Ok(Profiled { process, doc })
    }

    /// `exitprof compare --toggle probes EXTRA`: `runs` storms with exitprof's probes attached
    /// and as many without, interleaved.
    pub fn compare_probes(
        &self,
        storm: &Storm,
        runs: u32,
        extra: &[&str],
    ) -> anyhow::Result<CompareDoc> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["compare", "--toggle", "probes", "--json", "--runs"])
            .arg(runs.to_string())
            .args(&storm.args)
            .args(extra);
        let finished = measure_captured(&mut cmd, false)?;
        serde_json::from_str(&finished.stdout)
            .with_context(|| format!("reading the JSON report of {cmd:?}"))
    }

    /// exitprof attached, in the background, watching for the exits of tasks that do not
    /// exist: its probes fire for everything else on the machine and record nothing.
    pub fn attach_elsewhere(&self, extra: &[&str]) -> anyhow::Result<Background> {
        self.watch_comm(NOBODY, extra)
    }

    /// exitprof attached, in the background, recording the exits of tasks named `comm`.
    pub fn watch_comm(&self, comm: &str, extra: &[&str]) -> anyhow::Result<Background> {
        Background::start(
            Command::new(&self.binary).args(["--json", "--comm", comm]).args(extra),
            WATCHING,
        )
    }

    /// Only an empty program on `sched_switch`, attached in the background (`exitprof
    /// __floor`): the floor of any program there.
    pub fn attach_floor(&self, extra: &[&str]) -> anyhow::Result<Background> {
        Background::start(Command::new(&self.binary).arg("__floor").args(extra), WATCHING)
    }
}

/// Stops exitprof attached in the background and reads its report.
pub fn report(watching: Background) -> anyhow::Result<RunDoc> {
    let stdout = watching.stop()?;
    serde_json::from_str(&stdout).context("reading the JSON report of the background exitprof")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unrecorded_exits_are_lost_even_when_not_counted() {
        assert_eq!(exits_lost(Some(100), 90, 0), 10);
        assert_eq!(exits_lost(Some(100), 90, 12), 12);
        assert_eq!(exits_lost(Some(100), 101, 0), 0);
        assert_eq!(exits_lost(None, 90, 3), 3);
    }

    #[test]
    fn storms_know_their_exits() {
        let threads = Storm::threads(250, 40);
        assert_eq!(threads.exits, 10_000);
        assert_eq!(
            threads.args.join(" "),
            "--workload threads --threads 250 --reps 40 --stagger-us 0"
        );
        assert_eq!(Storm::forks(10_000, 2).exits, 10_000);
    }
}
