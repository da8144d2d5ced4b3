//! `cargo xtask bench-always-on`: what an always-on `exitprof serve --all` costs a node, as a
//! formula a person can fill in with their node's rates, and that formula checked.
//!
//! serve runs as the DaemonSet and the systemd unit run it (`--all --group-by cgroup`), with
//! `--bpf-stats`, so that its `/metrics` carries each program's runs and run time as the kernel
//! counts them. Its programs run on two kinds of event of the whole machine: context switches
//! (`sched_switch`) and exits (the rest, and the exiting tasks' extra switches). So:
//!
//! ```text
//! ns of BPF per second = ns per switch × switches/s + ns per exit × exits/s
//! ```
//!
//! 1. **ns per switch**: `sched_switch`'s ns per run while a pipe ping-pong switches and
//!    nothing exits;
//! 2. **ns per exit**: all programs' run time while storms of threads and processes exit, less
//!    the switches at the first price, over the exits (`processes` of `/proc/stat`: tasks made,
//!    which in a steady state is tasks exiting);
//! 3. **the check**: a mixed load with other proportions (the ping-pong paced, thread bursts,
//!    short commands) for a minute: the programs' run time measured against the formula's from
//!    the minute's switches (`ctxt` of `/proc/stat`) and tasks made: the figures node_exporter
//!    exports as `node_context_switches_total` and `node_forks_total`.
//!
//! serve samples no stacks: a one-shot run's on-CPU sampling adds a third term, ns per tick
//! × ticks/s, priced by `cargo xtask bench` (`sample_cpu`). Writes target/always-on.json.

use std::{
    collections::BTreeMap,
    fs,
    io::{Read as _, Write as _},
    net::TcpStream,
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;
use serde::Serialize;

use super::background::Background;
use crate::measure::compile_c;

#[derive(Args)]
pub struct AlwaysOnArgs {
    /// Seconds of the mixed load the formula is checked on.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(10..))]
    pub seconds: u64,
    /// Seconds of each load that prices an event (switches, exits).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..))]
    pub price_seconds: u64,
}

/// Where the benchmark's serve listens: loopback, off the default port.
const LISTEN: &str = "127.0.0.1:19177";

/// The line serve prints once it collects.
const SERVING: &str = "exitprof: serving metrics";

/// The machine's event counts and serve's program counts at one instant.
#[derive(Clone, Default)]
struct Counts {
    /// `ctxt` of /proc/stat.
    switches: u64,
    /// `processes` of /proc/stat: tasks made since boot.
    tasks_made: u64,
    /// Each program's (runs, run time in ns), from serve's /metrics.
    programs: BTreeMap<String, (u64, u64)>,
}

impl Counts {
    fn now() -> anyhow::Result<Self> {
        let stat = fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let field = |name: &str| -> anyhow::Result<u64> {
            stat.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                .with_context(|| format!("/proc/stat has no {name}"))
        };
        let metrics = scrape()?;
        Ok(Self {
            switches: field("ctxt")?,
            tasks_made: field("processes")?,
            programs: program_counts(&metrics)?,
        })
    }

    /// What happened from `self` to `later`.
    fn until(&self, later: &Self) -> Interval {
        let programs = later
            .programs
            .iter()
            .map(|(name, &(runs, ns))| {
                let (runs0, ns0) = self.programs.get(name).copied().unwrap_or_default();
                (name.clone(), (runs - runs0, ns - ns0))
            })
            .collect();
        Interval {
            switches: later.switches - self.switches,
            exits: later.tasks_made - self.tasks_made,
            programs,
        }
    }
}

/// Events and program run time over an interval.
#[derive(Debug, Serialize)]
pub struct Interval {
    pub switches: u64,
    /// Tasks made: in a steady state, tasks exiting.
    pub exits: u64,
    /// Each program's (runs, ns).
    pub programs: BTreeMap<String, (u64, u64)>,
}

impl Interval {
    fn program_ns(&self) -> u64 {
        self.programs.values().map(|&(_, ns)| ns).sum()
    }
}

/// GET /metrics of the benchmark's serve.
fn scrape() -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(LISTEN).with_context(|| format!("connecting {LISTEN}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {LISTEN}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response).context("reading /metrics")?;
    let (head, body) = response.split_once("\r\n\r\n").context("an HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("/metrics answered {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_owned())
}

/// Each program's runs and run time (ns) in a /metrics document of `serve --bpf-stats`.
fn program_counts(metrics: &str) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
    let mut programs: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Some(program) = series.split("program=\"").nth(1).and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let entry = programs.entry(program.to_owned()).or_default();
        if series.starts_with("exitprof_bpf_program_runs_total{") {
            entry.0 = value.parse().with_context(|| format!("a count: {line}"))?;
        } else if series.starts_with("exitprof_bpf_program_run_seconds_total{") {
            let seconds: f64 = value.parse().with_context(|| format!("seconds: {line}"))?;
            entry.1 = (seconds * 1e9).round() as u64;
        }
    }
    if programs.is_empty() {
        bail!(
            "serve's /metrics has no exitprof_bpf_program_* series (was it run with --bpf-stats?)"
        );
    }
    Ok(programs)
}

/// Programs that load the machine in the background until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<anyhow::Result<()>>>,
}

impl Load {
    fn new() -> Self {
        Self { stop: Arc::new(AtomicBool::new(false)), threads: Vec::new() }
    }

    /// Runs `argv` again and again, `pause` apart, until the load stops.
    fn repeat(mut self, argv: Vec<String>, pause: Duration) -> Self {
        let stop = Arc::clone(&self.stop);
        self.threads.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let status = Command::new(&argv[0]).args(&argv[1..]).status()?;
                if !status.success() {
                    bail!("{argv:?}: {status}");
                }
                thread::sleep(pause);
            }
            Ok(())
        }));
        self
    }

    /// Lets the load run for `seconds`, and what serve and the machine counted meanwhile.
    fn measure(self, seconds: u64) -> anyhow::Result<Interval> {
        // A second to settle: every program started, serve's snapshot of the start taken.
        thread::sleep(Duration::from_secs(1));
        let start = Counts::now()?;
        let started = Instant::now();
        thread::sleep(Duration::from_secs(seconds));
        // serve publishes its counts once a second: wait for the next snapshot.
        thread::sleep(Duration::from_millis(1100));
        let end = Counts::now()?;
        let elapsed = started.elapsed();
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        }
        let interval = start.until(&end);
        log_rates(&interval, elapsed);
        Ok(interval)
    }
}

fn log_rates(interval: &Interval, elapsed: Duration) {
    let s = elapsed.as_secs_f64();
    eprintln!(
        "bench: {:.0} switches/s, {:.0} exits/s, {:.2} ms of BPF a second",
        interval.switches as f64 / s,
        interval.exits as f64 / s,
        interval.program_ns() as f64 / s / 1e6
    );
}

/// The formula's prices, and the mixed minute it is checked on.
#[derive(Debug, Serialize)]
pub struct AlwaysOnReport {
    pub kernel: String,
    pub cpus: usize,
    pub serve_args: Vec<String>,
    /// `sched_switch`'s ns per run, nothing exiting.
    pub ns_per_switch: f64,
    /// All programs' ns per exit, the switches at `ns_per_switch` taken off.
    pub ns_per_exit: f64,
    pub pricing_switches: Interval,
    pub pricing_exits: Interval,
    pub check_seconds: u64,
    pub check: Interval,
    /// What the formula gives for the check's events, ns.
    pub predicted_ns: f64,
    /// What the programs ran, ns.
    pub measured_ns: u64,
    /// measured / predicted - 1.
    pub error: f64,
    /// The measured run time as a share of the machine's CPU time over the check.
    pub cpu_share: f64,
}

pub fn bench_always_on(args: &AlwaysOnArgs) -> anyhow::Result<()> {
    let (root, out_dir) = super::prepare("bench-always-on")?;
    let report = measure(&root, &out_dir, args)?;
    print!("{}", render(&report));
    let path = root.join("target/always-on.json");
    fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

fn measure(root: &Path, out_dir: &Path, args: &AlwaysOnArgs) -> anyhow::Result<AlwaysOnReport> {
    let compiled = |source: &str| -> anyhow::Result<String> {
        Ok(compile_c(&root.join(source), out_dir, &[])?.display().to_string())
    };
    let pingpong = compiled("xtask/bench/pingpong.c")?;
    let threads = compiled("xtask/bench/threads_ref.c")?;
    let serve_args: Vec<String> =
        ["serve", "--all", "--group-by", "cgroup", "--bpf-stats", "--listen", LISTEN]
            .map(str::to_owned)
            .into();
    let binary = root.join("target/release/exitprof");
    let serve = Background::start(Command::new(&binary).args(&serve_args), SERVING)?;
    let argv = |program: &str, args: &[&str]| -> Vec<String> {
        std::iter::once(program.to_owned()).chain(args.iter().map(|a| (*a).to_owned())).collect()
    };
    let idle = Duration::ZERO;

    eprintln!("bench: pricing a switch: a pipe ping-pong on one CPU, {} s", args.price_seconds);
    let pricing_switches =
        Load::new().repeat(argv(&pingpong, &["100000", "0"]), idle).measure(args.price_seconds)?;
    let (runs, ns) = pricing_switches
        .programs
        .get("sched_switch")
        .copied()
        .context("serve has no sched_switch program")?;
    let ns_per_switch = ns as f64 / runs as f64;

    eprintln!("bench: pricing an exit: thread storms and short commands, {} s", args.price_seconds);
    let pricing_exits = Load::new()
        .repeat(argv(&threads, &["1000", "1", "0"]), idle)
        .repeat(argv("/bin/true", &[]), idle)
        .measure(args.price_seconds)?;
    let ns_per_exit = (pricing_exits.program_ns() as f64
        - ns_per_switch * pricing_exits.switches as f64)
        / pricing_exits.exits as f64;

    eprintln!("bench: checking: a mixed load, {} s", args.seconds);
    let check = Load::new()
        .repeat(argv(&pingpong, &["20000", "0"]), Duration::from_millis(200))
        .repeat(argv(&threads, &["50", "1", "0"]), Duration::from_millis(100))
        .repeat(argv("/bin/sh", &["-c", "true"]), Duration::from_millis(20))
        .measure(args.seconds)?;
    serve.stop()?;

    let predicted_ns = ns_per_switch * check.switches as f64 + ns_per_exit * check.exits as f64;
    let measured_ns = check.program_ns();
    let cpus = thread::available_parallelism().map_or(1, usize::from);
    Ok(AlwaysOnReport {
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_owned(),
        cpus,
        serve_args,
        ns_per_switch,
        ns_per_exit,
        pricing_switches,
        pricing_exits,
        check_seconds: args.seconds,
        predicted_ns,
        measured_ns,
        error: measured_ns as f64 / predicted_ns - 1.0,
        cpu_share: measured_ns as f64 / (args.seconds as f64 * cpus as f64 * 1e9),
        check,
    })
}

fn render(r: &AlwaysOnReport) -> String {
    let s = r.check_seconds as f64;
    let per_cpu = |n: u64| n as f64 / s / r.cpus as f64;
    let mut out = format!(
        "what `exitprof {}` costs a node: Linux {}, {} CPUs\n\n",
        r.serve_args.join(" "),
        r.kernel,
        r.cpus
    );
    out += &format!(
        "  ns of BPF per CPU-second = {:.0} ns x switches/s + {:.0} ns x exits/s (per CPU)\n",
        r.ns_per_switch, r.ns_per_exit
    );
    out += &format!(
        "  priced on: a ping-pong ({} switches, sched_switch alone), thread storms and short \
         commands ({} exits, {} switches)\n\n",
        r.pricing_switches.switches, r.pricing_exits.exits, r.pricing_exits.switches
    );
    out += &format!(
        "checked on {} s of a mixed load (ping-pong, thread bursts, commands):\n",
        r.check_seconds
    );
    out += &format!(
        "  per CPU: {:.0} switches/s, {:.0} exits/s\n",
        per_cpu(r.check.switches),
        per_cpu(r.check.exits)
    );
    out += &format!(
        "  the formula: {:.3} ms of BPF per CPU-second; measured: {:.3} ms ({:+.1}%)\n",
        r.predicted_ns / s / r.cpus as f64 / 1e6,
        per_cpu(r.measured_ns) / 1e6,
        r.error * 100.0
    );
    out +=
        &format!("  exitprof's programs took {:.3}% of the node's CPU time\n", r.cpu_share * 100.0);
    out += "  by program (runs, ns per run):\n";
    for (name, &(runs, ns)) in &r.check.programs {
        if runs > 0 {
            out += &format!("    {name:<24} {runs:>10} {:>8.0} ns\n", ns as f64 / runs as f64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_counts_are_read_from_metrics() {
        let metrics = "# HELP exitprof_bpf_program_runs_total Runs.\n\
            exitprof_bpf_program_runs_total{kernel=\"6.18\",program=\"sched_switch\"} 40\n\
            exitprof_bpf_program_run_seconds_total{kernel=\"6.18\",program=\"sched_switch\"} 0.0000012\n\
            exitprof_exits_recorded_total{kernel=\"6.18\"} 3\n";
        let counts = program_counts(metrics).unwrap();
        assert_eq!(counts["sched_switch"], (40, 1200));
        assert_eq!(counts.len(), 1);
        assert!(program_counts("exitprof_exits_recorded_total 3\n").is_err());
    }
}
