//! One profiled run, end to end: check the request, plan, attach, start or find the target
//! (`start`), collect its records (`collect`), detach, and what exitprof spent doing it
//! (`own_cost`).
//!
//! It ties the other folders together; it must not import `cli` (`main.rs` hands it a
//! [`RunRequest`]).

pub mod collect;
pub mod own_cost;
pub mod start;

use std::time::{Duration, SystemTime};

use serde::Serialize;

use self::{
    collect::{Collected, collect_until},
    own_cost::{CostMeter, CpuTime, OwnCost},
    start::{Attached, Stop, bump_memlock, load_options, plan_for, preflight, prepare, start},
};
use crate::{
    analysis::{
        blocking::{BlockedByStage, BlockedIn},
        deferred::DeferredWork,
        on_cpu::OnCpuReport,
        probe_effect::ProbeEffect,
        profile::Profile,
        session::Session,
    },
    export::ExportTarget,
    probes::{ProbeOptions, load::ProgramCost, maps::KernelLosses, plan::Plan},
    report::progress::Progress,
    target::{
        Target,
        signals::Signals,
        workload::{ChildOutcome, Workload},
    },
};

/// Kernel stacks reported where exits blocked.
pub const BLOCKED_IN_SHOWN: usize = 5;

/// What one run is asked to do, read from the command line.
pub struct RunRequest {
    pub target: Target,
    pub probes: ProbeOptions,
    /// How long to watch targets that do not end by themselves.
    pub duration: Option<Duration>,
    /// The report goes out as one JSON document on stdout: no progress line, and a command's
    /// own stdout goes to stderr.
    pub json: bool,
    /// Files to write the results to.
    pub exports: Vec<ExportTarget>,
    /// Size of the exit-record ring buffer; `None`: sized from the target.
    pub ringbuf_bytes: Option<u32>,
    /// Have the kernel count the run time of exitprof's programs (--bpf-stats).
    pub bpf_stats: bool,
}

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
    /// Exits that blocked, and those whose stack of their longest block was walked.
    pub blocked_exits: u64,
    pub blocked_exits_walked: u64,
    /// Where exits computed: sampled kernel stacks by stage.
    pub on_cpu: OnCpuReport,
    /// Where exits blocked, by stage and stack (for the flame graphs).
    pub blocked_by_stage: Vec<BlockedByStage>,
    pub losses: Losses,
    /// With --bpf-stats: each program's runs and run time while the target ran.
    pub kernel_cost: Option<Vec<ProgramCost>>,
    /// With --bpf-stats: how much of the exits was exitprof's own programs running.
    pub probe_effect: Option<ProbeEffect>,
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
    pub fn by_cause(&self) -> [(&'static str, &'static str, u64); 11] {
        [
            ("ringbuf_full", "ring buffer full", self.kernel.ringbuf_full),
            ("state_map_full", "no free exit slot", self.kernel.state_map_full),
            ("stale_records", "ends never seen", self.kernel.stale_records),
            ("undecodable", "undecodable", self.undecodable),
            ("unfinished", "unfinished", self.unfinished),
            ("hits", "probe hits over the per-exit limit", self.hits),
            ("probe_misses", "probe hits missed by the kernel", self.probe_misses),
            ("follow_unknown", "tasks not known to be followed", self.kernel.follow_unknown),
            (
                "deferred_ringbuf_full",
                "deferred-work records dropped",
                self.kernel.deferred_ringbuf_full,
            ),
            ("deferred_state_full", "deferred work not noted", self.kernel.deferred_state_full),
            ("samples_lost", "on-CPU samples dropped", self.kernel.samples_lost),
        ]
    }
}

/// Profiles one run.
pub async fn run(request: &RunRequest) -> anyhow::Result<RunOutcome> {
    // First: a signal while exitprof loads must not kill it with a workload waiting at its
    // gate and probes half attached; it ends the run by the normal path as soon as it starts.
    let mut signals = Signals::new()?;
    let target = &request.target;
    let (prepared, burst_rate) = prepare(target)?;
    preflight(&request.exports)?;
    bump_memlock();
    let (facts, plan) = plan_for(target, request.probes)?;
    let mut attached = Attached::new(&plan, &facts, load_options(&prepared, request))?;

    let mut session = Session::new(&plan);
    let started_at = SystemTime::now();
    let expected_exits = match target {
        Target::Storm(storm) => Workload::Storm(*storm).expected_exits(),
        _ => None,
    };
    let mut progress = Progress::new(expected_exits, !request.json);
    let cost_meter = request.bpf_stats.then(|| CostMeter::start(&attached.probes)).transpose()?;
    let cpu_before = CpuTime::now();
    let started =
        start(prepared, target, request.duration, request.json, Some(&mut attached.probes.ebpf))?;
    let collected =
        collect_until(started, Some(&mut attached), &mut session, &mut signals, &mut progress)
            .await?;
    let collecting = CpuTime::now().since(cpu_before);
    let kernel_cost = cost_meter.map(|meter| meter.stop(&attached.probes)).transpose()?;
    let (kernel, probe_misses) = attached.kernel_losses()?;
    let symbols = attached.symbols.clone();
    attached.detach();

    let Collected { stop, interrupted, elapsed, unfinished } = collected;
    // Named once the probes and their ring buffers are gone: naming reads the whole of kallsyms.
    session.blocking.name_stacks(|ip| symbols.name_of(ip).unwrap_or("?").to_owned());
    let blocked_in = session.blocking.report(BLOCKED_IN_SHOWN);
    let (blocked_exits, blocked_exits_walked) =
        (session.blocking.blocked_exits, session.blocking.walked_exits);
    session.on_cpu.finish();
    let on_cpu = session.on_cpu.report(&session.profile, &symbols);
    let blocked_by_stage = session.blocking.by_stage(&session.profile, &symbols);
    let probe_effect =
        kernel_cost.as_deref().map(|costs| session.probe_runs.effect(&session.profile, costs));
    let Session { profile, deferred, undecodable, .. } = session;
    let losses = Losses { kernel, undecodable, unfinished, hits: profile.lost_hits, probe_misses };
    let (elapsed, child, ended) = match stop {
        // Reaped after exitprof killed it on a signal.
        Stop::Reaped(child) if interrupted.is_some() => (child.elapsed, Some(child), Ended::Signal),
        Stop::Reaped(child) => (child.elapsed, Some(child), Ended::Workload),
        Stop::ProcessExited => (elapsed, None, Ended::ProcessExited),
        Stop::Elapsed => (elapsed, None, Ended::Duration),
        Stop::Signal => (elapsed, None, Ended::Signal),
    };
    Ok(RunOutcome {
        plan,
        target: target.clone(),
        duration: request.duration,
        expected_exits,
        child,
        elapsed,
        started_at,
        ended,
        burst_rate,
        profile,
        deferred,
        blocked_in,
        blocked_exits,
        blocked_exits_walked,
        on_cpu,
        blocked_by_stage,
        losses,
        kernel_cost,
        probe_effect,
        interrupted,
        own_cost: OwnCost::now(collecting),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

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
