//! One profiled run, end to end: check the request, plan, attach, start or find the target,
//! collect, detach.

pub mod own_cost;

use std::{
    collections::HashSet,
    future::Future,
    os::fd::OwnedFd,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use exitprof_common::{sizes::COMM_LEN, tracked};
use serde::Serialize;

use crate::{
    analysis::{blocking::BlockedIn, deferred::DeferredWork, profile::Profile, session::Session},
    cli::{ProbeArgs, RunArgs, Storm, Target, UsageError},
    export,
    export::ExportTarget,
    kernel::{KernelFacts, kallsyms::Kallsyms, tracefs},
    probes::{
        load,
        load::{LoadOptions, Probes, ProgramCost},
        maps,
        maps::{KernelLosses, RecordStream, monotonic_ns},
        plan::{AttachMode, Plan, Planned, Wants},
        privileges,
    },
    report::{progress, progress::Progress},
    run::own_cost::{CpuTime, OwnCost},
    target::{
        pidfd::PidFd,
        signals::{Signals, signal_name},
        watch, workload,
        workload::{ChildOutcome, Killer, Workload, limits, limits::SystemLimits, threads},
    },
};

/// Kernel stacks reported where exits blocked.
pub const BLOCKED_IN_SHOWN: usize = 5;

/// How often records are read from the ring buffers, unless one fills up first.
const READ_INTERVAL: Duration = Duration::from_millis(20);

/// How long to wait, after the target ended, for its last exits to reach their final switch.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Most threads in one burst when measuring how fast this machine can run a storm.
const BURST_THREADS: u32 = 1000;

/// Everything one run produced.
pub struct RunOutcome {
    pub plan: Plan,
    pub target: Target,
    /// --duration, for targets that do not end by themselves.
    pub duration: Option<Duration>,
    pub expected_exits: Option<u64>,
    /// How exitprof's children ended, for targets it started.
    pub child: Option<ChildOutcome>,
    /// From the start of the target (or of watching it) to its end.
    pub elapsed: Duration,
    /// When the run started (wall clock), for the exports.
    pub started_at: SystemTime,
    /// What ended the run.
    pub ended: Ended,
    /// For --rate: the fastest rate bursts of the storm's threads reached before attaching.
    pub burst_rate: Option<f64>,
    pub profile: Profile,
    pub deferred: DeferredWork,
    /// Where exits blocked, most blocked time first.
    pub blocked_in: Vec<BlockedIn>,
    pub losses: Losses,
    /// With --bpf-stats: each program's runs and run time while the target ran.
    pub kernel_cost: Option<Vec<ProgramCost>>,
    /// The signal (SIGINT or SIGTERM) that cut a workload short, if one did.
    pub interrupted: Option<i32>,
    /// What exitprof itself used, up to the end of the run.
    pub own_cost: OwnCost,
}

/// What ended a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ended {
    /// The workload's children ended.
    #[serde(rename = "workload-ended")]
    Workload,
    /// The watched process exited.
    ProcessExited,
    /// --duration elapsed.
    Duration,
    /// SIGINT or SIGTERM.
    Signal,
}

/// Every way an exit, or a part of one, can be missing from the profile.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Losses {
    #[serde(flatten)]
    pub kernel: KernelLosses,
    /// Records that could not be decoded.
    pub undecodable: u64,
    /// Exits still in progress when the run ended.
    pub unfinished: u64,
    /// Probe hits that did not fit in their exit's record.
    pub hits: u64,
    /// Probe hits the kernel dropped (kprobe misses, BPF recursion): their exits are recorded,
    /// but with a point missing.
    pub probe_misses: u64,
}

impl Losses {
    /// Exits lost, in total.
    pub fn exits(&self) -> u64 {
        self.kernel.exits() + self.undecodable + self.unfinished
    }

    /// Every cause: (JSON key, what it means, count).
    pub fn by_cause(&self) -> [(&'static str, &'static str, u64); 9] {
        [
            ("ringbuf_full", "ring buffer full", self.kernel.ringbuf_full),
            ("state_map_full", "state map full", self.kernel.state_map_full),
            ("stale_records", "ends never seen", self.kernel.stale_records),
            ("undecodable", "undecodable", self.undecodable),
            ("unfinished", "unfinished", self.unfinished),
            ("hits", "probe hits over the per-exit limit", self.hits),
            ("probe_misses", "probe hits missed by the kernel", self.probe_misses),
            ("tracked_map_full", "forks not followed", self.kernel.tracked_map_full),
            (
                "deferred_ringbuf_full",
                "deferred-work records dropped",
                self.kernel.deferred_ringbuf_full,
            ),
        ]
    }
}

/// Checks everything that can be checked before loading anything, export paths included: a run
/// must not be lost to a file it cannot write at the end.
pub fn preflight(exports: &[ExportTarget]) -> anyhow::Result<()> {
    load::ensure_object_embedded()?;
    privileges::check()?;
    for target in exports {
        export::check_writable(&target.path)?;
    }
    Ok(())
}

/// Raises RLIMIT_MEMLOCK for kernels that still charge BPF maps to it (before v5.11); newer
/// kernels charge the memory cgroup, so failing here is fine.
pub fn bump_memlock() {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: a valid rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } != 0 {
        log::debug!(
            "could not raise RLIMIT_MEMLOCK ({}); fine on kernels >= 5.11, which charge BPF \
             memory to the memory cgroup",
            std::io::Error::last_os_error()
        );
    }
}

/// Calibrates the kernel and resolves the probe plan.
pub fn plan(mode: AttachMode, wants: Wants) -> anyhow::Result<(KernelFacts, Plan)> {
    let tracefs = tracefs::ensure_mounted()?;
    let facts = KernelFacts::calibrate(tracefs).context("calibrating kernel features")?;
    let plan = Plan::resolve(&facts, mode, wants)?;
    Ok((facts, plan))
}

/// A target checked against the machine, ready to start or watch.
pub enum Prepared {
    Workload(Workload),
    Pid(u32),
    Comm([u8; COMM_LEN]),
    All,
}

/// Checks the request against the machine before anything is loaded: a storm within the limits,
/// a reachable --rate, a command that exists, a pid that does. Returns the ready target and, for
/// --rate, the burst rate measured.
pub fn prepare(target: &Target) -> anyhow::Result<(Prepared, Option<f64>)> {
    match target {
        Target::Storm(storm) => {
            let limits = SystemLimits::read().context("reading the system's limits")?;
            limits::check(storm, &limits).map_err(|e| UsageError(e.to_string()))?;
            if let Storm::Ipcns(_) = storm
                && !privileges::has_capability(privileges::CAP_SYS_ADMIN)
            {
                anyhow::bail!(
                    "--workload ipcns needs CAP_SYS_ADMIN: its children unshare(CLONE_NEWIPC)"
                );
            }
            let burst_rate = match storm {
                Storm::Threads(p) => p.rate.map(|rate| check_rate(rate, p.threads)).transpose()?,
                _ => None,
            };
            Ok((Prepared::Workload(Workload::Storm(*storm)), burst_rate))
        }
        Target::Command(argv) => {
            let name = &argv[0];
            let path_var = std::env::var_os("PATH");
            let program = workload::command::resolve(name, path_var.as_deref())
                .map_err(|e| UsageError(e.to_string()))?;
            Ok((Prepared::Workload(Workload::Command { program, argv: argv.clone() }), None))
        }
        Target::Pid(pid) => {
            if !watch::process_exists(*pid) {
                return Err(UsageError(format!("--pid {pid}: no such process")).into());
            }
            Ok((Prepared::Pid(*pid), None))
        }
        Target::Comm(name) => {
            let mut comm = [0; COMM_LEN];
            comm[..name.len()].copy_from_slice(name.as_bytes());
            Ok((Prepared::Comm(comm), None))
        }
        Target::All => Ok((Prepared::All, None)),
    }
}

/// Fails when `rate` is beyond what bursts of the storm's threads reach on this machine now,
/// without probes (which only slow exits down). Returns the best burst rate.
fn check_rate(rate: u64, threads: u32) -> anyhow::Result<f64> {
    let burst = threads.min(BURST_THREADS);
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        best = best.max(threads::burst_rate(burst).context("measuring the machine's exit rate")?);
    }
    log::info!("{burst}-thread bursts without sleeps reach {best:.0} exits/s");
    if rate as f64 > best {
        return Err(UsageError(format!(
            "--rate {rate} exits/s is out of reach: bursts of {burst} threads with no sleep \
             reached at most {best:.0} exits/s on this machine just now (without probes, which \
             only slow exits down); ask for less, or use --stagger-us 0 to run as fast as it goes"
        ))
        .into());
    }
    Ok(best)
}

/// The probe plan to use for `target`.
pub fn plan_for(target: &Target, probes: &ProbeArgs) -> anyhow::Result<(KernelFacts, Plan)> {
    let driven = matches!(target, Target::Storm(_) | Target::Command(_));
    let wants = Wants {
        // Following IPC namespace frees costs a probe on every kfree in tracepoint mode: only
        // for the storm that makes them.
        ipc_frees_via_kfree: matches!(target, Target::Storm(Storm::Ipcns(_))),
        syscall_tracepoints: probes.syscall_tracepoints.or(driven),
    };
    let (facts, plan) = plan(probes.attach, wants)?;
    describe_attach(&plan.points);
    Ok((facts, plan))
}

/// exitprof's programs attached, with the ring buffers they fill. Dropping it detaches them.
pub struct Attached {
    pub probes: Probes,
    exits: RecordStream,
    deferred: RecordStream,
    /// Names the kernel stacks the programs take.
    symbols: Arc<Kallsyms>,
}

impl Attached {
    pub fn new(plan: &Plan, facts: &KernelFacts, options: LoadOptions) -> anyhow::Result<Self> {
        let mut probes = load::load_and_attach(plan, facts, options)?;
        let exits = RecordStream::take(&mut probes.ebpf, "EXITS")?;
        let deferred = RecordStream::take(&mut probes.ebpf, "DEFERRED")?;
        Ok(Self { probes, exits, deferred, symbols: facts.kallsyms.clone() })
    }

    /// What the kernel side lost so far.
    pub fn kernel_losses(&self) -> anyhow::Result<(KernelLosses, u64)> {
        Ok((KernelLosses::read(&self.probes.ebpf)?, self.probes.misses()?))
    }

    /// Detaches everything, saying how long it took.
    pub fn detach(self) {
        let detach_start = Instant::now();
        drop(self);
        log::info!("detached in {} ms", detach_start.elapsed().as_millis());
    }
}

/// The load-time options for a run's target.
pub fn load_options(prepared: &Prepared, args: &RunArgs) -> LoadOptions {
    LoadOptions {
        trace_all: matches!(prepared, Prepared::All),
        target_comm: match prepared {
            Prepared::Comm(comm) => *comm,
            _ => [0; COMM_LEN],
        },
        ringbuf_bytes: args.ringbuf_bytes,
        kretprobe_maxactive: args.probes.kretprobe_maxactive,
        block_stacks: !args.probes.no_block_stacks,
    }
}

/// Profiles one run.
pub async fn run(args: RunArgs, exports: &[ExportTarget]) -> anyhow::Result<RunOutcome> {
    // First: a signal while exitprof loads must not kill it with a workload waiting at its
    // gate and probes half attached; it ends the run by the normal path as soon as it starts.
    let mut signals = Signals::new()?;
    let target = args.target();
    let (prepared, burst_rate) = prepare(&target)?;
    preflight(exports)?;
    bump_memlock();
    let (facts, plan) = plan_for(&target, &args.probes)?;
    let mut attached = Attached::new(&plan, &facts, load_options(&prepared, &args))?;

    let mut session = Session::new(&plan);
    let started_at = SystemTime::now();
    let expected_exits = match &target {
        Target::Storm(storm) => Workload::Storm(*storm).expected_exits(),
        _ => None,
    };
    let mut progress = Progress::new(expected_exits, !args.json);
    let cost_meter = args.bpf_stats.then(|| CostMeter::start(&attached.probes)).transpose()?;
    let cpu_before = CpuTime::now();
    let started =
        start(prepared, &target, args.duration, args.json, Some(&mut attached.probes.ebpf))?;
    let collected =
        collect_until(started, Some(&mut attached), &mut session, &mut signals, &mut progress)
            .await?;
    let collecting = CpuTime::now().since(cpu_before);
    let kernel_cost = cost_meter.map(|meter| meter.stop(&attached.probes)).transpose()?;
    let (kernel, probe_misses) = attached.kernel_losses()?;
    attached.detach();

    let Collected { end, interrupted, elapsed, unfinished } = collected;
    let blocked_in = session.blocking.report(BLOCKED_IN_SHOWN);
    let Session { profile, deferred, undecodable, .. } = session;
    let losses = Losses { kernel, undecodable, unfinished, hits: profile.lost_hits, probe_misses };
    let (elapsed, child, ended) = match end {
        // Reaped after exitprof killed it on a signal.
        End::Reaped(child) if interrupted.is_some() => (child.elapsed, Some(child), Ended::Signal),
        End::Reaped(child) => (child.elapsed, Some(child), Ended::Workload),
        End::ProcessExited => (elapsed, None, Ended::ProcessExited),
        End::Elapsed => (elapsed, None, Ended::Duration),
        End::Signal => (elapsed, None, Ended::Signal),
    };
    Ok(RunOutcome {
        plan,
        target,
        duration: args.duration,
        expected_exits,
        child,
        elapsed,
        started_at,
        ended,
        burst_rate,
        profile,
        deferred,
        blocked_in,
        losses,
        kernel_cost,
        interrupted,
        own_cost: OwnCost::now(collecting),
    })
}

/// The kernel counting the runs and run time of exitprof's programs (--bpf-stats), from
/// [`CostMeter::start`] to [`CostMeter::stop`].
struct CostMeter {
    /// Keeps BPF run-time statistics on while open; closing it, even by exitprof dying, turns
    /// them back off unless something else holds them on.
    _stats: OwnedFd,
    /// Each program's counts when the meter started (zero unless statistics were already on).
    start: Vec<ProgramCost>,
}

impl CostMeter {
    fn start(probes: &Probes) -> anyhow::Result<Self> {
        let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .context("enabling BPF run-time statistics (BPF_ENABLE_STATS, Linux 5.8+)")?;
        let start = probes.costs()?;
        Ok(Self { _stats: stats, start })
    }

    /// Each program's runs and run time since the start.
    fn stop(self, probes: &Probes) -> anyhow::Result<Vec<ProgramCost>> {
        let now = probes.costs()?;
        Ok(now
            .into_iter()
            .zip(&self.start)
            .map(|(now, start)| ProgramCost {
                runs: now.runs.saturating_sub(start.runs),
                run_ns: now.run_ns.saturating_sub(start.run_ns),
                program: now.program,
            })
            .collect())
    }
}

/// What collecting a target's records found.
pub struct Collected {
    pub end: End,
    /// The signal that stopped exitprof's children, if one did.
    pub interrupted: Option<i32>,
    /// From the start of collecting to the end of the target.
    pub elapsed: Duration,
    /// Exits of the target still in progress when collecting stopped.
    pub unfinished: u64,
}

/// Collects records until the target ends (or a signal stops exitprof's children), then until
/// its last exits reach their final switch-out and the deferred work they caused has run.
/// Without probes attached it only waits for the target.
pub async fn collect_until(
    started: Started,
    attached: Option<&mut Attached>,
    session: &mut Session,
    signals: &mut Signals,
    progress: &mut Progress,
) -> anyhow::Result<Collected> {
    let Started { mut end, killer } = started;
    let begin = Instant::now();
    // A session can collect several targets in turn (compare): each is collected in full.
    session.stop_ns = u64::MAX;
    let (mut probes, mut exits, mut deferred, symbols) = match attached {
        Some(a) => (Some(&a.probes), Some(&mut a.exits), Some(&mut a.deferred), Some(&a.symbols)),
        None => (None, None, None, None),
    };
    let mut ticker = tokio::time::interval(progress::INTERVAL);
    // Records do not wake exitprof one by one (that would put it on a CPU for every exit of the
    // storm it measures): they are read on this beat, or when a ring buffer fills up.
    let mut reads = tokio::time::interval(READ_INTERVAL);
    reads.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut interrupted = None;
    let end = loop {
        tokio::select! {
            _ = reads.tick() => {
                drain(exits.as_deref_mut(), |b| session.exit_record(b));
                drain(deferred.as_deref_mut(), |b| session.deferred_record(b));
            }
            ready = ready(exits.as_deref_mut()) => {
                ready?;
                drain(exits.as_deref_mut(), |b| session.exit_record(b));
            }
            ready = ready(deferred.as_deref_mut()) => {
                ready?;
                drain(deferred.as_deref_mut(), |b| session.deferred_record(b));
            }
            ended = &mut end => break ended?,
            signal = signals.next(), if interrupted.is_none() => {
                let Some(killer) = &killer else { break End::Signal };
                progress.finish();
                eprintln!("exitprof: {}: stopping the workload; partial results follow", signal_name(signal));
                interrupted = Some(signal);
                killer.kill();
            }
            _ = ticker.tick(), if progress.is_shown() => progress.update(session.profile.exits),
        }
    };
    progress.finish();
    let elapsed = begin.elapsed();
    // Exits that start from now on are outside the run.
    let stop_ns = monotonic_ns();
    session.stop_ns = stop_ns;
    let Some(probes) = probes.take() else {
        return Ok(Collected { end, interrupted, elapsed, unfinished: 0 });
    };

    // The target has ended, but its last tasks may not have switched out for good yet, and
    // deferred work (RCU callbacks, the free_ipc kworker) runs later still.
    let exclusion = session.exclusion.clone();
    let keep = |tgid| !exclusion.excludes(tgid);
    let settle_start = Instant::now();
    loop {
        drain(exits.as_deref_mut(), |b| session.exit_record(b));
        drain(deferred.as_deref_mut(), |b| session.deferred_record(b));
        let settled = maps::in_progress(&probes.ebpf, stop_ns, keep)? == 0
            && session.deferred.awaiting_task_free() == 0
            && !session.deferred.awaiting_ipc_run();
        if settled || settle_start.elapsed() >= SETTLE_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let unfinished = maps::in_progress(&probes.ebpf, stop_ns, keep)? as u64;
    // Stack ids belong to this loaded object: name the stacks while it is loaded.
    if let Some(symbols) = symbols {
        session.blocking.name_stacks(|id| maps::stack_frames(&probes.ebpf, symbols, id));
    }
    Ok(Collected { end, interrupted, elapsed, unfinished })
}

/// Waits for records on a stream; forever when there is none.
async fn ready(stream: Option<&mut RecordStream>) -> anyhow::Result<()> {
    match stream {
        Some(stream) => stream.ready().await,
        None => std::future::pending().await,
    }
}

fn drain(stream: Option<&mut RecordStream>, f: impl FnMut(&[u8])) {
    if let Some(stream) = stream {
        stream.drain(f);
    }
}

/// The target, started or found, with what ends the run.
pub struct Started {
    end: Pin<Box<dyn Future<Output = anyhow::Result<End>>>>,
    /// Kills exitprof's children, for targets it started.
    killer: Option<Killer>,
}

/// Starts the workload's children, or begins to watch processes exitprof did not start. With
/// the loaded object (`ebpf`), their exits are recorded.
pub fn start(
    prepared: Prepared,
    target: &Target,
    duration: Option<Duration>,
    quiet_stdout: bool,
    mut ebpf: Option<&mut aya::Ebpf>,
) -> anyhow::Result<Started> {
    match prepared {
        Prepared::Workload(workload) => {
            let gated = workload::spawn(&workload, quiet_stdout)?;
            if let Some(ebpf) = ebpf.as_deref_mut() {
                let role = match workload {
                    Workload::Storm(_) => tracked::DRIVER,
                    Workload::Command { .. } => tracked::FOLLOWED,
                };
                maps::track(ebpf, &gated.pids(), role)?;
            }
            let running = gated.open()?;
            let killer = Some(running.killer());
            let waiter = tokio::task::spawn_blocking(move || running.wait());
            let end = Box::pin(async move {
                Ok(End::Reaped(waiter.await.context("workload waiter panicked")??))
            });
            Ok(Started { end, killer })
        }
        Prepared::Pid(pid) => {
            let exited = PidFd::open(pid)
                .with_context(|| format!("pid {pid} ended before exitprof could watch it"))?;
            let ebpf = ebpf.context("watching a process needs exitprof's probes")?;
            let followed = track_tree(ebpf, pid)?;
            eprintln!(
                "exitprof: watching pid {pid} and its descendants ({followed} now){}",
                until(duration, " or until it exits")
            );
            let end = Box::pin(async move {
                tokio::select! {
                    r = exited.exited() => {
                        r.map(|()| End::ProcessExited).context("waiting for the watched process")
                    }
                    () = sleep_or_forever(duration) => Ok(End::Elapsed),
                }
            });
            Ok(Started { end, killer: None })
        }
        Prepared::Comm(_) | Prepared::All => {
            let what = match target {
                Target::Comm(name) => format!("tasks named {name:?}"),
                _ => "every exit on the machine".to_owned(),
            };
            eprintln!("exitprof: watching {what}{}", until(duration, ""));
            let end = Box::pin(async move {
                sleep_or_forever(duration).await;
                Ok(End::Elapsed)
            });
            Ok(Started { end, killer: None })
        }
    }
}

/// How the main loop ended.
pub enum End {
    Reaped(ChildOutcome),
    ProcessExited,
    Elapsed,
    Signal,
}

/// Tracks `pid` and every process below it. Repeats the walk until it finds nothing new: a
/// process forked by one found late may have escaped the kernel-side fork tracking. Returns how
/// many descendants were found.
fn track_tree(ebpf: &mut aya::Ebpf, pid: u32) -> anyhow::Result<usize> {
    maps::track(ebpf, &[pid], tracked::FOLLOWED)?;
    let mut followed = HashSet::from([pid]);
    loop {
        let found = watch::descendants(pid)
            .with_context(|| format!("reading /proc for the descendants of {pid}"))?;
        let new: Vec<u32> = found.into_iter().filter(|p| !followed.contains(p)).collect();
        if new.is_empty() {
            return Ok(followed.len() - 1);
        }
        maps::track(ebpf, &new, tracked::FOLLOWED)?;
        followed.extend(new);
    }
}

fn until(duration: Option<Duration>, or_else: &str) -> String {
    match duration {
        Some(d) => format!(" for {:.1} s{or_else} (Ctrl-C stops it earlier)", d.as_secs_f64()),
        None => format!(" until Ctrl-C{or_else}"),
    }
}

async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

fn describe_attach(points: &[Planned]) {
    let mut by_how: Vec<(String, usize)> = Vec::new();
    for p in points {
        let how = p.how.to_string();
        match by_how.iter_mut().find(|(h, _)| *h == how) {
            Some((_, n)) => *n += 1,
            None => by_how.push((how, 1)),
        }
    }
    let kinds: Vec<String> = by_how.iter().map(|(h, n)| format!("{h}: {n}")).collect();
    log::info!("attaching {} probe points ({})", points.len(), kinds.join(", "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_causes_are_the_document_keys() {
        let losses = Losses::default();
        let doc = serde_json::to_value(losses).unwrap();
        let keys: HashSet<&str> = doc.as_object().unwrap().keys().map(String::as_str).collect();
        let causes: HashSet<&str> = losses.by_cause().iter().map(|&(key, _, _)| key).collect();
        assert_eq!(causes, keys);
    }
}
