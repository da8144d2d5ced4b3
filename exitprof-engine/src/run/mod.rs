//! One profiled run, end to end: what it is asked and gives back (`outcome`, exitprof-core's);
//! check the
//! request, plan, attach, start or find the target (`start`), collect its records (`collect`),
//! detach, and what exitprof spent doing it (`own_cost`); the live cgroup tree that names the
//! cgroups made before the run (`cgroupfs`, for `--group-by cgroup`); and a run kept in a file,
//! and read back from it (`record`, exitprof-core's).
//!
//! It ties the lower folders together and returns a [`RunOutcome`]; it must not import `cli`
//! (`main.rs` hands it a [`RunRequest`]), nor the presentation layer that renders the outcome
//! (`present`, `report`, `export`, `diff`).

pub mod cgroupfs;
pub mod collect;
pub mod own_cost;
pub mod start;

use std::time::SystemTime;

pub use exitprof_core::run::{Ended, Losses, RunEnd, RunOutcome, RunRequest, RunSetup, record};

use self::{
    collect::{Collected, Progress, collect_until},
    own_cost::CostMeter,
    record::Recorder,
    start::{Attached, Stop, load_options, plan_for, preflight, prepare, start},
};
use crate::{
    base::signals::Signals,
    profiled::{Target, workload::Workload},
};
use exitprof_core::analysis::{kept_exits::Pick, session::Session};

/// Profiles one run, showing how it goes on `progress`.
pub async fn run(request: &RunRequest, progress: &mut dyn Progress) -> anyhow::Result<RunOutcome> {
    // First: a signal while exitprof loads must not kill it with a workload waiting at its
    // gate and probes half attached; it ends the run by the normal path as soon as it starts.
    let mut signals = Signals::new()?;
    let target = &request.target;
    let (prepared, burst_rate) = prepare(target)?;
    preflight()?;
    if let Some(path) = &request.record {
        record::check_writable(path)?;
    }
    let (facts, mut plan) = plan_for(target, request.probes)?;
    let mut attached = Attached::new(&plan, &facts, load_options(&prepared, request))?;
    // The compat object, where the kernel rejected the default one.
    plan.object = attached.probes.object.clone();

    let mut session = Session::new(&plan, request.groups);
    let (losses_before, misses_before) = attached.kernel_losses()?;
    if let Some(threshold) = request.slower_than {
        let ns = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
        session.keep_exits(Pick::SlowerThan(ns));
    }
    let run = attached.begin_run()?;
    session.begin_run(run.epoch);
    let expected_exits = match target {
        Target::Storm(storm) => Workload::Storm(*storm).expected_exits(),
        _ => None,
    };
    let setup = RunSetup {
        plan,
        target: target.clone(),
        duration: request.duration,
        expected_exits,
        burst_rate,
        started_at: SystemTime::now(),
        epoch: run.epoch,
        groups: request.groups,
    };
    let mut recorder =
        request.record.as_deref().map(|path| Recorder::create(path, &setup)).transpose()?;
    progress.start(expected_exits);
    let cost_meter = request.bpf_stats.then(|| CostMeter::start(&attached.probes)).transpose()?;
    let cpu_before = own_cost::cpu_time();
    let started =
        start(prepared, target, request.duration, request.json, Some(&mut attached.probes.ebpf))?;
    let collected = collect_until(
        started,
        Some((&mut attached, run)),
        &mut session,
        recorder.as_mut(),
        &mut signals,
        progress,
    )
    .await?;
    let collecting = own_cost::cpu_time().since(cpu_before);
    let kernel_cost = cost_meter.map(|meter| meter.stop(&attached.probes)).transpose()?;
    let (kernel_losses, probe_misses) = attached.kernel_losses()?;
    let (kernel_losses, probe_misses) =
        (kernel_losses.since(&losses_before), probe_misses.saturating_sub(misses_before));
    let symbols = attached.symbols.clone();
    attached.detach();

    let Collected { stop, interrupted, elapsed, unfinished } = collected;
    let (elapsed, child, ended) = match stop {
        // Reaped after exitprof killed it on a signal.
        Stop::Reaped(child) if interrupted.is_some() => (child.elapsed, Some(child), Ended::Signal),
        Stop::Reaped(child) => (child.elapsed, Some(child), Ended::Workload),
        Stop::ProcessExited => (elapsed, None, Ended::ProcessExited),
        Stop::Elapsed => (elapsed, None, Ended::Duration),
        Stop::Signal => (elapsed, None, Ended::Signal),
    };
    let end = RunEnd {
        child,
        elapsed,
        ended,
        kernel_losses,
        probe_misses,
        unfinished,
        kernel_cost,
        interrupted,
    };
    // Named once the probes and their ring buffers are gone: naming reads the whole of kallsyms.
    let outcome = RunOutcome::of(setup, session, end, &symbols, || own_cost::so_far(collecting));
    if let Some(recorder) = recorder {
        recorder.finish(&outcome, &symbols)?;
    }
    Ok(outcome)
}
