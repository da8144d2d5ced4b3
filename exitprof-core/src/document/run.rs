//! The machine-readable result of a run (`--json`).

use exitprof_common::counters;
use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        blocking::BlockedIn,
        deferred::DeferredReport,
        exit_stacks::JoinCounts,
        histogram::{Bucket, Latency, Summary},
        on_cpu::{HotPath, OnCpuIn, OnCpuReport},
        probe_effect::ProbeEffect,
        profile::{Profile, StageRow},
        records::ExitKind,
        teardown::TeardownReports,
    },
    document::{
        groups::GroupsDoc,
        verdict::{run_verdict, teardown_verdict},
    },
    kernel::bpf_object::BpfObject,
    probes::{
        counts::ProgramCost,
        plan::{AttachMode, PlannedJson, Unplanned},
    },
    profiled::{ForkParams, NetnsParams, Storm, Target, ThreadsParams, workload::exit_rate},
    run::{Diagnostics, Ended, Losses, RunOutcome, own_cost::OwnCost, record::selection::Selected},
};

/// How far the achieved rate may be from a --rate target and still count as reached.
pub const RATE_TOLERANCE: f64 = 0.05;
/// The version of the run document's schema this exitprof writes, its `schema` key. A reader
/// reads the versions up to its own and refuses newer ones; documents of the releases before
/// the key (version 0) read as version 1 less the keys it added.
pub const SCHEMA: u32 = 1;
/// Sampled stacks reported per stage.
pub const ON_CPU_IN_SHOWN: usize = 5;

/// The `--json` document. Later versions add keys; the ones here stay, `null` where a value does
/// not exist for the target (e.g. user and sys time of processes exitprof did not start). It
/// reads back ([`RunDocument::from_json`]): the keys the documents of earlier releases lack are
/// read as nothing seen (`partial`, `lost`, `losses`, `blocked_in`, `teardowns`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunDocument {
    /// The version of this schema: [`SCHEMA`].
    #[serde(default)]
    pub schema: u32,
    /// The run was cut short (Ctrl-C, SIGTERM): the figures cover what ran until then.
    #[serde(default)]
    pub partial: bool,
    pub kernel: String,
    pub attach: AttachMode,
    /// The eBPF object loaded, and how it does each part of its work where kernels differ.
    pub object: BpfObject,
    pub workload: WorkloadDoc,
    pub ended: Ended,
    pub exits_expected: Option<u64>,
    pub exits_recorded: u64,
    /// Exits with no start marker, timed from the first exit-only point they reached (no start
    /// probe covered their path, e.g. with the syscall tracepoints off).
    pub late_starts: u64,
    /// Followed exits back on a CPU without a `sched_switch` showing it: their off-CPU
    /// interval closed late, at their next probe point or their end.
    pub unseen_returns: u64,
    /// Tasks the storm's drivers created (`null` when exitprof does not drive the target).
    pub tasks_created: Option<u64>,
    /// Exits lost, all causes together (`losses` has them apart).
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub losses: Losses,
    /// What happened besides losses, for a person looking into the run: returns to a CPU no
    /// `sched_switch` showed, stacks walked and skipped, samples taken, ends of an earlier run's
    /// exits, refusals found stale.
    pub diagnostics: Diagnostics,
    pub elapsed_s: f64,
    /// CPU time of exitprof's workload children and what they waited for (`wait4` rusage).
    pub user_s: Option<f64>,
    pub sys_s: Option<f64>,
    /// Exits per second. For storms as the 2006 thread computed it, from the drivers' counts:
    /// (created + exited) / elapsed / 2; otherwise exits recorded / elapsed.
    pub exit_rate: f64,
    /// The --rate target and how the storm met it.
    pub rate: Option<RateDoc>,
    /// The whole exit first (named `exit`), then each stage in kernel order.
    pub stages: Vec<StageDoc>,
    /// The same for each kind of exit that occurred apart: `thread` (a thread of a process that
    /// lives on) and `process` (the last or only thread of its process).
    pub by_kind: Vec<KindDoc>,
    /// With --group-by: the exits of each workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsDoc>,
    /// Exits that ran out of hit slots: in the whole exit's figures, left out of the stages'.
    pub truncated: u64,
    /// Exits that blocked (were switched out asleep), and their blocks.
    pub blocked_exits: u64,
    pub blocks: u64,
    /// Blocks whose kernel stack was walked (within a budget of walks per second and CPU) and
    /// joined to their exit.
    pub blocks_walked: u64,
    /// Time the exits spent blocked, in all: `blocked_in` and `blocked_unwalked_ns` add up to it.
    pub blocked_ns: u128,
    /// Blocked time in stages where no block's stack was walked.
    pub blocked_unwalked_ns: u128,
    /// Where the time went, in a sentence or two.
    pub verdict: String,
    /// Where exits blocked, by stage and kernel stack, most time first: each stage's blocked
    /// time shared out by the time of the blocks walked in it.
    #[serde(default)]
    pub blocked_in: Vec<BlockedIn>,
    /// What became of the on-CPU samples (`stages[].on_cpu_in` has those joined to a stage).
    pub samples: JoinCounts,
    /// Work the exits caused in other contexts, joined back to them.
    pub deferred: DeferredReport,
    /// The namespace teardowns the exits set off (`net`: `cleanup_net`; `user`:
    /// `free_user_ns`), each joined to its exit: their time, how long after the exit, where
    /// their kworker blocked and computed, and what could not be joined.
    #[serde(default)]
    pub teardowns: TeardownReports,
    /// With --bpf-stats: what exitprof's programs cost in the kernel while the target ran.
    pub kernel_cost: Option<KernelCostDoc>,
    /// With --bpf-stats: how much of the exits, and of each stage, was exitprof's own programs
    /// running (shown beside the stages, not subtracted); `null` without the flag.
    pub probe_effect: Option<ProbeEffect>,
    pub probes: Vec<PlannedJson>,
    pub unavailable: Vec<Unplanned>,
    /// exitprof's own CPU time and peak memory, its workload children left out.
    pub exitprof: OwnCost,
    /// Of a record's exits, those a view chose (`exitprof report --pid`, each kind of
    /// `--by-kind`): which, out of how many, and the keys that stay the whole run's; `null` for
    /// all of the run's exits.
    pub selected: Option<SelectedDoc>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SelectedDoc {
    #[serde(flatten)]
    pub selected: Selected,
    /// Keys of this document that are of the whole run: the exits it lost cannot be told apart
    /// by process, nor can the `free_ipc` kworker's runs or exitprof's programs' runs, and the
    /// workload's times are its own.
    pub run_wide: Vec<String>,
}

impl SelectedDoc {
    pub fn new(selected: Selected) -> Self {
        let run_wide =
            ["lost", "losses", "elapsed_s", "user_s", "sys_s", "deferred.ipc", "kernel_cost"];
        Self { selected, run_wide: run_wide.map(str::to_owned).to_vec() }
    }
}

/// What was profiled, with its parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WorkloadDoc {
    Threads(ThreadsParams),
    Fork(ForkParams),
    Ipcns(ForkParams),
    Netns(NetnsParams),
    Command { command: Vec<String> },
    Pid { pid: u32, duration_s: Option<f64> },
    Comm { comm: String, duration_s: Option<f64> },
    Cgroup { cgroup: String, duration_s: Option<f64> },
    All { duration_s: Option<f64> },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RateDoc {
    /// Exits per second asked for.
    pub target: u64,
    /// `exit_rate` within 5 % of the target.
    pub reached: bool,
    /// The fastest bursts of the storm's threads before attaching (exits/s, without probes).
    pub burst_max: Option<f64>,
    /// The stagger chosen for each rep (ns).
    pub staggers_ns: Vec<u64>,
}

/// One stage's row (or the whole exit's): its latencies' figures, embedded as the keys of the
/// row, and what it spent where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageDoc {
    pub name: String,
    #[serde(flatten)]
    pub latency: Summary,
    pub share_of_exit: f64,
    pub off_cpu_share: f64,
    /// The part of the off-CPU time spent runnable (preempted, waiting for a CPU) rather than
    /// blocked.
    pub runq_share: f64,
    /// What the kernel does in this stage.
    #[serde(default)]
    pub covers: Vec<String>,
    /// Samples of the sampling clock that caught an exit on a CPU in this stage (0 for the whole
    /// exit's row: its samples are its stages').
    #[serde(default)]
    pub on_cpu_samples: u64,
    /// The deepest chain of calls most of those samples go through.
    #[serde(default)]
    pub on_cpu_mostly_in: Option<HotPath>,
    /// The stacks sampled most, with their share of the stage's samples and the on-CPU time
    /// that share stands for.
    #[serde(default)]
    pub on_cpu_in: Vec<OnCpuIn>,
    /// With --bpf-stats: the mean time per exit through the stage that exitprof's own programs
    /// ran in it (ns), included in the figures above; `null` without the flag.
    #[serde(default)]
    pub probe_effect_ns: Option<f64>,
    /// The histogram: every non-empty bucket, lowest first.
    #[serde(default)]
    pub buckets: Vec<Bucket>,
}

impl StageDoc {
    fn new(name: String, latency: &Latency, share_of_exit: f64, covers: Vec<String>) -> Self {
        let summary = latency.summary();
        Self {
            name,
            share_of_exit,
            off_cpu_share: summary.off_cpu_share(),
            runq_share: summary.runq_share(),
            latency: summary,
            covers,
            on_cpu_samples: 0,
            on_cpu_mostly_in: None,
            on_cpu_in: Vec::new(),
            probe_effect_ns: None,
            buckets: latency.buckets(),
        }
    }
}

/// exitprof's programs, as the kernel's BPF run-time statistics counted them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelCostDoc {
    /// Every attached program, costliest first.
    pub programs: Vec<ProgramCostDoc>,
    /// All programs together: runs and time spent in them (ns).
    pub runs: u64,
    pub run_ns: u64,
    /// `run_ns` over the exits recorded (`null` without exits): what each recorded exit cost in
    /// the kernel, the runs on other tasks' events included.
    pub ns_per_exit: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCostDoc {
    pub program: String,
    pub runs: u64,
    pub run_ns: u64,
    /// `null` when it never ran.
    pub ns_per_run: Option<f64>,
    /// `run_ns` over the exits recorded (`null` without exits).
    pub ns_per_exit: Option<f64>,
}

impl KernelCostDoc {
    pub fn new(costs: &[ProgramCost], exits: u64) -> Self {
        let per = |ns: u64, n: u64| (n > 0).then(|| ns as f64 / n as f64);
        let mut programs: Vec<ProgramCostDoc> = costs
            .iter()
            .map(|c| ProgramCostDoc {
                program: c.program.clone(),
                runs: c.runs,
                run_ns: c.run_ns,
                ns_per_run: per(c.run_ns, c.runs),
                ns_per_exit: per(c.run_ns, exits),
            })
            .collect();
        programs.sort_by_key(|p| std::cmp::Reverse(p.run_ns));
        let run_ns = costs.iter().map(|c| c.run_ns).sum();
        Self {
            programs,
            runs: costs.iter().map(|c| c.runs).sum(),
            run_ns,
            ns_per_exit: per(run_ns, exits),
        }
    }
}

/// The stage table of a profile: the whole exit first (named `exit`), then each stage in kernel
/// order, with its samples and exitprof's own time in it.
pub fn stage_docs(
    profile: &Profile,
    on_cpu: &OnCpuReport,
    effect: Option<&ProbeEffect>,
) -> Vec<StageDoc> {
    let mut stages = stage_table_docs(profile.exit(), profile.rows(), on_cpu);
    if let Some(effect) = effect {
        for (i, stage) in stages.iter_mut().enumerate() {
            // A stage no program ran in has none of exitprof's time.
            stage.probe_effect_ns = Some(if i == 0 {
                effect.ns_per_exit
            } else {
                effect.in_stage(&stage.name).unwrap_or(0.0)
            });
        }
    }
    stages
}

fn stage_table_docs(
    exit: &Latency,
    rows: Vec<StageRow<'_>>,
    on_cpu: &OnCpuReport,
) -> Vec<StageDoc> {
    let mut stages = vec![StageDoc::new("exit".to_owned(), exit, 1.0, Vec::new())];
    stages.extend(rows.into_iter().map(|row| {
        let mut doc = StageDoc::new(
            row.stage.name.clone(),
            row.latency,
            row.share_of_exit,
            row.stage.covers.clone(),
        );
        if let Some(sampled) = on_cpu.stages.iter().find(|s| s.stage == row.stage.name) {
            doc.on_cpu_samples = sampled.samples;
            doc.on_cpu_mostly_in.clone_from(&sampled.mostly_in);
            doc.on_cpu_in = sampled.stacks.iter().take(ON_CPU_IN_SHOWN).cloned().collect();
        }
        doc
    }));
    stages
}

/// One kind of exit's stage table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KindDoc {
    pub kind: ExitKind,
    pub exits: u64,
    /// As `stages` of the whole document.
    pub stages: Vec<StageDoc>,
}

/// Each kind of exit that occurred, with its stage table.
pub fn kind_docs(profile: &Profile) -> Vec<KindDoc> {
    profile
        .kinds()
        .into_iter()
        .map(|(kind, exit, rows)| KindDoc {
            kind,
            exits: exit.count(),
            // Samples are reported for all exits together.
            stages: stage_table_docs(exit, rows, &OnCpuReport::default()),
        })
        .collect()
}

impl RunDocument {
    pub fn new(run: &RunOutcome) -> Self {
        let elapsed_s = run.elapsed.as_secs_f64();
        let recorded = run.profile.exits;
        let mut verdict =
            run_verdict(run.profile.exit(), &run.profile.rows(), &run.blocked, &run.on_cpu);
        if let Some(teardowns) = teardown_verdict(&run.profile.exit().summary(), &run.teardowns) {
            verdict.push(' ');
            verdict.push_str(&teardowns);
        }
        let stages = stage_docs(&run.profile, &run.on_cpu, run.probe_effect.as_ref());
        let report = run.child.as_ref().and_then(|c| c.report.as_ref());
        let exit_rate = exit_rate(run.child.as_ref(), run.elapsed, recorded);
        let rate = match run.target {
            Target::Storm(Storm::Threads(ThreadsParams { rate: Some(target), .. })) => {
                Some(RateDoc {
                    target,
                    reached: (exit_rate / target as f64 - 1.0).abs() <= RATE_TOLERANCE,
                    burst_max: run.burst_rate,
                    staggers_ns: report.map(|r| r.staggers_ns.clone()).unwrap_or_default(),
                })
            }
            _ => None,
        };
        Self {
            schema: SCHEMA,
            partial: run.interrupted.is_some(),
            kernel: run.plan.kernel.clone(),
            attach: run.plan.mode,
            object: run.plan.object.clone(),
            workload: WorkloadDoc::new(&run.target, run.duration.map(|d| d.as_secs_f64())),
            ended: run.ended,
            exits_expected: run.expected_exits,
            exits_recorded: recorded,
            late_starts: run.profile.late_starts,
            unseen_returns: run.losses.get(counters::UNSEEN_RETURN),
            tasks_created: report.map(|r| r.created),
            lost: run.losses.exits(),
            losses: run.losses,
            diagnostics: Diagnostics(run.losses),
            elapsed_s,
            user_s: run.child.as_ref().map(|c| c.user.as_secs_f64()),
            sys_s: run.child.as_ref().map(|c| c.sys.as_secs_f64()),
            exit_rate,
            rate,
            stages,
            by_kind: kind_docs(&run.profile),
            groups: run.groups.as_ref().map(GroupsDoc::new),
            truncated: run.profile.truncated,
            blocked_exits: run.blocked.blocked_exits,
            blocks: run.blocked.blocks,
            blocks_walked: run.blocked.blocks_walked,
            blocked_ns: run.blocked.blocked_ns,
            blocked_unwalked_ns: run.blocked.unwalked_ns,
            verdict,
            blocked_in: run.blocked.stacks.clone(),
            samples: run.on_cpu.sampled,
            deferred: run.deferred.report(),
            teardowns: run.teardowns.clone(),
            // exitprof's programs ran for all of the run's exits.
            kernel_cost: run
                .kernel_cost
                .as_deref()
                .map(|c| KernelCostDoc::new(c, run.selected.map_or(recorded, |s| s.exits_in_run))),
            probe_effect: run.probe_effect.clone(),
            probes: run.plan.points.iter().cloned().map(PlannedJson::from).collect(),
            unavailable: run.plan.unavailable.clone(),
            exitprof: run.own_cost,
            selected: run.selected.map(SelectedDoc::new),
        }
    }
}

/// Keys only the documents of `compare` and `sweep` have.
const COMPARISON_KEYS: [&str; 2] = ["on", "rows"];

impl RunDocument {
    /// Reads a run document (what `--json` printed) of this schema version or an earlier one,
    /// the documents of releases before the version key included; says what is wrong with
    /// anything else, a newer version among it.
    pub fn from_json(text: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| {
            if e.is_eof() {
                format!("the JSON ends early ({e}): a truncated run document?")
            } else {
                format!("not a JSON document: {e}")
            }
        })?;
        let not_a_run = "is not an exitprof run document (what `exitprof --json` prints)";
        if COMPARISON_KEYS.iter().any(|k| value.get(k).is_some()) {
            return Err(format!(
                "{not_a_run}: it is a compare or sweep document; diff compares the documents of \
                 plain runs"
            ));
        }
        // Documents before the version key are version 0; a newer one may mean anything.
        match value.get("schema").map_or(Some(0), serde_json::Value::as_u64) {
            None => return Err(format!("{not_a_run}: its `schema` is not a version number")),
            Some(version) if version > u64::from(SCHEMA) => {
                return Err(format!(
                    "it is a run document of schema version {version}, written by a newer \
                     exitprof; this one reads versions up to {SCHEMA}: read it with that \
                     exitprof or a newer one"
                ));
            }
            Some(_) => {}
        }
        let doc: Self = serde_json::from_value(value).map_err(|e| format!("{not_a_run}: {e}"))?;
        match doc.stages.first() {
            Some(exit) if exit.name == "exit" && exit.latency.count > 0 => Ok(doc),
            Some(exit) if exit.name == "exit" => Err("it records no exit".to_owned()),
            _ => Err(format!("{not_a_run}: its first stage is not the whole exit, `exit`")),
        }
    }

    /// Exits in the whole exit's row.
    pub fn exits(&self) -> u64 {
        self.stages.first().map_or(0, |exit| exit.latency.count)
    }

    /// The stages, the whole exit left out.
    pub fn parts(&self) -> &[StageDoc] {
        self.stages.get(1..).unwrap_or_default()
    }
}

impl WorkloadDoc {
    pub fn new(target: &Target, duration_s: Option<f64>) -> Self {
        match target {
            Target::Storm(Storm::Threads(p)) => Self::Threads(*p),
            Target::Storm(Storm::Fork(f)) => Self::Fork(*f),
            Target::Storm(Storm::Ipcns(f)) => Self::Ipcns(*f),
            Target::Storm(Storm::Netns(n)) => Self::Netns(*n),
            Target::Command(argv) => Self::Command {
                command: argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            },
            Target::Pid(pid) => Self::Pid { pid: *pid, duration_s },
            Target::Comm(comm) => Self::Comm { comm: comm.clone(), duration_s },
            Target::Cgroup(path) => {
                Self::Cgroup { cgroup: path.to_string_lossy().into_owned(), duration_s }
            }
            Target::All => Self::All { duration_s },
        }
    }

    /// The workload's kind and every parameter it was given, as the document names them (a
    /// parameter not given, `null`, is not one of this run's): whatever the workload, so that a
    /// new workload's parameters are shown and exported without a change where they are.
    pub fn fields(&self) -> (String, Vec<(String, serde_json::Value)>) {
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(self) else {
            unreachable!("a workload document is a JSON object of plain values")
        };
        let kind = fields.get("kind").and_then(|k| k.as_str()).unwrap_or_default().to_owned();
        let params = fields.into_iter().filter(|(k, v)| k != "kind" && !v.is_null()).collect();
        (kind, params)
    }

    /// `threads (threads=200 reps=3 stagger_us=2)`: the kind and the parameters given.
    pub fn describe(&self) -> String {
        let (kind, params) = self.fields();
        let params: Vec<String> = params
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                serde_json::Value::Array(items) => {
                    let words: Vec<String> = items
                        .iter()
                        .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                        .collect();
                    format!("{k}={}", words.join(" "))
                }
                other => format!("{k}={other}"),
            })
            .collect();
        if params.is_empty() { kind } else { format!("{kind} ({})", params.join(" ")) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::{Duration, SystemTime};

    use exitprof_common::point::{ExitFn, Marker, Point};

    use super::*;
    use crate::{
        analysis::{
            blocking::BlockedReport,
            deferred::DeferredWork,
            records::{Exit, PointHit},
            teardown::Teardowns,
        },
        kernel::{kallsyms::Kallsyms, version::KernelVersion},
        probes::plan::{How, Plan, SiteId},
        profiled::workload::ChildOutcome,
        run::own_cost::CpuTime,
    };

    /// A run as `run::run` returns it, from 2000 exits with known hits: the start syscall,
    /// `exit_files` entry and return, the final switch.
    pub(crate) fn synthetic_run() -> RunOutcome {
        let plan = Plan::with_sites(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                (SiteId::Function(ExitFn::ExitFiles), How::Fentry, "exit_files"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        let mut profile = Profile::new(&plan);
        for i in 0..2_000u64 {
            let t0 = i * 1_000_000;
            let hits = [
                (Point::Marker(Marker::SysEnterExit), t0, 0),
                (Point::Enter(ExitFn::ExitFiles), t0 + 900 + i % 50 * 10, 0),
                (Point::Return(ExitFn::ExitFiles), t0 + 3_000 + i % 300 * 20, 0),
                (Point::Marker(Marker::FinalSwitch), t0 + 10_000 + i * i % 70_000, i % 3 * 1_000),
            ];
            profile.add(&Exit {
                pid: 1_000 + i as u32,
                tgid: 1_000,
                hits: hits
                    .map(|(point, ts_ns, off_cpu_ns)| PointHit {
                        point,
                        ts_ns,
                        off_cpu_ns,
                        runq_ns: 0,
                    })
                    .to_vec(),
                ..Exit::default()
            });
        }
        let storm = ThreadsParams { threads: 200, reps: 10, stagger_us: 2, rate: None };
        let elapsed = Duration::from_millis(110);
        RunOutcome {
            plan,
            target: Target::Storm(Storm::Threads(storm)),
            duration: None,
            expected_exits: Some(2_000),
            child: Some(ChildOutcome {
                statuses: vec![(1_000, 0)],
                user: Duration::from_millis(12),
                sys: Duration::from_millis(150),
                elapsed,
                report: None,
            }),
            elapsed,
            ended: Ended::Workload,
            burst_rate: None,
            started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000),
            profile,
            groups: None,
            deferred: DeferredWork::new(true, true, false),
            teardowns: Teardowns::new(true, true).report(&Kallsyms::of_symbols(&[])),
            blocked: BlockedReport::default(),
            on_cpu: OnCpuReport::default(),
            losses: Losses::default(),
            kernel_cost: None,
            probe_effect: None,
            interrupted: None,
            own_cost: OwnCost {
                cpu: CpuTime::default(),
                collecting: CpuTime::default(),
                peak_rss_bytes: None,
            },
            selected: None,
        }
    }

    #[test]
    fn kernel_cost_is_per_run_and_per_exit_costliest_first() {
        let cost =
            |program: &str, runs, run_ns| ProgramCost { program: program.to_owned(), runs, run_ns };
        let costs = [
            cost("task_newtask", 0, 0),
            cost("sched_switch", 400, 60_000),
            cost("exit", 200, 90_000),
        ];
        let doc = KernelCostDoc::new(&costs, 100);
        let order: Vec<&str> = doc.programs.iter().map(|p| p.program.as_str()).collect();
        assert_eq!(order, ["exit", "sched_switch", "task_newtask"]);
        assert_eq!((doc.runs, doc.run_ns, doc.ns_per_exit), (600, 150_000, Some(1_500.0)));
        let switch = &doc.programs[1];
        assert_eq!((switch.ns_per_run, switch.ns_per_exit), (Some(150.0), Some(600.0)));
        assert_eq!(doc.programs[2].ns_per_run, None);
        assert_eq!(KernelCostDoc::new(&costs, 0).ns_per_exit, None);
    }
}
