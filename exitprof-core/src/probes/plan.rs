//! The probe plan: which probe points a kernel offers and how each one is attached, as the
//! engine resolved it on that kernel (or a record file kept it), and what follows from it: which
//! stages, starts and teardowns the run can see.
//!
//! Every point and its candidate attach targets across kernel versions are in one declarative
//! table (`sites.rs`); the engine resolves it against the running kernel's BTF and kallsyms.

use std::fmt;

use exitprof_common::point::{Marker, Point};
use serde::{Deserialize, Serialize};

pub use super::sites::{DeferredSite, How, SiteId};
use super::sites::{Hook, SHM_EXIT_NS, START_MARKERS, TASK_FREE, WORK_FUNCTIONS, site_of};
use crate::kernel::{bpf_object::BpfObject, exit_path::ExitPath};

/// The attach mode asked for on the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Per point, the best the kernel offers: fentry, then kprobe, then tracepoints.
    #[default]
    Auto,
    /// kprobes and kretprobes on functions (tracepoints where a point is one).
    Kprobe,
    /// fentry and fexit on functions (tracepoints where a point is one).
    Fentry,
    /// Tracepoints only.
    Tracepoint,
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Kprobe => "kprobe",
            Self::Fentry => "fentry",
            Self::Tracepoint => "tracepoint",
        })
    }
}

/// Which probe points are attached (`--points`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PointSet {
    /// Every point the kernel offers: the exit cut into stages, deferred work joined.
    #[default]
    Full,
    /// Every point of the exit itself, and of the namespace teardowns exits set off, without
    /// the probes of other deferred work (`kfree` fires on every free of the machine, a
    /// `free_ipc` run's kworker is not followed): what `serve` attaches, which joins only
    /// teardowns.
    Stages,
    /// Only what an exit's start and end need: its first probe and the final switch-out. The
    /// exit is one stage; it checks what the other points cost the exits they time.
    Minimal,
}

/// What the user wants beyond the exit path itself.
#[derive(Clone, Copy, Debug, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "four switches the plan reads apart, none implying another"
)]
pub struct Wants {
    /// Follow IPC namespace frees even where that costs a probe on every `kfree` of the machine
    /// (tracepoint mode); worth it for IPC namespace storms only.
    pub ipc_frees_via_kfree: bool,
    /// Use `syscalls:` tracepoints (the exit syscalls as the start of an exit where `do_exit`
    /// cannot be probed; `wait4` for reaps). Any of them puts every syscall of the machine on
    /// the kernel's traced path.
    pub syscall_tracepoints: bool,
    /// Name the cgroups made and removed during the run (their tracepoints), for exits grouped
    /// by cgroup.
    pub cgroup_paths: bool,
    /// Look up the symbols of function points even where no function can be probed (tracepoint
    /// mode, or a kernel with neither kprobes nor fentry), to say what each would resolve to:
    /// `exitprof plan` does; a run does not, as that reads the whole of kallsyms.
    pub unusable_symbols: bool,
}

/// One point of the resolved plan.
#[derive(Clone, Debug, Serialize)]
#[serde(into = "PlannedJson")]
pub struct Planned {
    pub site: SiteId,
    pub point: &'static str,
    pub how: How,
    /// The symbol or tracepoint attached to.
    pub target: String,
    /// Why this target and not the first candidate, when it is a fallback.
    pub note: Option<String>,
}

impl Planned {
    /// A planned point read back (from a record file); `None` when no site has that name or it
    /// cannot be attached that way.
    pub fn restored(point: &str, how: How, target: String, note: Option<String>) -> Option<Self> {
        let site = SiteId::named(point)?;
        let fits = match site_of(site).hook {
            Hook::Function { .. } => matches!(how, How::Kprobe | How::Fentry),
            Hook::BtfTracepoint(_) => how == How::BtfTracepoint,
            Hook::Tracepoint { .. } => how == How::Tracepoint,
        };
        fits.then(|| Self { site, point: site.name(), how, target, note })
    }

    /// The eBPF programs that implement this point, each with whether it is a return probe.
    pub fn programs(&self) -> Vec<(&'static str, bool)> {
        site_of(self.site).hook.programs(self.how)
    }
}

/// A planned point as the documents show it, with the programs that implement it: the names
/// `--bpf-stats` counts runs under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedJson {
    pub point: String,
    pub how: How,
    pub target: String,
    pub programs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<Planned> for PlannedJson {
    fn from(planned: Planned) -> Self {
        let programs =
            planned.programs().into_iter().map(|(program, _)| program.to_owned()).collect();
        let Planned { point, how, target, note, .. } = planned;
        Self { point: point.to_owned(), how, target, programs, note }
    }
}

/// A point the plan leaves out, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unplanned {
    pub point: String,
    pub reason: String,
}

/// The resolved probe plan for the running kernel.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub kernel: String,
    pub mode: AttachMode,
    /// The eBPF object this kernel loads, and how it does each part of its work.
    pub object: BpfObject,
    pub points: Vec<Planned>,
    pub unavailable: Vec<Unplanned>,
    #[serde(skip)]
    pub exit_path: ExitPath,
}

impl Plan {
    /// A plan with the given sites attached, as the resolver would produce it: for tests of
    /// what is made of a plan, on any kernel version.
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_sites(
        version: crate::kernel::version::KernelVersion,
        sites: &[(SiteId, How, &str)],
    ) -> Self {
        Self {
            kernel: version.to_string(),
            mode: AttachMode::Auto,
            object: BpfObject::default_object(),
            points: sites
                .iter()
                .map(|&(site, how, target)| Planned {
                    site,
                    point: site.name(),
                    how,
                    target: target.to_owned(),
                    note: None,
                })
                .collect(),
            unavailable: Vec::new(),
            exit_path: ExitPath::for_kernel(version),
        }
    }

    /// The plan with only the points of `set`: for [`PointSet::Minimal`], the start markers of
    /// an exit (and the first exit-only point, where they do not cover every way into an exit),
    /// the final switch-out and the task's free (where a slot left by an unseen end is
    /// released); for [`PointSet::Stages`], all but the probes of deferred work (the task's
    /// free and the namespace teardowns kept); the others are listed as left out.
    #[must_use]
    pub fn with_points(self, set: PointSet) -> Self {
        let kept_in_stages = |site: SiteId| {
            !matches!(site, SiteId::Deferred(_)) || site == TASK_FREE || is_teardown(site)
        };
        match set {
            PointSet::Full => return self,
            PointSet::Stages => return self.keeping(kept_in_stages, "--points stages"),
            PointSet::Minimal => {}
        }
        let is_start = |site: SiteId| START_MARKERS.iter().any(|&m| site == SiteId::Marker(m));
        let every_start = self.sees_every_start();
        let kept = |site: SiteId| {
            is_start(site)
                || site == SiteId::Marker(Marker::FinalSwitch)
                || site == TASK_FREE
                || matches!(site, SiteId::Cgroup(_))
                || (!every_start && site == SiteId::Marker(Marker::SchedProcessExit))
        };
        self.keeping(kept, "--points minimal")
    }

    /// The plan with only the points `kept` keeps; the others listed as left out by `set`.
    fn keeping(mut self, kept: impl Fn(SiteId) -> bool, set: &str) -> Self {
        let (points, left_out): (Vec<Planned>, Vec<Planned>) =
            self.points.into_iter().partition(|p| kept(p.site));
        self.points = points;
        self.unavailable.extend(left_out.into_iter().map(|p| Unplanned {
            point: p.point.to_owned(),
            reason: format!("not in the point set ({set})"),
        }));
        self
    }

    /// Whether every exit's start is seen: `do_exit`, or each of the ways into it.
    fn sees_every_start(&self) -> bool {
        let planned = |m: Marker| self.points.iter().any(|p| p.site == SiteId::Marker(m));
        planned(Marker::DoExit) || START_MARKERS[1..].iter().all(|&m| planned(m))
    }

    /// The point exits whose start no probe saw are timed from (the first exit-only point that
    /// opens a record, as the eBPF side has them), where some exits will be; `None` where every
    /// start is seen.
    pub fn late_start_point(&self) -> Option<Point> {
        if self.sees_every_start() {
            return None;
        }
        [Marker::SchedProcessExit, Marker::DoTaskDead]
            .into_iter()
            .find(|&m| self.points.iter().any(|p| p.site == SiteId::Marker(m)))
            .map(Point::Marker)
    }

    /// The eBPF program that runs at `point`, as the plan attaches it (`None` where the point
    /// is not planned).
    pub fn program_at(&self, point: Point) -> Option<&'static str> {
        let (site, ret) = match point {
            Point::Marker(m) => (SiteId::Marker(m), false),
            Point::Enter(f) => (SiteId::Function(f), false),
            Point::Return(f) => (SiteId::Function(f), true),
        };
        let planned = self.points.iter().find(|p| p.site == site)?;
        planned.programs().into_iter().find(|&(_, is_ret)| is_ret == ret).map(|(name, _)| name)
    }

    /// Whether the cgroups made and removed are named (exits grouped by cgroup).
    pub fn names_cgroups(&self) -> bool {
        self.points.iter().any(|p| matches!(p.site, SiteId::Cgroup(_)))
    }

    /// Whether tasks' frees are seen (`sched_process_free`): where the kernel side releases the
    /// slots of exits whose end it never saw.
    pub fn sees_task_frees(&self) -> bool {
        self.points.iter().any(|p| p.site == TASK_FREE)
    }

    /// Whether every IPC namespace `free_ipc` frees is seen by name (`shm_exit_ns` probed).
    pub fn sees_every_ipc_ns_free(&self) -> bool {
        self.points.iter().any(|p| p.site == SHM_EXIT_NS)
    }

    /// Whether the RCU grace period inside `free_ipc` runs is measured (`synchronize_rcu`
    /// probed).
    pub fn measures_rcu_wait(&self) -> bool {
        self.points.iter().any(|p| p.site == SiteId::Deferred(DeferredSite::SynchronizeRcu))
    }

    /// The eBPF side's `WORK_TIMED`: the work functions whose runs the workqueue tracepoints
    /// time, where they stand in for the function's own probes.
    pub fn work_timed(&self) -> u32 {
        let planned = |site: SiteId| self.points.iter().any(|p| p.site == site);
        WORK_FUNCTIONS
            .iter()
            .filter(|(_, _, fallbacks, _)| fallbacks.iter().all(|&f| planned(SiteId::Deferred(f))))
            .map(|&(_, _, _, bit)| bit)
            .fold(0, |bits, bit| bits | bit)
    }

    /// Whether the runs of a namespace teardown's work function are seen: by its own probes,
    /// or by its work item's (`function` as `WORK_FUNCTIONS` names it).
    pub fn sees_teardowns_of(&self, function: &str) -> bool {
        let planned = |site: SiteId| self.points.iter().any(|p| p.site == site);
        WORK_FUNCTIONS.iter().filter(|(name, ..)| *name == function).any(
            |(_, site, fallbacks, _)| {
                planned(*site) || fallbacks.iter().all(|&f| planned(SiteId::Deferred(f)))
            },
        )
    }

    /// Whether the runs of the network namespace teardown, `cleanup_net`, are seen.
    pub fn sees_net_teardowns(&self) -> bool {
        self.sees_teardowns_of("cleanup_net")
    }

    /// Whether the user namespace teardowns, `free_user_ns`, are seen.
    pub fn sees_user_ns_teardowns(&self) -> bool {
        self.sees_teardowns_of("free_user_ns")
    }

    /// Whether reaps are seen as `wait4` returns, which name the child by its pid in the
    /// parent's PID namespace (else by `release_task`, which names it by its kernel pid).
    pub fn reaps_from_wait4(&self) -> bool {
        self.points.iter().any(|p| p.site == SiteId::Deferred(DeferredSite::Wait4Return))
    }
}

/// Whether `site` observes a namespace teardown (its work function, or its work item's runs).
fn is_teardown(site: SiteId) -> bool {
    WORK_FUNCTIONS.iter().filter(|(function, ..)| *function != "free_ipc").any(
        |(_, primary, fallbacks, _)| {
            site == *primary || fallbacks.iter().any(|&f| site == SiteId::Deferred(f))
        },
    )
}
