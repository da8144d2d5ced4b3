//! Running exitprof from the benchmark: profiled storms measured from the outside, comparisons,
//! and exitprof attached in the background to a target that never exits.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde::Deserialize;

use crate::measure::{Finished, measure_captured, read_in_background};

/// The name `--comm` watches while exitprof sits attached without a target: no task has it.
pub const NOBODY: &str = "no-such-task";

/// What exitprof prints on stderr once its probes are attached and it watches.
const WATCHING: &str = "exitprof: watching";

/// How long exitprof may take to attach before the benchmark gives up on it.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

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

    /// `exitprof compare --toggle probes`: `runs` storms with exitprof's probes attached and as
    /// many without, interleaved.
    pub fn compare_probes(&self, storm: &Storm, runs: u32) -> anyhow::Result<CompareDoc> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["compare", "--toggle", "probes", "--json", "--runs"])
            .arg(runs.to_string())
            .args(&storm.args);
        let finished = measure_captured(&mut cmd, false)?;
        serde_json::from_str(&finished.stdout)
            .with_context(|| format!("reading the JSON report of {cmd:?}"))
    }

    /// exitprof attached, in the background, watching for the exits of tasks that do not
    /// exist: its probes fire for everything else on the machine and record nothing.
    pub fn attach_elsewhere(&self, extra: &[&str]) -> anyhow::Result<Watching> {
        self.watch_comm(NOBODY, extra)
    }

    /// exitprof attached, in the background, recording the exits of tasks named `comm`.
    pub fn watch_comm(&self, comm: &str, extra: &[&str]) -> anyhow::Result<Watching> {
        let mut child = Command::new(&self.binary)
            .args(["--json", "--comm", comm])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let stderr = child.stderr.take().context("exitprof's stderr")?;
        let stdout = child.stdout.take().context("exitprof's stdout")?;
        let mut watching =
            Watching { child: Some(child), stdout: Some(read_in_background(stdout)) };
        // Everything exitprof says goes on to the benchmark's stderr; the line that says it
        // watches means its probes are attached.
        let (ready, attached) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with(WATCHING) {
                    let _ = ready.send(());
                } else {
                    eprintln!("{line}");
                }
            }
        });
        if attached.recv_timeout(ATTACH_TIMEOUT).is_err() {
            let status = watching.kill();
            bail!("exitprof did not attach within {ATTACH_TIMEOUT:?} ({status})");
        }
        Ok(watching)
    }
}

/// exitprof attached in the background (see [`Exitprof::attach_elsewhere`]); dropping it
/// stops exitprof.
pub struct Watching {
    child: Option<Child>,
    stdout: Option<thread::JoinHandle<std::io::Result<String>>>,
}

impl Watching {
    /// Suspends exitprof's process (SIGSTOP), or resumes it (SIGCONT); its probes stay
    /// attached and go on filling the ring buffers.
    pub fn suspend(&self, suspended: bool) {
        if let Some(child) = &self.child {
            signal(child, if suspended { libc::SIGSTOP } else { libc::SIGCONT });
        }
    }

    /// Stops exitprof as Ctrl-C does (it detaches and reports) and returns its report.
    pub fn stop(mut self) -> anyhow::Result<RunDoc> {
        let mut child = self.child.take().context("exitprof already stopped")?;
        signal(&child, libc::SIGINT);
        let status = child.wait().context("waiting for exitprof")?;
        let stdout = self.stdout.take().context("exitprof's stdout")?;
        let stdout = stdout.join().expect("the stdout reader does not panic")?;
        if !status.success() {
            bail!("exitprof, attached in the background, failed: {status}");
        }
        serde_json::from_str(&stdout).context("reading the JSON report of the background exitprof")
    }

    /// Kills exitprof; says how it ended.
    fn kill(&mut self) -> String {
        let Some(mut child) = self.child.take() else { return "stopped".to_owned() };
        let _ = child.kill();
        child.wait().map_or_else(|e| e.to_string(), |s| s.to_string())
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGCONT);
            signal(&child, libc::SIGINT);
            let _ = child.wait();
        }
    }
}

/// Sends `signal` to our child; exitprof answers SIGINT by detaching and reporting.
fn signal(child: &Child, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
    unsafe { libc::kill(child.id() as i32, signal) };
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
