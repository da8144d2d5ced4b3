//! One profiled storm, end to end: plan, attach, drive the workload, collect, detach.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde::Serialize;

use crate::{
    cli::{RunArgs, WorkloadKind},
    collect::{self, ExitStream, KernelLosses},
    exits::Exit,
    kernel::{KernelFacts, tracefs},
    load::{self, LoadOptions},
    plan::{AttachMode, Plan, Planned},
    privileges,
    profile::Profile,
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
}

/// Checks everything that can be checked before loading anything.
pub fn preflight() -> anyhow::Result<()> {
    load::ensure_object_embedded()?;
    privileges::check()?;
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
pub async fn run(args: RunArgs) -> anyhow::Result<RunOutcome> {
    preflight()?;
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
    Ok(RunOutcome { plan, args, expected_exits, child, profile, losses, interrupted })
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
