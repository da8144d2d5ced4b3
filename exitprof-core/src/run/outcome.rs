//! What a run is asked to do ([`RunRequest`]) and what it gives back ([`RunOutcome`]): the
//! profile and the reports made of its records, and every exit or part lost on the way
//! ([`Losses`]).

use std::{
    path::PathBuf,
    time::{Duration, SystemTime},
};

use exitprof_common::counters::{self, Count, Kind};
use serde::{Deserialize, Serialize};

use super::{own_cost::OwnCost, record::selection::Selected};
use crate::{
    analysis::{
        blocking::BlockedReport,
        deferred::DeferredWork,
        groups::{GroupOptions, Groups},
        on_cpu::OnCpuReport,
        probe_effect::ProbeEffect,
        profile::Profile,
        session::{Session, Undecodable},
        teardown::TeardownReports,
    },
    kernel::kallsyms::Kallsyms,
    probes::{
        ProbeOptions,
        counts::{KernelLosses, ProgramCost},
        plan::Plan,
    },
    profiled::{Target, workload::ChildOutcome},
};

/// What one run is asked to do, read from the command line.
pub struct RunRequest {
    pub target: Target,
    pub probes: ProbeOptions,
    /// How long to watch targets that do not end by themselves.
    pub duration: Option<Duration>,
    /// The report goes out as one JSON document on stdout: a command's own stdout goes to
    /// stderr.
    pub json: bool,
    /// Size of the exit-record ring buffer; `None`: sized from the target.
    pub ringbuf_bytes: Option<u32>,
    /// Slots for exits in progress; `None`: sized from the target.
    pub exit_slots: Option<u32>,
    /// Have the kernel count the run time of exitprof's programs (--bpf-stats).
    pub bpf_stats: bool,
    /// Keep the run in this file too (`exitprof record`).
    pub record: Option<PathBuf>,
    /// Split the exits by workload.
    pub groups: Option<GroupOptions>,
    /// Show each exit that takes at least this long as it ends (`--slower-than`).
    pub slower_than: Option<Duration>,
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
    /// The exits by workload, where they were grouped.
    pub groups: Option<Groups>,
    pub deferred: DeferredWork,
    /// The namespace teardowns the exits set off, joined to them.
    pub teardowns: TeardownReports,
    /// Where exits blocked, by stage and kernel stack, all their blocked time accounted for.
    pub blocked: BlockedReport,
    /// Where exits computed: sampled kernel stacks by stage.
    pub on_cpu: OnCpuReport,
    pub losses: Losses,
    /// With --bpf-stats: each program's runs and run time while the target ran.
    pub kernel_cost: Option<Vec<ProgramCost>>,
    /// With --bpf-stats: how much of the exits was exitprof's own programs running.
    pub probe_effect: Option<ProbeEffect>,
    /// The signal (SIGINT or SIGTERM) that cut a workload short, if one did.
    pub interrupted: Option<i32>,
    /// What exitprof itself used, up to the end of the run.
    pub own_cost: OwnCost,
    /// The exits it is made of, when not all of the run's (a view of a record).
    pub selected: Option<Selected>,
}

/// What ended a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

/// Every count of a run (`exitprof_common::counters`), the kernel side's and userspace's: every
/// way an exit, or a part of one, can be missing from the profile, by cause, and the
/// diagnostics. Serialized as the document's `losses`: each loss by its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Losses([u64; counters::ALL_COUNT]);

impl Default for Losses {
    fn default() -> Self {
        Self([0; counters::ALL_COUNT])
    }
}

impl Losses {
    /// The kernel side's counts, with what userspace counted: records it could not decode,
    /// what the profile found in the exits (probe hits that did not fit in their record, hits
    /// out of order), exits still in progress at the end, probe hits the kernel dropped.
    pub fn new(
        kernel: &KernelLosses,
        undecodable: Undecodable,
        profile: &Profile,
        unfinished: u64,
        probe_misses: u64,
    ) -> Self {
        let mut losses = Self::default();
        losses.0[..kernel.0.len()].copy_from_slice(&kernel.0);
        for (counter, n) in [
            (counters::UNDECODABLE, undecodable.exits),
            (counters::UNDECODABLE_DEFERRED, undecodable.deferred),
            (counters::UNDECODABLE_STACKS, undecodable.stacks),
            (counters::HITS, profile.lost_hits),
            (counters::CLAMPED_EXITS, profile.clamped),
            (counters::UNFINISHED, unfinished),
            (counters::PROBE_MISSES, probe_misses),
        ] {
            losses.0[counter as usize] = n;
        }
        losses
    }

    /// With the counts `counted` (an index of `exitprof_common::counters`, its count) set: those
    /// userspace keeps of what the analysis decided.
    #[must_use]
    pub fn with(mut self, counted: impl IntoIterator<Item = (u32, u64)>) -> Self {
        for (counter, n) in counted {
            self.0[counter as usize] = n;
        }
        self
    }

    /// The count at `counter`, an index of `exitprof_common::counters`.
    pub fn get(&self, counter: u32) -> u64 {
        self.0[counter as usize]
    }

    /// The kernel side's counts.
    pub fn kernel(&self) -> KernelLosses {
        KernelLosses(std::array::from_fn(|i| self.0[i]))
    }

    /// Exits lost, in total (each is counted once, under one cause).
    pub fn exits(&self) -> u64 {
        self.of(|kind| kind == Kind::ExitLost).map(|(_, n)| n).fold(0, u64::saturating_add)
    }

    /// Every cause of a loss (of exits, then of parts of them, in the table's order) and its
    /// count.
    pub fn by_cause(&self) -> impl Iterator<Item = (&'static Count, u64)> + '_ {
        self.of(|kind| matches!(kind, Kind::ExitLost | Kind::PartLost))
    }

    /// Every diagnostic and its count.
    pub fn diagnostics(&self) -> impl Iterator<Item = (&'static Count, u64)> + '_ {
        self.of(|kind| kind == Kind::Diagnostic)
    }

    fn of(&self, kind: impl Fn(Kind) -> bool) -> impl Iterator<Item = (&'static Count, u64)> {
        counters::all()
            .zip(self.0)
            .filter(move |((_, c), _)| kind(c.kind))
            .map(|((_, c), n)| (c, n))
    }
}

impl Serialize for Losses {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.by_cause().map(|(count, n)| (count.key, n)))
    }
}

impl<'de> Deserialize<'de> for Losses {
    /// Each count by its key; keys of counts this exitprof does not know (a later one's) are
    /// left out.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_key = std::collections::HashMap::<String, u64>::deserialize(deserializer)?;
        let mut losses = Self::default();
        for (index, count) in counters::all() {
            if let Some(&n) = by_key.get(count.key) {
                losses.0[index as usize] = n;
            }
        }
        Ok(losses)
    }
}

/// The diagnostics of a run's [`Losses`], serialized each by its key (read back, the
/// diagnostics alone).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Losses);

impl Serialize for Diagnostics {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.diagnostics().map(|(count, n)| (count.key, n)))
    }
}

/// What a run set out to do, known before its first record.
pub struct RunSetup {
    pub plan: Plan,
    pub target: Target,
    pub duration: Option<Duration>,
    pub expected_exits: Option<u64>,
    pub burst_rate: Option<f64>,
    pub started_at: SystemTime,
    /// The run's number, which its exit records carry.
    pub epoch: u32,
    /// How its exits are split by workload, if they are.
    pub groups: Option<GroupOptions>,
}

/// How a run ended: what its records do not say.
pub struct RunEnd {
    pub child: Option<ChildOutcome>,
    pub elapsed: Duration,
    pub ended: Ended,
    pub kernel_losses: KernelLosses,
    pub probe_misses: u64,
    pub unfinished: u64,
    pub kernel_cost: Option<Vec<ProgramCost>>,
    pub interrupted: Option<i32>,
}

impl RunOutcome {
    /// The outcome of a run whose records `session` folded, once no record is to come; its
    /// kernel stacks are named with `symbols`. exitprof's `own_cost` is taken last: naming can
    /// read the whole of kallsyms, part of what a run costs.
    pub fn of(
        setup: RunSetup,
        mut session: Session,
        end: RunEnd,
        symbols: &Kallsyms,
        own_cost: impl FnOnce() -> OwnCost,
    ) -> Self {
        session.stacks.finish();
        session.teardowns.finish();
        let teardowns = session.teardowns.report(symbols);
        let on_cpu = OnCpuReport::of(&session.stacks, &session.profile, symbols);
        let blocked =
            BlockedReport::of(session.blocking, &session.stacks, &session.profile, symbols);
        let probe_effect = end
            .kernel_cost
            .as_deref()
            .map(|costs| session.probe_runs.effect(&session.profile, costs));
        let teardowns_counted = session.teardowns.counted();
        let Session { profile, deferred, undecodable, groups, .. } = session;
        let losses = Losses::new(
            &end.kernel_losses,
            undecodable,
            &profile,
            end.unfinished,
            end.probe_misses,
        )
        .with(teardowns_counted);
        let RunSetup { plan, target, duration, expected_exits, burst_rate, started_at, .. } = setup;
        Self {
            plan,
            target,
            duration,
            expected_exits,
            child: end.child,
            elapsed: end.elapsed,
            started_at,
            ended: end.ended,
            burst_rate,
            profile,
            groups,
            deferred,
            teardowns,
            blocked,
            on_cpu,
            losses,
            kernel_cost: end.kernel_cost,
            probe_effect,
            interrupted: end.interrupted,
            own_cost: own_cost(),
            selected: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::{kernel::version::KernelVersion, probes::plan::Plan};

    #[test]
    fn loss_causes_are_the_document_keys() {
        let losses = Losses::default();
        let doc = serde_json::to_value(losses).unwrap();
        let keys: HashSet<&str> = doc.as_object().unwrap().keys().map(String::as_str).collect();
        let causes: HashSet<&str> = losses.by_cause().map(|(count, _)| count.key).collect();
        assert_eq!(causes, keys);
    }

    /// The table of docs/reference/exports.md, as the one of `exitprof_common::counters` makes it.
    fn counts_table() -> String {
        let mut table = "| key | counts | meaning |\n|---|---|---|\n".to_owned();
        for (_, count) in counters::all() {
            let kind = match count.kind {
                Kind::ExitLost => "exits lost",
                Kind::PartLost => "a part lost",
                Kind::Diagnostic => "diagnostic",
                Kind::Bookkeeping => continue,
            };
            table.push_str(&format!("| `{}` | {kind} | {} |\n", count.key, count.help));
        }
        table
    }

    #[test]
    fn the_docs_list_every_count_as_the_table_declares() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reference/exports.md");
        let docs = std::fs::read_to_string(path).unwrap();
        let begin = "<!-- counts: the table exitprof_common::counters declares -->\n";
        let listed = docs
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once("<!-- end of counts -->"))
            .map(|(table, _)| table)
            .expect("docs/reference/exports.md has the table of counts between its markers");
        let table = counts_table();
        let wanted = "docs/reference/exports.md's table of counts should read";
        assert_eq!(listed, table, "{wanted}:\n{table}");
    }

    /// Counts read back from a record file can be anything: their sum saturates.
    #[test]
    fn counts_at_their_largest_do_not_wrap() {
        let mut kernel = std::collections::BTreeMap::new();
        kernel.insert("ringbuf_full".to_owned(), u64::MAX);
        kernel.insert("state_map_full".to_owned(), u64::MAX);
        let kernel = KernelLosses::from_names(&kernel);
        let profile = Profile::new(&Plan::with_sites(KernelVersion::new(6, 18, 0), &[]));
        let losses = Losses::new(&kernel, Undecodable::default(), &profile, 1, 0);
        assert_eq!(losses.exits(), u64::MAX);
    }
}
