//! `exitprof compare` and `exitprof sweep`: the same storm with a condition on and off,
//! interleaved, measured as the 2006 LKML taskstats benchmark did (user, sys and elapsed time of
//! the storm's process) and explained stage by stage with exitprof's probes.
//!
//! Like `run`, which it drives once per storm, it ties the lower folders together and returns a
//! [`CompareOutcome`] (exitprof-core's, as are the comparisons in it); it must not import `cli`
//! (`main.rs` hands it a [`CompareRequest`]), nor the presentation layer that renders the
//! outcome (`present`, `report`, `export`, `diff`).

use std::time::SystemTime;

use anyhow::{Context as _, bail};

pub use exitprof_core::compare::{CompareOutcome, Compared, Comparison, SideRuns, side_name};

use exitprof_core::analysis::{
    blocking::BlockedReport, comparison::RunMeasure, groups::GroupOptions, on_cpu::OnCpuReport,
    session::Session,
};

use crate::{
    base::{UsageError, signals::Signals},
    conditions::{self, Condition, ConditionOptions, Side},
    kernel::KernelFacts,
    probes::{
        counts::KernelLosses,
        load::LoadOptions,
        plan::{Plan, PointSet},
    },
    profiled::{
        Storm, Target, ThreadsParams,
        workload::{self, Workload, exit_rate},
    },
    run::{
        RunRequest,
        collect::{NoProgress, collect_until},
        own_cost::CostMeter,
        start::{self, Attached, Prepared, Started, Stop},
    },
};

/// What one comparison is asked to do, read from the command line.
pub struct CompareRequest {
    /// The storm and how it is profiled and reported.
    pub run: RunRequest,
    /// The condition switched on and off between runs.
    pub toggle: Condition,
    /// Runs of each side.
    pub runs: u32,
    pub condition: ConditionOptions,
    /// For `sweep`: the staggers of the threads storm, one comparison each.
    pub staggers: Option<Vec<u32>>,
}

/// Settings shared by every run of a comparison or sweep.
struct Comparer {
    /// The plan of the `on` side, and of both unless the point set is the condition.
    plan: Plan,
    /// With point-set, the `off` side's: the minimal point set.
    off_plan: Option<Plan>,
    facts: KernelFacts,
    load: LoadOptions,
    condition: Condition,
    condition_options: ConditionOptions,
    runs: u32,
    /// How each side's exits are split by workload, if they are.
    groups: Option<GroupOptions>,
    /// Attached once for all runs, unless the condition is the probes themselves.
    attached: Option<Attached>,
    signals: Signals,
    started_at: SystemTime,
    /// The signal that cut the comparison short.
    interrupted: Option<i32>,
}

impl Comparer {
    /// Checks the request, plans and (unless the probes are the condition) attaches.
    fn new(request: &CompareRequest) -> anyhow::Result<(Self, Workload)> {
        let target = &request.run.target;
        let (Prepared::Workload(workload), _) = start::prepare(target)? else {
            return Err(UsageError(
                "compare and sweep drive the workload themselves: use --workload or -- CMD, not \
                 --pid, --comm or --all"
                    .to_owned(),
            )
            .into());
        };
        // Before loading, as in a run: a signal from here on ends the comparison by its path.
        let signals = Signals::new()?;
        start::preflight()?;
        let mut probes = request.run.probes;
        if request.toggle == Condition::PointSet {
            probes.points = PointSet::Full;
        }
        let (facts, mut plan) = start::plan_for(target, probes)?;
        let off_plan = (request.toggle == Condition::PointSet)
            .then(|| plan.clone().with_points(PointSet::Minimal));
        let load = start::load_options(&Prepared::Workload(workload.clone()), &request.run);
        // Attached once for all runs, unless the condition is which probes are attached.
        let attached = match request.toggle {
            Condition::Probes | Condition::PointSet => None,
            _ => Some(Attached::new(&plan, &facts, load)?),
        };
        // The compat object, where the kernel rejected the default one.
        if let Some(attached) = &attached {
            plan.object = attached.probes.object.clone();
        }
        let comparer = Self {
            plan,
            off_plan,
            facts,
            load,
            condition: request.toggle,
            condition_options: request.condition,
            runs: request.runs,
            groups: request.run.groups,
            attached,
            signals,
            started_at: SystemTime::now(),
            interrupted: None,
        };
        Ok((comparer, workload))
    }

    /// Runs `runs` storms of `workload` per side, interleaved: on/off in even rounds, off/on in
    /// odd ones, so that a drift of the machine weighs on both sides alike.
    async fn compare(
        &mut self,
        workload: &Workload,
        target: &Target,
    ) -> anyhow::Result<Comparison> {
        let mut on = self.side(Side::On);
        let mut off = self.side(Side::Off);
        'rounds: for round in 0..self.runs {
            let order = if round % 2 == 0 { [Side::On, Side::Off] } else { [Side::Off, Side::On] };
            for side in order {
                let runs = if side == Side::On { &mut on } else { &mut off };
                self.storm(workload, target, runs).await?;
                log::info!(
                    "{} {}: run {}/{}",
                    self.condition.name(),
                    side_name(side),
                    runs.measures.len(),
                    self.runs
                );
                if self.interrupted.is_some() {
                    break 'rounds;
                }
            }
        }
        for side in [&mut on, &mut off] {
            side.session.stacks.finish();
            let symbols = &self.facts.kallsyms;
            let session = &side.session;
            side.on_cpu = OnCpuReport::of(&session.stacks, &session.profile, symbols);
            side.blocked =
                BlockedReport::of(session.blocking, &session.stacks, &session.profile, symbols);
        }
        Ok(Comparison { on, off, same_stages: self.off_plan.is_none() })
    }

    /// The probe plan of `side`.
    fn plan_of(&self, side: Side) -> &Plan {
        match (side, &self.off_plan) {
            (Side::Off, Some(minimal)) => minimal,
            _ => &self.plan,
        }
    }

    fn side(&self, side: Side) -> SideRuns {
        SideRuns {
            side,
            session: Session::new(self.plan_of(side), self.groups),
            on_cpu: OnCpuReport::default(),
            blocked: BlockedReport::default(),
            measures: Vec::new(),
            kernel_losses: KernelLosses::default(),
            probe_misses: 0,
            unfinished: 0,
            profiled: self.condition != Condition::Probes || side == Side::On,
            kernel_cost: None,
        }
    }

    /// One storm with the condition set to `runs.side`, restored afterwards.
    async fn storm(
        &mut self,
        workload: &Workload,
        target: &Target,
        runs: &mut SideRuns,
    ) -> anyhow::Result<()> {
        let guard = conditions::set(self.condition, runs.side, self.condition_options)
            .with_context(|| {
                format!("setting {} {}", self.condition.name(), side_name(runs.side))
            })?;
        let mut own = match (&self.attached, guard.probes_attached()) {
            (None, true) => Some(Attached::new(self.plan_of(runs.side), &self.facts, self.load)?),
            _ => None,
        };
        let mut attached = self.attached.as_mut().or(own.as_mut());
        let before = attached.as_deref().map(Attached::kernel_losses).transpose()?;
        let run = attached.as_deref_mut().map(Attached::begin_run).transpose()?;
        if let Some(run) = &run {
            runs.session.begin_run(run.epoch);
        }
        // The point set's check needs the kernel's count of every program run on both sides.
        let meter = match attached.as_deref() {
            Some(a) if self.condition == Condition::PointSet => Some(CostMeter::start(&a.probes)?),
            _ => None,
        };
        let started: Started = start::start(
            Prepared::Workload(workload.clone()),
            target,
            None,
            true,
            attached.as_deref_mut().map(|a| &mut a.probes.ebpf),
        )?;
        let exits_before = runs.session.profile.exit().hist.clone();
        let collected = collect_until(
            started,
            attached.as_deref_mut().zip(run),
            &mut runs.session,
            None,
            &mut self.signals,
            &mut NoProgress,
        )
        .await?;
        if let (Some(meter), Some(a)) = (meter, attached.as_deref()) {
            runs.add_costs(meter.stop(&a.probes)?);
        }
        if let (Some(a), Some((before, misses_before))) = (attached.as_deref(), before) {
            let (after, misses_after) = a.kernel_losses()?;
            runs.kernel_losses = runs.kernel_losses.plus(&after.since(&before));
            runs.probe_misses += misses_after - misses_before;
        }
        runs.unfinished += collected.unfinished;
        if let Some(own) = own {
            own.detach();
        }
        let restored = guard.restore().context("restoring the condition")?;
        self.interrupted = self.interrupted.or(collected.interrupted);
        let Stop::Reaped(child) = collected.stop else {
            bail!("the workload of a comparison ended without being reaped");
        };
        if self.interrupted.is_some() {
            // A storm cut short measures nothing comparable.
            return Ok(());
        }
        if let Some(failure) = workload::failure(&child) {
            bail!("the workload {failure}");
        }
        let listener = restored.listener.as_ref();
        runs.measures.push(RunMeasure {
            user_s: child.user.as_secs_f64(),
            sys_s: child.sys.as_secs_f64(),
            elapsed_s: child.elapsed.as_secs_f64(),
            exit_rate: exit_rate(Some(&child), child.elapsed, 0),
            listener_messages: listener.map(|l| l.messages),
            listener_enobufs: listener.map(|l| l.enobufs),
            exit_p10_ns: runs
                .session
                .profile
                .exit()
                .quantile_since(&exits_before, 0.1)
                .map(|ns| ns as f64),
        });
        Ok(())
    }

    /// Detaches what is attached; what was compared is the outcome.
    fn finish(self, compared: Compared) -> CompareOutcome {
        if let Some(attached) = self.attached {
            attached.detach();
        }
        let Self { plan, condition, runs, started_at, interrupted, .. } = self;
        CompareOutcome { plan, condition, runs, started_at, interrupted, compared }
    }
}

/// `compare` (no `staggers`) or `sweep` (one comparison per stagger of the threads storm).
pub async fn run(request: &CompareRequest) -> anyhow::Result<CompareOutcome> {
    let target = &request.run.target;
    let staggers = request.staggers.as_deref();
    let threads = match (target, staggers) {
        (Target::Storm(Storm::Threads(p)), _) => Some(*p),
        (_, Some(_)) => {
            return Err(UsageError(
                "sweep varies the stagger of the threads storm: use \
                                   --workload threads"
                    .to_owned(),
            )
            .into());
        }
        _ => None,
    };
    let (mut comparer, workload) = Comparer::new(request)?;
    let compared = match staggers.zip(threads) {
        None => Compared::Storm(Box::new(comparer.compare(&workload, target).await?)),
        Some((staggers, params)) => {
            let mut rows = Vec::new();
            for &stagger_us in staggers {
                let row = Target::Storm(Storm::Threads(ThreadsParams { stagger_us, ..params }));
                let Target::Storm(storm) = row else { unreachable!("a storm") };
                rows.push((stagger_us, comparer.compare(&Workload::Storm(storm), &row).await?));
                if comparer.interrupted.is_some() {
                    break;
                }
            }
            Compared::Staggers(rows)
        }
    };
    Ok(comparer.finish(compared))
}
