//! One profiled storm, end to end: plan, attach, drive the workload, collect, detach.

use std::{
    collections::HashSet,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use serde::Serialize;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::{
    cli::{RunArgs, WorkloadKind},
    collect::{self, ExitStream, KernelLosses},
    exits::Exit,
    export::{self, ExportTarget},
    kernel::{KernelFacts, tracefs},
    load::{self, LoadOptions},
    plan::{AttachMode, Plan, Planned},
    privileges,
    profile::Profile,
    workload::{self, ChildOutcome},
};

/// How long to wait, after the workload ended, for its last exits to reach their final switch.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Everything one run produced.
pub struct RunOutcome {
    pub plan: Plan,
    pub args: RunArgs,
    pub expected_exits: u64,
    pub child: ChildOutcome,
    /// Wall-clock time at which the storm started.
    pub started_at: SystemTime,
    pub profile: Profile,
    pub losses: Losses,
    /// The signal (SIGINT or SIGTERM) that cut the run short, if one did.
    pub interrupted: Option<i32>,
}

/// Every way an exit can be missing from the profile.
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
}

impl Losses {
    /// Exits lost, in total.
    pub fn exits(&self) -> u64 {
        self.kernel.exits() + self.undecodable + self.unfinished
    }

    /// Every cause: its key in the JSON document, what it loses, and how many.
    pub fn by_cause(&self) -> [(&'static str, &'static str, u64); 6] {
        [
            ("ringbuf_full", "ring buffer full", self.kernel.ringbuf_full),
            ("state_map_full", "state map full", self.kernel.state_map_full),
            ("undecodable", "undecodable", self.undecodable),
            ("unfinished", "unfinished", self.unfinished),
            ("hits", "probe hits over the per-exit limit", self.hits),
            ("tracked_map_full", "forks not followed", self.kernel.tracked_map_full),
        ]
    }
}

impl RunOutcome {
    /// Exits per second, as the 2006 thread computed it: (created + exited) / elapsed / 2.
    pub fn exit_rate(&self) -> f64 {
        let elapsed_s = self.child.elapsed.as_secs_f64();
        if elapsed_s > 0.0 { self.expected_exits as f64 / elapsed_s } else { 0.0 }
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
fn bump_memlock() {
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
pub fn plan(mode: AttachMode) -> anyhow::Result<(KernelFacts, Plan)> {
    let tracefs = tracefs::ensure_mounted()?;
    let facts = KernelFacts::calibrate(tracefs).context("calibrating kernel features")?;
    let plan = Plan::resolve(&facts, mode)?;
    Ok((facts, plan))
}

/// Profiles one storm.
pub async fn run(args: RunArgs, exports: &[ExportTarget]) -> anyhow::Result<RunOutcome> {
    preflight(exports)?;
    bump_memlock();
    let (facts, plan) = plan(AttachMode::Auto)?;
    let btf = facts.btf.as_ref().context("exitprof needs kernel BTF (CONFIG_DEBUG_INFO_BTF)")?;
    describe_attach(&plan.points);
    let mut probes = load::load_and_attach(
        &plan,
        btf,
        LoadOptions { trace_all: false, ringbuf_bytes: args.ringbuf_bytes },
    )?;
    let mut stream = ExitStream::take(&mut probes.ebpf)?;

    let expected_exits = workload::expectation(&args).exits;
    let gated = workload::spawn(&args)?;
    let driver = gated.pid;
    collect::track(&mut probes.ebpf, driver)?;
    let mut signals = Signals::new()?;
    let running = gated.open()?;
    let started_at = SystemTime::now();
    let driver_kind = args.workload;
    let waiter = tokio::task::spawn_blocking(move || running.wait());
    tokio::pin!(waiter);
    let mut interrupted = None;

    let mut profile = Profile::new(&plan);
    let mut undecodable = 0;
    let mut take = |bytes: &[u8]| match Exit::decode(bytes) {
        // The workload driver's own exit is not part of the storm it drives.
        Ok(exit) if is_driver_exit(driver_kind, driver, &exit) => {}
        Ok(exit) => profile.add(&exit),
        Err(e) => {
            undecodable += 1;
            log::warn!("undecodable exit record: {e}");
        }
    };
    let child = loop {
        tokio::select! {
            batch = stream.next_batch(&mut take) => { batch?; }
            outcome = &mut waiter => break outcome.context("workload waiter panicked")??,
            signal = signals.next(), if interrupted.is_none() => {
                eprintln!("exitprof: {}: stopping the workload; partial results follow", signal_name(signal));
                interrupted = Some(signal);
                running.kill();
            }
        }
    };
    // The workload is reaped, but its last threads may not have switched out for good yet.
    let tgids = HashSet::from([driver]);
    let settle_start = Instant::now();
    while collect::in_progress(&probes.ebpf, &tgids)? > 0 && settle_start.elapsed() < SETTLE_TIMEOUT
    {
        stream.drain(&mut take);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stream.drain(&mut take);
    let unfinished = collect::in_progress(&probes.ebpf, &tgids)? as u64;
    let kernel = KernelLosses::read(&probes.ebpf)?;
    let detach_start = Instant::now();
    drop(stream);
    drop(probes);
    log::info!("detached in {} ms", detach_start.elapsed().as_millis());

    let losses = Losses { kernel, undecodable, unfinished, hits: profile.lost_hits };
    Ok(RunOutcome { plan, args, expected_exits, child, started_at, profile, losses, interrupted })
}

/// SIGINT and SIGTERM, which end a run early but still report it.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("handling SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
        })
    }

    /// The next signal's number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    if signal == libc::SIGINT { "interrupted (SIGINT)" } else { "terminated (SIGTERM)" }
}

fn is_driver_exit(kind: WorkloadKind, driver: u32, exit: &Exit) -> bool {
    match kind {
        WorkloadKind::Threads => exit.pid == driver,
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
