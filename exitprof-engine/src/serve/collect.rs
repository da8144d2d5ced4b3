//! serve's collection loop: records read from the ring buffers as a run reads them, on a slower
//! beat, folded into the profile's histograms, and a snapshot published for the scrapes.

use std::{collections::BTreeMap, future::Future, pin::Pin, sync::Arc, time::Duration};

use exitprof_core::analysis::{
    groups::{GroupOptions, Groups},
    profile::Profile,
    records::{Exit, decode_deferred},
    session::Undecodable,
    teardown::{TeardownBuckets, TeardownKind, Teardowns},
};
use tokio::{sync::watch, time::MissedTickBehavior};

use super::{
    metrics::{Snapshot, TeardownSnapshot},
    read_errors::{ReadErrors, Source},
};
use crate::{
    base::signals::Signals,
    probes::{
        counts::{KernelLosses, ProgramCost},
        load::Probes,
        maps,
        plan::Plan,
    },
    run::{
        Losses,
        collect::RecordSink,
        start::{Attached, Stop},
    },
};

/// How often records are read, unless a ring buffer a quarter full wakes serve first. Longer
/// than a run's beat: serve has no end to be exact about, and each wakeup costs it CPU when the
/// machine is idle (at 20 ms, 0.5 % of a CPU with no exit at all).
const READ_INTERVAL: Duration = Duration::from_millis(250);

/// How often a new snapshot is published when something changed: scrapes see exits at most this
/// late (plus a read), and an idle serve does no work for its snapshots.
const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

/// What ended serving.
pub enum Ended {
    Signal(i32),
    /// The process of `--pid` exited.
    TargetExited,
}

/// What serve keeps of the records: the exits' histograms, fixed in size, and their groups',
/// bounded in number; the namespace teardowns, joined to their exits as they come (what waits
/// for its other side expires), in histograms by kind (and by group); and the last figures read
/// from the kernel, served again where a read fails.
struct Folded {
    profile: Profile,
    groups: Option<Groups>,
    undecodable: Undecodable,
    kernel_losses: KernelLosses,
    probe_misses: u64,
    costs: Vec<ProgramCost>,
    read_errors: ReadErrors,
    teardowns: Teardowns,
    teardown_series: BTreeMap<TeardownKind, TeardownBuckets>,
}

impl RecordSink for Folded {
    fn exit_record(&mut self, bytes: &[u8]) {
        match Exit::decode(bytes) {
            Ok(exit) => {
                let spans = self.profile.add(&exit);
                if let Some(groups) = &mut self.groups {
                    groups.add(&exit, &self.profile, &spans);
                }
                self.teardowns.exit(&exit);
                self.fold_teardowns();
            }
            Err(e) => {
                self.undecodable.exits += 1;
                log::debug!("undecodable exit record: {e}");
            }
        }
    }

    /// Of deferred work, only namespace teardowns are served (`--points stages` attaches no
    /// other deferred work's probes but the task's free, which `Teardowns` reads for them).
    fn deferred_record(&mut self, bytes: &[u8]) {
        match decode_deferred(bytes) {
            Some(record) => {
                self.teardowns.record(&record);
                self.fold_teardowns();
            }
            None => self.undecodable.deferred += 1,
        }
    }

    /// Sampling and block stacks are off in serve: no stack comes.
    fn stack_record(&mut self, _: &[u8]) {}

    fn cgroup_record(&mut self, bytes: &[u8]) {
        if let Some(groups) = &mut self.groups {
            groups.cgroup_paths.record(bytes);
        }
    }

    fn knows_cgroup(&self, id: u64) -> bool {
        self.groups.as_ref().is_none_or(|g| g.cgroup_paths.knows(id))
    }
}

impl Folded {
    fn new(plan: &Plan, groups: Option<GroupOptions>) -> Self {
        Self {
            profile: Profile::new(plan),
            groups: groups.map(Groups::series_only),
            undecodable: Undecodable::default(),
            kernel_losses: KernelLosses::default(),
            probe_misses: 0,
            costs: Vec::new(),
            read_errors: ReadErrors::default(),
            teardowns: Teardowns::new(plan.sees_net_teardowns(), plan.sees_user_ns_teardowns()),
            teardown_series: BTreeMap::new(),
        }
    }

    /// The teardowns now: each kind seen, its runs and joins, and its histograms.
    fn teardown_snapshot(&self) -> TeardownSnapshot {
        let kinds = TeardownKind::ALL.into_iter().filter(|&k| self.teardowns.sees(k));
        TeardownSnapshot {
            kinds: kinds
                .map(|k| {
                    let series = self.teardown_series.get(&k).cloned().unwrap_or_default();
                    (k, self.teardowns.counts(k), series)
                })
                .collect(),
        }
    }

    /// The teardowns joined since the last call, into the histograms.
    fn fold_teardowns(&mut self) {
        for joined in self.teardowns.take_joined() {
            self.teardown_series.entry(joined.torn.kind).or_default().record(&joined);
            if let Some(groups) = &mut self.groups {
                groups.add_teardown(&joined);
            }
        }
    }

    /// Every loss so far (none is `unfinished`: serve has no end to finish by); a count that
    /// cannot be read now is served as last read.
    fn losses(&mut self, probes: &Probes) -> Losses {
        let errors = &mut self.read_errors;
        let kernel = errors.keep(
            Source::LossCounters,
            maps::kernel_losses(&probes.ebpf),
            &mut self.kernel_losses,
        );
        let probe_misses =
            errors.keep(Source::ProbeMisses, probes.misses(), &mut self.probe_misses);
        Losses::new(&kernel, self.undecodable, &self.profile, 0, probe_misses)
            .with(self.teardowns.counted())
    }

    /// Each program's runs and run time, as last read where they cannot be read now.
    fn costs(&mut self, probes: &Probes) -> Vec<ProgramCost> {
        self.read_errors.keep(Source::ProgramStats, probes.costs(), &mut self.costs)
    }
}

/// The kernel's monotonic clock, which exit records' times are in.
fn monotonic_now_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a pointer to a timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Collects until a signal (or the `--pid` process's exit), publishing snapshots as it goes;
/// with `bpf_stats`, each with the programs' runs and run time so far.
pub async fn collect(
    attached: &mut Attached,
    plan: &Plan,
    groups: Option<GroupOptions>,
    bpf_stats: bool,
    mut stop: Pin<Box<dyn Future<Output = anyhow::Result<Stop>>>>,
    signals: &mut Signals,
    publish: &watch::Sender<Arc<Snapshot>>,
) -> anyhow::Result<Ended> {
    let (probes, mut streams) = attached.split();
    let mut folded = Folded::new(plan, groups);
    let mut reads = tokio::time::interval(READ_INTERVAL);
    reads.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut publishes = tokio::time::interval(PUBLISH_INTERVAL);
    publishes.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Exits and losses of the last snapshot.
    let mut published = None;
    loop {
        tokio::select! {
            _ = reads.tick() => streams.drain(&mut folded),
            ready = streams.ready() => {
                ready?;
                streams.drain(&mut folded);
            }
            _ = publishes.tick() => {
                let losses = folded.losses(probes);
                let expired = folded.groups.as_mut().map(|g| g.expire(monotonic_now_ns()));
                let teardown_counts = TeardownKind::ALL.map(|k| folded.teardowns.counts(k));
                let state = (folded.profile.exits, losses, folded.read_errors, teardown_counts);
                // The programs' counts move with every context switch: always new.
                if bpf_stats || published.as_ref() != Some(&state) || expired.is_some_and(|n| n > 0) {
                    let costs = if bpf_stats { folded.costs(probes) } else { Vec::new() };
                    let snapshot = Snapshot::take(
                        &folded.profile,
                        folded.groups.as_ref(),
                        losses,
                        costs,
                        folded.read_errors,
                        &folded.teardown_snapshot(),
                    );
                    publish.send_replace(Arc::new(snapshot));
                    published = Some(state);
                }
            }
            stopped = &mut stop => {
                stopped?;
                return Ok(Ended::TargetExited);
            }
            signal = signals.next() => return Ok(Ended::Signal(signal)),
        }
    }
}
