//! The machine-readable result of a run (`--json`).

use serde::Serialize;

use crate::{
    cli::{ThreadsParams, WorkloadKind},
    deferred::DeferredReport,
    histogram::{Bucket, Latency},
    plan::{AttachMode, Planned, Unplanned},
    run::{Losses, RunOutcome},
    verdict::run_verdict,
};

/// The `--json` document. Later versions add keys; the ones here stay.
#[derive(Debug, Serialize)]
pub struct RunDocument {
    /// The run was cut short (Ctrl-C, SIGTERM): the figures cover what ran until then.
    pub partial: bool,
    pub kernel: String,
    pub attach: AttachMode,
    pub workload: WorkloadDoc,
    pub exits_expected: u64,
    pub exits_recorded: u64,
    /// Exits lost, all causes together (`losses` has them apart).
    pub lost: u64,
    pub losses: Losses,
    pub elapsed_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    /// Exits per second, as the 2006 thread computed it: (created + exited) / elapsed / 2.
    pub exit_rate: f64,
    /// The whole exit first (named `exit`), then each stage in kernel order.
    pub stages: Vec<StageDoc>,
    /// Where the time went, in a sentence or two.
    pub verdict: String,
    /// Work the exits caused in other contexts, joined back to them.
    pub deferred: DeferredReport,
    pub probes: Vec<Planned>,
    pub unavailable: Vec<Unplanned>,
}

#[derive(Debug, Serialize)]
pub struct WorkloadDoc {
    pub kind: WorkloadKind,
    #[serde(flatten)]
    pub threads: ThreadsParams,
}

#[derive(Debug, Serialize)]
pub struct StageDoc {
    pub name: String,
    pub count: u64,
    pub mean_ns: f64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub total_ns: u128,
    pub share_of_exit: f64,
    pub off_cpu_share: f64,
    /// What the kernel does in this stage.
    pub covers: Vec<String>,
    /// The histogram: every non-empty bucket, lowest first.
    pub buckets: Vec<Bucket>,
}

impl StageDoc {
    fn new(name: String, latency: &Latency, share_of_exit: f64, covers: Vec<String>) -> Self {
        let s = latency.summary();
        Self {
            name,
            count: s.count,
            mean_ns: s.mean_ns,
            min_ns: s.min_ns,
            p50_ns: s.p50_ns,
            p90_ns: s.p90_ns,
            p99_ns: s.p99_ns,
            p999_ns: s.p999_ns,
            max_ns: s.max_ns,
            total_ns: s.total_ns,
            share_of_exit,
            off_cpu_share: s.off_cpu_share(),
            covers,
            buckets: latency.buckets(),
        }
    }
}

impl RunDocument {
    pub fn new(run: &RunOutcome) -> Self {
        let elapsed_s = run.child.elapsed.as_secs_f64();
        let recorded = run.profile.exits;
        let rows = run.profile.rows();
        let verdict = run_verdict(run.profile.exit(), &rows);
        let mut stages =
            vec![StageDoc::new("exit".to_owned(), run.profile.exit(), 1.0, Vec::new())];
        stages.extend(rows.into_iter().map(|row| {
            StageDoc::new(
                row.stage.name.clone(),
                row.latency,
                row.share_of_exit,
                row.stage.covers.clone(),
            )
        }));
        Self {
            partial: run.interrupted.is_some(),
            kernel: run.plan.kernel.clone(),
            attach: run.plan.mode,
            workload: WorkloadDoc { kind: run.args.workload, threads: run.args.threads },
            exits_expected: run.expected_exits,
            exits_recorded: recorded,
            lost: run.losses.exits(),
            losses: run.losses,
            elapsed_s,
            user_s: run.child.user.as_secs_f64(),
            sys_s: run.child.sys.as_secs_f64(),
            exit_rate: run.exit_rate(),
            stages,
            verdict,
            deferred: run.deferred.report(),
            probes: run.plan.points.clone(),
            unavailable: run.plan.unavailable.clone(),
        }
    }
}
