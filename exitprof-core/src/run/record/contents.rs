//! What a record file holds besides the raw records, as JSON: the run's setup in its first
//! frame ([`Opening`]) and how it ended in its last ([`Closing`]).
//!
//! The plan, the target and the kernel's counters have types of their own here: their
//! documents' shapes are made for reading (names of programs added, counters left out), not for
//! reading back. The other parts are kept as they serialize; the test that reads an old record
//! file finds a change that would break it.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    os::unix::ffi::{OsStrExt as _, OsStringExt as _},
    time::{Duration, SystemTime},
};

use exitprof_common::counters;
use serde::{Deserialize, Serialize};

use crate::{
    analysis::groups::GroupOptions,
    kernel::{bpf_object::BpfObject, exit_path::ExitPath, version::KernelVersion},
    probes::{
        counts::{KernelLosses, ProgramCost},
        plan::{AttachMode, How, Plan, Planned, SiteId, Unplanned},
    },
    profiled::{ForkParams, NetnsParams, Storm, Target, ThreadsParams, workload::ChildOutcome},
    run::{
        outcome::{Ended, RunEnd, RunOutcome, RunSetup},
        own_cost::OwnCost,
    },
};

/// The first frame: what the run set out to do.
#[derive(Serialize, Deserialize)]
pub struct Opening {
    /// The exitprof that wrote the file, for people (the format's version is what is checked).
    pub exitprof: String,
    pub kernel: KernelDoc,
    pub plan: PlanDoc,
    pub target: TargetDoc,
    pub duration: Option<Duration>,
    pub expected_exits: Option<u64>,
    pub burst_rate: Option<f64>,
    pub started_at: SystemTime,
    /// The run's number, which its exit records carry.
    pub epoch: u32,
    /// How its exits were split by workload (format 2).
    #[serde(default)]
    pub groups: Option<GroupOptions>,
}

/// The kernel the run profiled: its release, and the version the exit path's table is chosen
/// by.
#[derive(Serialize, Deserialize)]
pub struct KernelDoc {
    pub release: String,
    pub version: KernelVersion,
}

#[derive(Serialize, Deserialize)]
pub struct PlanDoc {
    pub mode: AttachMode,
    pub object: ObjectDoc,
    pub points: Vec<PointDoc>,
    pub unavailable: Vec<UnplannedDoc>,
}

/// The eBPF object by its name; what it does follows from it.
#[derive(Serialize, Deserialize)]
pub struct ObjectDoc {
    pub name: String,
    pub missing: Vec<String>,
}

#[derive(Serialize, Deserialize)]
pub struct PointDoc {
    pub point: String,
    pub how: How,
    pub target: String,
    pub note: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub struct UnplannedDoc {
    pub point: String,
    pub reason: String,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TargetDoc {
    Threads(ThreadsParams),
    Fork(ForkParams),
    Ipcns(ForkParams),
    Netns(NetnsParams),
    /// The command line's bytes, which need not be UTF-8.
    Command {
        argv: Vec<Vec<u8>>,
    },
    Pid {
        pid: u32,
    },
    Comm {
        comm: String,
    },
    /// The cgroup's path's bytes.
    Cgroup {
        path: Vec<u8>,
    },
    All,
}

/// The last frame: how the run ended, and the names of its stacks.
#[derive(Serialize, Deserialize)]
pub struct Closing {
    pub child: Option<ChildOutcome>,
    pub elapsed: Duration,
    pub ended: Ended,
    /// The kernel side's counters by name (a counter an older exitprof did not have is 0).
    pub kernel_losses: BTreeMap<String, u64>,
    pub probe_misses: u64,
    pub unfinished: u64,
    pub kernel_cost: Option<Vec<ProgramCost>>,
    /// The signal that cut the run short: the file is of a partial run.
    pub interrupted: Option<i32>,
    pub own_cost: OwnCost,
    /// What names the frames of the run's stacks, as (address, name), lowest first: the
    /// functions they lie in, at made-up addresses (`super::opaque`; the kernel's own addresses
    /// in files of earlier builds).
    pub symbols: Vec<(u64, String)>,
}

impl Opening {
    pub fn new(setup: &RunSetup) -> Self {
        let plan = &setup.plan;
        Self {
            exitprof: env!("CARGO_PKG_VERSION").to_owned(),
            kernel: KernelDoc { release: plan.kernel.clone(), version: plan.exit_path.version() },
            plan: PlanDoc::new(plan),
            target: TargetDoc::new(&setup.target),
            duration: setup.duration,
            expected_exits: setup.expected_exits,
            burst_rate: setup.burst_rate,
            started_at: setup.started_at,
            epoch: setup.epoch,
            groups: setup.groups,
        }
    }

    /// The run's setup; `Err(why)` when the file names what this exitprof does not know.
    pub fn setup(self) -> Result<RunSetup, String> {
        Ok(RunSetup {
            plan: self.plan.plan(&self.kernel)?,
            target: self.target.target(),
            duration: self.duration,
            expected_exits: self.expected_exits,
            burst_rate: self.burst_rate,
            started_at: self.started_at,
            epoch: self.epoch,
            groups: self.groups,
        })
    }
}

impl PlanDoc {
    fn new(plan: &Plan) -> Self {
        Self {
            mode: plan.mode,
            object: ObjectDoc {
                name: plan.object.name.clone(),
                missing: plan.object.missing.clone(),
            },
            points: plan
                .points
                .iter()
                .map(|p| PointDoc {
                    point: p.point.to_owned(),
                    how: p.how,
                    target: p.target.clone(),
                    note: p.note.clone(),
                })
                .collect(),
            unavailable: plan
                .unavailable
                .iter()
                .map(|u| UnplannedDoc { point: u.point.clone(), reason: u.reason.clone() })
                .collect(),
        }
    }

    /// The plan, its exit path rebuilt from the kernel's version.
    fn plan(self, kernel: &KernelDoc) -> Result<Plan, String> {
        let ObjectDoc { name, missing } = self.object;
        let object = BpfObject::named(&name, missing)
            .ok_or_else(|| format!("an unknown object {name:?}"))?;
        let points = self
            .points
            .into_iter()
            .map(|p| {
                let what = format!("probe point {:?} attached as {}", p.point, p.how);
                Planned::restored(&p.point, p.how, p.target, p.note)
                    .ok_or_else(|| format!("an unknown {what}"))
            })
            .collect::<Result<_, _>>()?;
        let unavailable = self
            .unavailable
            .into_iter()
            .map(|u| match SiteId::named(&u.point) {
                Some(site) => Ok(Unplanned { point: site.name().to_owned(), reason: u.reason }),
                None => Err(format!("an unknown probe point {:?}", u.point)),
            })
            .collect::<Result<_, _>>()?;
        Ok(Plan {
            kernel: kernel.release.clone(),
            mode: self.mode,
            object,
            points,
            unavailable,
            exit_path: ExitPath::for_kernel(kernel.version),
        })
    }
}

impl TargetDoc {
    fn new(target: &Target) -> Self {
        match target {
            Target::Storm(Storm::Threads(p)) => Self::Threads(*p),
            Target::Storm(Storm::Fork(p)) => Self::Fork(*p),
            Target::Storm(Storm::Ipcns(p)) => Self::Ipcns(*p),
            Target::Storm(Storm::Netns(p)) => Self::Netns(*p),
            Target::Command(argv) => {
                Self::Command { argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect() }
            }
            Target::Pid(pid) => Self::Pid { pid: *pid },
            Target::Comm(comm) => Self::Comm { comm: comm.clone() },
            Target::Cgroup(path) => Self::Cgroup { path: path.as_os_str().as_bytes().to_vec() },
            Target::All => Self::All,
        }
    }

    fn target(self) -> Target {
        match self {
            Self::Threads(p) => Target::Storm(Storm::Threads(p)),
            Self::Fork(p) => Target::Storm(Storm::Fork(p)),
            Self::Ipcns(p) => Target::Storm(Storm::Ipcns(p)),
            Self::Netns(p) => Target::Storm(Storm::Netns(p)),
            Self::Command { argv } => {
                Target::Command(argv.into_iter().map(OsString::from_vec).collect())
            }
            Self::Pid { pid } => Target::Pid(pid),
            Self::Comm { comm } => Target::Comm(comm),
            Self::Cgroup { path } => Target::Cgroup(OsString::from_vec(path).into()),
            Self::All => Target::All,
        }
    }
}

impl Closing {
    /// How `outcome`'s run ended, with the symbols its stacks lie in.
    pub fn new(outcome: &RunOutcome, symbols: Vec<(u64, String)>) -> Self {
        Self {
            child: outcome.child.clone(),
            elapsed: outcome.elapsed,
            ended: outcome.ended,
            kernel_losses: outcome.losses.kernel().by_name(),
            probe_misses: outcome.losses.get(counters::PROBE_MISSES),
            unfinished: outcome.losses.get(counters::UNFINISHED),
            kernel_cost: outcome.kernel_cost.clone(),
            interrupted: outcome.interrupted,
            own_cost: outcome.own_cost,
            symbols,
        }
    }

    /// How the run ended, and what exitprof had cost by then.
    pub fn end(self) -> (RunEnd, OwnCost, Vec<(u64, String)>) {
        let end = RunEnd {
            child: self.child,
            elapsed: self.elapsed,
            ended: self.ended,
            kernel_losses: KernelLosses::from_names(&self.kernel_losses),
            probe_misses: self.probe_misses,
            unfinished: self.unfinished,
            kernel_cost: self.kernel_cost,
            interrupted: self.interrupted,
        };
        (end, self.own_cost, self.symbols)
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{ExitFn, Marker};

    use super::*;
    use crate::analysis::groups::GroupBy;
    use crate::probes::plan::{Plan, Unplanned};

    fn setup() -> RunSetup {
        let mut plan = Plan::with_sites(
            KernelVersion::new(6, 12, 0),
            &[
                (SiteId::Marker(Marker::DoExit), How::Kprobe, "do_exit"),
                (SiteId::Function(ExitFn::ExitFiles), How::Fentry, "exit_files"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        plan.kernel = "6.12.0-9-amd64".to_owned();
        plan.object = BpfObject::named("compat", vec!["bpf_loop (5.17)".to_owned()]).unwrap();
        plan.points[1].note = Some("a note".to_owned());
        let acct = SiteId::Function(ExitFn::AcctProcess).name();
        plan.unavailable
            .push(Unplanned { point: acct.to_owned(), reason: "not a symbol".to_owned() });
        RunSetup {
            plan,
            // A command line need not be UTF-8.
            target: Target::Command(vec![OsString::from_vec(vec![0xff, b'x']), "-c".into()]),
            duration: Some(Duration::from_millis(1500)),
            expected_exits: Some(8),
            burst_rate: Some(0.1 + 0.2),
            started_at: SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789),
            epoch: 3,
            groups: Some(GroupOptions { by: GroupBy::Comm, max_groups: 7, ttl: None }),
        }
    }

    fn read_back(json: &[u8]) -> Result<RunSetup, String> {
        serde_json::from_slice::<Opening>(json).map_err(|e| e.to_string())?.setup()
    }

    #[test]
    fn the_setup_reads_back_as_it_was() {
        let setup = setup();
        let back = read_back(&serde_json::to_vec(&Opening::new(&setup)).unwrap()).unwrap();
        let doc = |plan: &Plan| serde_json::to_value(plan).unwrap();
        assert_eq!(doc(&back.plan), doc(&setup.plan));
        assert_eq!(back.plan.exit_path.version(), KernelVersion::new(6, 12, 0));
        assert_eq!(back.target, setup.target);
        assert_eq!(back.duration, setup.duration);
        assert_eq!((back.expected_exits, back.burst_rate), (Some(8), Some(0.1 + 0.2)));
        assert_eq!((back.started_at, back.epoch), (setup.started_at, 3));
        assert_eq!(back.groups, setup.groups);
    }

    #[test]
    fn a_plan_this_exitprof_cannot_have_made_is_refused() {
        let json = serde_json::to_string(&Opening::new(&setup())).unwrap();
        for (from, to, why) in [
            ("\"exit_files\"", "\"exit_nothing\"", "exit_nothing"),
            ("\"how\":\"btf_tracepoint\"", "\"how\":\"kprobe\"", "final switch"),
            ("\"compat\"", "\"other\"", "other"),
            ("\"acct_process\"", "\"no_such_point\"", "no_such_point"),
        ] {
            assert!(json.contains(from), "{from}");
            let Err(error) = read_back(json.replacen(from, to, 1).as_bytes()) else {
                panic!("{from} -> {to} read")
            };
            assert!(error.contains(why), "{from} -> {to}: {error}");
        }
    }

    #[test]
    fn every_kernel_counter_reads_back() {
        let mut losses = KernelLosses::default();
        losses.0[counters::RINGBUF_FULL as usize] = 1;
        losses.0[counters::STRAY_ENDS as usize] = 2;
        assert_eq!(KernelLosses::from_names(&losses.by_name()), losses);
        let missing = BTreeMap::from([("samples".to_owned(), 5), ("newer".to_owned(), 6)]);
        assert_eq!(KernelLosses::from_names(&missing).0[counters::SAMPLES as usize], 5);
    }
}
