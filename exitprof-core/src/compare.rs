//! What `compare` and `sweep` produce: each side's runs of a storm with a condition on and off,
//! and the comparisons of them.

use std::time::SystemTime;

use crate::{
    analysis::{
        blocking::BlockedReport, comparison::RunMeasure, on_cpu::OnCpuReport,
        probe_effect::ProbeEffect, session::Session,
    },
    conditions::{Condition, Side},
    probes::{
        counts::{KernelLosses, ProgramCost},
        plan::Plan,
    },
};

/// Everything one side of a comparison collected, over all its runs.
pub struct SideRuns {
    pub side: Side,
    pub session: Session,
    /// Where this side's exits computed, and where they blocked, once its runs are over.
    pub on_cpu: OnCpuReport,
    pub blocked: BlockedReport,
    pub measures: Vec<RunMeasure>,
    /// Kernel-side losses during this side's runs.
    pub kernel_losses: KernelLosses,
    pub probe_misses: u64,
    pub unfinished: u64,
    /// Whether exitprof's probes were attached on this side.
    pub profiled: bool,
    /// Where the kernel counted exitprof's program runs (point-set): each program's runs and
    /// run time over this side's runs.
    pub kernel_cost: Option<Vec<ProgramCost>>,
}

impl SideRuns {
    /// How much of this side's exits was exitprof's programs running, where they were counted.
    pub fn probe_effect(&self) -> Option<ProbeEffect> {
        let costs = self.kernel_cost.as_deref()?;
        Some(self.session.probe_runs.effect(&self.session.profile, costs))
    }

    /// Adds one run's program costs to the side's.
    pub fn add_costs(&mut self, run: Vec<ProgramCost>) {
        let costs = self.kernel_cost.get_or_insert_with(Vec::new);
        for cost in run {
            match costs.iter_mut().find(|c| c.program == cost.program) {
                Some(c) => (c.runs, c.run_ns) = (c.runs + cost.runs, c.run_ns + cost.run_ns),
                None => costs.push(cost),
            }
        }
    }
}

/// A finished comparison of one target.
pub struct Comparison {
    pub on: SideRuns,
    pub off: SideRuns,
    /// Both sides had the same probe points, so their stages are the same and compare stage by
    /// stage (not so with point-set).
    pub same_stages: bool,
}

/// What a compare or sweep produced, for the presentation layer to render.
pub struct CompareOutcome {
    /// The plan of the `on` side, and of both unless the point set is the condition.
    pub plan: Plan,
    pub condition: Condition,
    /// Runs of each side.
    pub runs: u32,
    pub started_at: SystemTime,
    /// The signal that cut the comparison short.
    pub interrupted: Option<i32>,
    pub compared: Compared,
}

/// The comparisons of a compare or sweep.
pub enum Compared {
    /// `compare`: one comparison of the storm asked for.
    Storm(Box<Comparison>),
    /// `sweep`: one comparison per stagger of the threads storm, in the order run; fewer than
    /// asked when a signal cut the sweep short.
    Staggers(Vec<(u32, Comparison)>),
}

/// "on" or "off".
pub fn side_name(side: Side) -> &'static str {
    match side {
        Side::On => "on",
        Side::Off => "off",
    }
}
