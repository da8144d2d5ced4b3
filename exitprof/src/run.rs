//! One profiled storm, end to end: plan, attach, drive the workload, collect, detach.

use std::{
    collections::HashSet,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use serde::Serialize;

use crate::{
    cli::{RunArgs, WorkloadKind},
    collect::{self, KernelLosses, RecordStream},
    deferred::DeferredWork,
    exits::Exit,
    export::{self, ExportTarget},
    kernel::{KernelFacts, tracefs},
    load::{self, LoadOptions},
    plan::{AttachMode, Plan, Planned, Wants},
    privileges,
    profile::Profile,
    session::Session,
    signals::{Signals, signal_name},
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
    pub deferred: DeferredWork,
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
    /// Probe hits the kernel dropped (kprobe misses, BPF recursion): their exits are recorded,
    /// but with a point missing.
    pub probe_misses: u64,
}

impl Losses {
    /// Exits lost, in total.
    pub fn exits(&self) -> u64 {
        self.kernel.exits() + self.undecodable + self.unfinished
    }

    /// Every cause: its key in the JSON document, what it loses, and how many.
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
pub fn plan(mode: AttachMode, wants: Wants) -> anyhow::Result<(KernelFacts, Plan)> {
    let tracefs = tracefs::ensure_mounted()?;
    let facts = KernelFacts::calibrate(tracefs).context("calibrating kernel features")?;
    let plan = Plan::resolve(&facts, mode, wants)?;
    Ok((facts, plan))
}

/// Profiles one storm.
pub async fn run(args: RunArgs, exports: &[ExportTarget]) -> anyhow::Result<RunOutcome> {
    preflight(exports)?;
    bump_memlock();
    let wants = Wants { ipc_frees_via_kfree: false };
    let (facts, plan) = plan(args.probes.attach, wants)?;
    describe_attach(&plan.points);
    let options = LoadOptions {
        trace_all: false,
        ringbuf_bytes: args.ringbuf_bytes,
        kretprobe_maxactive: args.probes.kretprobe_maxactive,
    };
    let mut probes = load::load_and_attach(&plan, &facts, options)?;
    let mut exits = RecordStream::take(&mut probes.ebpf, "EXITS")?;
    let mut deferred = RecordStream::take(&mut probes.ebpf, "DEFERRED")?;

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

    // The workload driver's own exit is not part of the storm it drives.
    let mut session = Session::new(&plan, move |exit| is_driver_exit(driver_kind, driver, exit));
    let child = loop {
        tokio::select! {
            ready = exits.ready() => { ready?; exits.drain(|b| session.exit_record(b)); }
            ready = deferred.ready() => { ready?; deferred.drain(|b| session.deferred_record(b)); }
            outcome = &mut waiter => break outcome.context("workload waiter panicked")??,
            signal = signals.next(), if interrupted.is_none() => {
                eprintln!("exitprof: {}: stopping the workload; partial results follow", signal_name(signal));
                interrupted = Some(signal);
                running.kill();
            }
        }
    };
    // The workload is reaped, but its last threads may not have switched out for good yet, and
    // deferred work (RCU callbacks, the free_ipc kworker) runs later still.
    let tgids = HashSet::from([driver]);
    let settle_start = Instant::now();
    loop {
        exits.drain(|b| session.exit_record(b));
        deferred.drain(|b| session.deferred_record(b));
        let settled = collect::in_progress(&probes.ebpf, &tgids)? == 0
            && session.deferred.awaiting_task_free() == 0;
        if settled || settle_start.elapsed() >= SETTLE_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let unfinished = collect::in_progress(&probes.ebpf, &tgids)? as u64;
    let kernel = KernelLosses::read(&probes.ebpf)?;
    let probe_misses = probes.misses()?;
    let detach_start = Instant::now();
    drop((exits, deferred));
    drop(probes);
    log::info!("detached in {} ms", detach_start.elapsed().as_millis());

    let Session { profile, deferred, undecodable, .. } = session;
    let losses = Losses { kernel, undecodable, unfinished, hits: profile.lost_hits, probe_misses };
    Ok(RunOutcome {
        plan,
        args,
        expected_exits,
        child,
        started_at,
        profile,
        deferred,
        losses,
        interrupted,
    })
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
