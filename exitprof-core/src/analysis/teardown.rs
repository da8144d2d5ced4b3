//! Namespace teardowns joined back to the exits that set them off: a network namespace's, in a
//! run of `cleanup_net`, and a user namespace's, in a run of `free_user_ns`, both in kworkers.
//!
//! A `cleanup_net` run tears down every network namespace whose last reference went since the
//! previous run began (a batch). Its time is shared **equally** among them: each namespace's
//! teardown is the run's duration divided by their number, and so are its time on a CPU, blocked
//! and runnable; the remainders of the divisions go to the first namespaces, so that the shares
//! add up to the run to the nanosecond. (The run tears them down together, phase by phase —
//! `ops_undo_list`, one `rcu_barrier` — so no finer split can be measured; equal shares make a
//! run of one slow namespace and many empty ones look alike, which the batch size beside each
//! share says.) A `free_user_ns` run frees one namespace (and the parents it held last).
//!
//! Which exit a teardown is joined to: the latest exit recorded in that namespace (by address)
//! that started before the teardown's run. A network namespace's teardown is that exit's when
//! the namespace had no reference left at the exit's end (the kernel side checks), or when the
//! run began before the exit ended; otherwise the namespace outlived its last recorded exit (other
//! tasks, sockets, bind mounts or devices held it) and its teardown is counted as such, with how
//! long it outlived it. A user namespace's last reference goes after the exit in any case (its
//! tasks' credentials are freed after an RCU grace period; a network namespace it owns lets go
//! at the end of its own teardown): its teardown is joined to the last exit seen in it.
//! Teardowns without an exit, and exits whose namespace died with them but whose teardown was
//! not seen, are counted, never dropped silently.
//!
//! Exit records and teardown records come through different ring buffers, in either order: a
//! teardown whose exit has not been read yet waits (up to [`EXPIRY_NS`]) for it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use exitprof_common::{
    counters,
    deferred::{DEFERRED_NET_NS_RELEASED, DEFERRED_WALK_TRUNCATED, DeferredKind, DeferredRecord},
};
use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        blocking::SCHEDULER_FRAMES,
        exit_stacks::{StackTable, Tally},
        fixed_buckets::FixedBuckets,
        histogram::{Latency, Summary},
        on_cpu::{HotPath, SAMPLING_FRAMES, frames_within, heaviest_chain},
        records::{Exit, ExitKey, KernelStack, StackKind, TaskName},
    },
    kernel::kallsyms::Kallsyms,
};

/// How long an exit waits for its namespace's teardown, and a teardown for its exit (in the
/// kernel's clock, by the latest record seen). Batches of network namespaces have taken seconds
/// to tear down on loaded machines.
const EXPIRY_NS: u64 = 60_000_000_000;
/// Runs kept for their stacks and shares once complete (a bound for `serve`, which runs for
/// months): runs are rare, one per batch of namespaces.
const RUNS_KEPT: usize = 4096;
/// Namespaces named in a report, the slowest first.
const NAMED: usize = 10;
/// Stacks listed per teardown kind.
const STACKS_LISTED: usize = 8;

/// Frames that only say how a kworker waits, not what for: a block is named after the first
/// frame below them (`rtnl_lock`, `synchronize_rcu_expedited`, `rcu_barrier`, ...).
const WAIT_FRAMES: &[&str] = &[
    "schedule_timeout",
    "schedule_preempt_disabled",
    "__wait_for_common",
    "wait_for_common",
    "do_wait_for_common",
    "wait_for_completion",
    "__wait_rcu_gp",
    "__mutex_lock",
    "mutex_lock",
    "rwsem_down",
    "down_read",
    "down_write",
    "__down",
    "msleep",
    "usleep_range",
    "__cond_resched",
    "bit_wait",
    "out_of_line_wait_on_bit",
];

/// A kind of namespace teardown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TeardownKind {
    Net,
    User,
}

impl TeardownKind {
    pub const ALL: [Self; 2] = [Self::Net, Self::User];

    /// What is torn down.
    pub fn what(self) -> &'static str {
        match self {
            Self::Net => "network namespace",
            Self::User => "user namespace",
        }
    }

    /// The work function that tears it down (its runs' frames end there).
    pub fn function(self) -> &'static str {
        match self {
            Self::Net => "cleanup_net",
            Self::User => "free_user_ns",
        }
    }

    /// How `/proc/PID/ns` names a namespace of this kind.
    pub fn proc_name(self) -> &'static str {
        match self {
            Self::Net => "net",
            Self::User => "user",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The namespace of this kind an exit was in.
    fn of(self, exit: &Exit) -> u64 {
        match self {
            Self::Net => exit.net_ns,
            Self::User => exit.user_ns,
        }
    }
}

/// An exit as a teardown's join sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExitSide {
    pub pid: u32,
    pub tgid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The namespace had no reference left at the exit's end (network namespaces), or at its
    /// task's free, after its sockets let go.
    pub released: bool,
    /// Its task's free was to look at the namespace again, and when that was (`None`: not seen
    /// yet).
    pub free_awaited: bool,
    pub freed_ns: Option<u64>,
    pub comm: TaskName,
    pub process_comm: TaskName,
    pub cgroup_id: u64,
}

impl ExitSide {
    fn of(exit: &Exit, kind: TeardownKind) -> Self {
        let end_ns = exit.end_ns();
        Self {
            pid: exit.pid,
            tgid: exit.tgid,
            start_ns: exit.hits.first().map_or(end_ns, |h| h.ts_ns),
            end_ns,
            released: kind == TeardownKind::Net && exit.net_ns_released(),
            free_awaited: kind == TeardownKind::Net && exit.net_ns_free_awaited(),
            freed_ns: None,
            comm: exit.comm,
            process_comm: exit.process_comm,
            cgroup_id: exit.cgroup_id,
        }
    }
}

/// The exits seen in the namespaces at one address (a freed namespace's address is reused at
/// once, by the next namespace of its kind).
#[derive(Default)]
struct AtAddress {
    /// Exits that left their namespace without a reference, oldest first: each awaits its
    /// namespace's teardown.
    released: Vec<ExitSide>,
    /// The latest exit seen in it that did not.
    latest: Option<ExitSide>,
}

/// A run of a teardown's work function, named by its kworker and its start.
type RunKey = ExitKey;

/// A namespace torn down by a run, and its share of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TornDown {
    pub kind: TeardownKind,
    #[serde(skip)]
    pub address: u64,
    /// Its run's kworker.
    #[serde(skip)]
    pub run_pid: u32,
    /// Its inode number, as `/proc/PID/ns/<kind>` shows it.
    pub inum: u32,
    /// Its run: when it started, how long it took, how many namespaces it tore down.
    pub run_start_ns: u64,
    pub run_ns: u64,
    pub batch: u32,
    /// Its share of the run (the run's time divided equally among its namespaces), and of the
    /// run's time on a CPU, blocked and runnable.
    pub share_ns: u64,
    pub on_cpu_ns: u64,
    pub blocked_ns: u64,
    pub runq_ns: u64,
}

impl TornDown {
    /// When its run ended.
    pub fn done_ns(&self) -> u64 {
        self.run_start_ns + self.run_ns
    }

    /// `net:[4026532008]`.
    pub fn name(&self) -> String {
        format!("{}:[{}]", self.kind.proc_name(), self.inum)
    }
}

/// A teardown joined to the exit that set it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    pub torn: TornDown,
    pub exit: ExitSide,
}

impl Joined {
    /// From the exit's end to its namespace's teardown's start (`None`: the teardown began first,
    /// the exit preempted between dropping the namespace and its final switch-out).
    pub fn wait_ns(&self) -> Option<u64> {
        self.torn.run_start_ns.checked_sub(self.exit.end_ns)
    }
}

/// A run of a teardown's work function, as its records come.
#[derive(Default)]
struct Run {
    kind: Option<TeardownKind>,
    /// Set once its own record (sent at its end) came.
    complete: bool,
    /// Its duration.
    took_ns: u64,
    off_cpu_ns: u64,
    runq_ns: u64,
    /// The namespaces it tore down, as the kernel side counted them and as their records came.
    declared: u32,
    namespaces: Vec<(u64, u32)>,
    /// Of them, those joined to an exit (the run's stacks count in that proportion).
    joined: u32,
    /// Its kworker's stacks: (kind, stack id) -> tally.
    stacks: HashMap<(StackKind, u32), Tally>,
    /// When its latest record or stack came.
    seen_ns: u64,
}

impl Run {
    /// The namespaces its time is shared among.
    fn batch(&self) -> u32 {
        self.declared.max(u32::try_from(self.namespaces.len()).unwrap_or(u32::MAX)).max(1)
    }

    /// Namespace `index` of the run's, with its share.
    fn torn(&self, kind: TeardownKind, key: RunKey, index: usize) -> TornDown {
        let (address, inum) = self.namespaces[index];
        let batch = self.batch();
        let share = |total: u64| {
            let (each, rest) = (total / u64::from(batch), total % u64::from(batch));
            each + u64::from((index as u64) < rest)
        };
        let blocked = self.off_cpu_ns.saturating_sub(self.runq_ns);
        TornDown {
            kind,
            address,
            run_pid: key.pid,
            inum,
            run_start_ns: key.start_ns,
            run_ns: self.took_ns,
            batch,
            share_ns: share(self.took_ns),
            on_cpu_ns: share(self.took_ns.saturating_sub(self.off_cpu_ns)),
            blocked_ns: share(blocked),
            runq_ns: share(self.runq_ns),
        }
    }
}

/// What became of one kind's teardowns, counted as they are decided.
#[derive(Default)]
struct KindCounts {
    runs: u64,
    joined: u64,
    /// When the latest complete run began.
    last_run_start_ns: u64,
    namespaces: u64,
    max_batch: u64,
    walks_truncated: u64,
    run_ns: Latency,
    without_exit: u64,
    outlived: u64,
    outlived_by: Latency,
    not_seen: u64,
}

/// Every teardown seen, and how each joined.
pub struct Teardowns {
    /// Whether each kind's runs are seen at all (its probes are planned).
    sees: [bool; 2],
    exits: [HashMap<u64, AtAddress>; 2],
    runs: HashMap<RunKey, Run>,
    /// Complete runs, oldest first, for the bound on those kept.
    complete: VecDeque<RunKey>,
    /// Each kind's complete runs: start -> end.
    run_ends: [BTreeMap<u64, u64>; 2],
    /// Teardowns whose exit has not been read yet, by address.
    waiting: [HashMap<u64, Vec<TornDown>>; 2],
    /// Network namespace exits whose task's free looks at the namespace again: pid -> address;
    /// and such frees read before their exit: pid -> (when, released).
    frees_awaited: HashMap<u32, u64>,
    early_frees: HashMap<u32, (u64, bool)>,
    counts: [KindCounts; 2],
    /// Every teardown joined to its exit, in the order they joined (`serve` takes them as they
    /// come).
    pub joined: Vec<Joined>,
    /// Each distinct raw stack once; runs' tallies refer to it by index.
    stacks: StackTable,
    latest_ns: u64,
    pruned_ns: u64,
}

impl Teardowns {
    /// `net` and `user`: whether the runs of each kind are seen.
    pub fn new(net: bool, user: bool) -> Self {
        Self {
            sees: [net, user],
            exits: Default::default(),
            runs: HashMap::new(),
            complete: VecDeque::new(),
            run_ends: Default::default(),
            waiting: Default::default(),
            frees_awaited: HashMap::new(),
            early_frees: HashMap::new(),
            counts: Default::default(),
            joined: Vec::new(),
            stacks: StackTable::default(),
            latest_ns: 0,
            pruned_ns: 0,
        }
    }

    /// Whether teardowns of `kind` are seen.
    pub fn sees(&self, kind: TeardownKind) -> bool {
        self.sees[kind.index()]
    }

    /// An exit was recorded: it joins the teardowns waiting for it, or waits for its own.
    pub fn exit(&mut self, exit: &Exit) {
        self.advance(exit.end_ns());
        for kind in TeardownKind::ALL {
            let address = kind.of(exit);
            if address == 0 || !self.sees(kind) {
                continue;
            }
            let mut side = ExitSide::of(exit, kind);
            if side.free_awaited {
                match self.early_frees.remove(&side.pid) {
                    Some((freed, released)) => {
                        side.freed_ns = Some(freed);
                        side.released |= released;
                    }
                    None => {
                        self.frees_awaited.insert(side.pid, address);
                    }
                }
            }
            self.settle_reused(kind, address, side.start_ns);
            self.note_exit(kind, address, side);
            self.retry(kind, address);
        }
    }

    /// An exit that began at `start_ns` was in a namespace at `address`: the teardowns waiting
    /// there whose runs began before it tore down an earlier namespace at that address (a
    /// namespace a task still has cannot be dead as a run begins). Nothing more can decide
    /// them, so they are decided now, before this exit takes the place of the earlier
    /// namespace's exit: one whose task's free was awaited and not seen lost its exit, and its
    /// teardown joined none.
    fn settle_reused(&mut self, kind: TeardownKind, address: u64, start_ns: u64) {
        let Some(waiting) = self.waiting[kind.index()].remove(&address) else { return };
        let (earlier, later): (Vec<TornDown>, Vec<TornDown>) =
            waiting.into_iter().partition(|t| t.run_start_ns < start_ns);
        for torn in earlier {
            self.try_join(torn, true);
        }
        if !later.is_empty() {
            self.waiting[kind.index()].insert(address, later);
        }
    }

    /// Keeps an exit of a namespace at `address` for its teardown.
    fn note_exit(&mut self, kind: TeardownKind, address: u64, side: ExitSide) {
        let at = self.exits[kind.index()].entry(address).or_default();
        if side.released {
            let i = at.released.partition_point(|e| e.start_ns <= side.start_ns);
            at.released.insert(i, side);
        } else if at.latest.is_none_or(|l| l.start_ns <= side.start_ns) {
            at.latest = Some(side);
        }
    }

    /// The teardowns at `address` read before what decides them try again.
    fn retry(&mut self, kind: TeardownKind, address: u64) {
        let Some(waiting) = self.waiting[kind.index()].remove(&address) else { return };
        let still: Vec<TornDown> =
            waiting.into_iter().filter(|&torn| !self.try_join(torn, false)).collect();
        if !still.is_empty() {
            self.waiting[kind.index()].insert(address, still);
        }
    }

    /// The task of an exit whose network namespace still had references at its end was freed
    /// at `freed_ns`, the namespace `released` by then or not.
    fn net_ns_at_free(&mut self, pid: u32, freed_ns: u64, released: bool) {
        let Some(address) = self.frees_awaited.remove(&pid) else {
            self.early_frees.insert(pid, (freed_ns, released));
            return;
        };
        let kind = TeardownKind::Net;
        let Some(at) = self.exits[kind.index()].get_mut(&address) else { return };
        let Some(mut side) = at.latest.filter(|l| l.pid == pid && l.freed_ns.is_none()) else {
            return;
        };
        at.latest = None;
        side.freed_ns = Some(freed_ns);
        side.released |= released;
        self.note_exit(kind, address, side);
        self.retry(kind, address);
    }

    /// A deferred-work record of a teardown (others are not this module's).
    pub fn record(&mut self, r: &DeferredRecord) {
        let kind = match DeferredKind::from_u32(r.kind) {
            Some(DeferredKind::NetTeardownRun | DeferredKind::NetNsTornDown) => TeardownKind::Net,
            Some(DeferredKind::UserNsTeardown) => TeardownKind::User,
            Some(DeferredKind::NetNsAtFree) => {
                self.advance(r.start_ns);
                let released = r.flags & DEFERRED_NET_NS_RELEASED != 0;
                self.net_ns_at_free(r.object as u32, r.start_ns, released);
                return;
            }
            _ => return,
        };
        self.advance(r.end_ns.max(r.start_ns));
        let key = RunKey { pid: r.pid, start_ns: r.start_ns };
        let latest = self.latest_ns;
        let run = self.runs.entry(key).or_default();
        run.kind = Some(kind);
        run.seen_ns = latest;
        if r.kind == DeferredKind::NetNsTornDown as u32 {
            // Found by its count as the run began, and again in the run's own list.
            if !run.complete && !run.namespaces.iter().any(|&(address, _)| address == r.object) {
                run.namespaces.push((r.object, r.inum));
            }
            return;
        }
        if run.complete {
            return;
        }
        run.complete = true;
        run.took_ns = r.end_ns.saturating_sub(r.start_ns);
        run.off_cpu_ns = r.wait_ns.min(run.took_ns);
        run.runq_ns = r.runq_ns.min(run.off_cpu_ns);
        run.declared = r.count;
        if kind == TeardownKind::User {
            run.namespaces = vec![(r.object, r.inum)];
            run.declared = 1;
        }
        let counts = &mut self.counts[kind.index()];
        counts.runs += 1;
        counts.last_run_start_ns = counts.last_run_start_ns.max(key.start_ns);
        counts.namespaces += u64::from(run.batch());
        counts.max_batch = counts.max_batch.max(u64::from(run.batch()));
        counts.run_ns.record_waits(run.took_ns, run.off_cpu_ns, run.runq_ns);
        if r.flags & DEFERRED_WALK_TRUNCATED != 0 {
            counts.walks_truncated += 1;
        }
        let torn: Vec<TornDown> =
            (0..run.namespaces.len()).map(|i| run.torn(kind, key, i)).collect();
        self.complete.push_back(key);
        self.run_ends[kind.index()].insert(key.start_ns, key.start_ns + run.took_ns);
        for torn in torn {
            if !self.try_join(torn, false) {
                self.waiting[kind.index()].entry(torn.address).or_default().push(torn);
            }
        }
        self.bound_runs();
    }

    /// A kernel stack of a teardown's kworker, tallied under its run.
    pub fn stack(&mut self, s: &KernelStack) {
        let id = self.stacks.intern(&s.stack);
        let run = self.runs.entry(s.exit).or_default();
        run.seen_ns = run.seen_ns.max(s.ts_ns);
        let tally = run.stacks.entry((s.kind, id)).or_default();
        tally.count += 1;
        tally.ns += u128::from(s.ns);
    }

    /// Joins `torn` to its exit if that can be decided now; with `last_chance`, decides it
    /// whatever comes (an outlived namespace, or one without an exit). Returns whether it was
    /// decided.
    ///
    /// Of the exits at its address that started before its run, the one that ended last
    /// decides: the namespace outlived it unless it left no reference (or the run began before
    /// it ended). Exits that released a namespace at this address and ended before that one
    /// started were in an earlier namespace there, whose teardown went unseen.
    fn try_join(&mut self, torn: TornDown, last_chance: bool) -> bool {
        let kind = torn.kind;
        let start = torn.run_start_ns;
        let Some(at) = self.exits[kind.index()].get(&torn.address) else {
            return self.unjoined(torn, None, last_chance);
        };
        let before = at.released.partition_point(|e| e.start_ns <= start);
        let last = at.released[..before]
            .iter()
            .chain(at.latest.iter().filter(|l| l.start_ns <= start))
            .max_by_key(|e| e.end_ns)
            .copied();
        let Some(last) = last else { return self.unjoined(torn, None, last_chance) };
        // Dead by the exit's end, or by its task's free (its sockets' references went from RCU
        // callbacks); or the run began first, and the namespace was dead by then; or soon
        // after the free.
        let dead_by_its_end = last.released
            || last.end_ns > start
            || last.freed_ns.is_some_and(|freed| start < freed)
            || self.soon_after_free(kind, &last, start)
            || kind == TeardownKind::User;
        if !dead_by_its_end && !last_chance {
            // The exit that released it, or its task's free, may not have been read yet.
            return false;
        }
        let at = self.exits[kind.index()].get_mut(&torn.address).expect("looked at above");
        let earlier = at.released.drain(..before).filter(|e| e.end_ns < last.start_ns).count();
        if at.latest.is_some_and(|l| l.start_ns <= start) {
            at.latest = None;
        }
        self.counts[kind.index()].not_seen += earlier as u64;
        if !dead_by_its_end {
            return self.unjoined(torn, Some(last), true);
        }
        self.joined.push(Joined { torn, exit: last });
        self.counts[kind.index()].joined += 1;
        if let Some(run) = self.runs.get_mut(&RunKey { pid: torn.run_pid, start_ns: start }) {
            run.joined += 1;
        }
        true
    }

    /// Whether the namespace of `exit`, still referenced when its task was freed, can have died
    /// within a grace period after that (as long again as from the exit's end to the free), for
    /// its run, which started at `start`: RCU callbacks queued on other CPUs before the task's
    /// own can run after it (a socket the exit closed on one CPU, its task freed on another).
    /// The kworker starts a run as soon as it is idle: a run that started right after the one
    /// before it ended found namespaces that died during that one, which itself must have begun
    /// within the grace period; otherwise the run began about when the namespace died.
    fn soon_after_free(&self, kind: TeardownKind, exit: &ExitSide, start: u64) -> bool {
        let Some(freed) = exit.freed_ns else { return false };
        let grace = freed.saturating_sub(exit.end_ns);
        let previous = self.run_ends[kind.index()].range(..start).next_back();
        match previous {
            Some((&previous_start, &previous_end))
                if start.saturating_sub(previous_end) <= grace && previous_end > freed =>
            {
                previous_start <= freed + grace
            }
            _ => start.saturating_sub(freed) <= grace,
        }
    }

    /// A teardown no exit took: outlived its last exit `last`, or without one, once that is
    /// final (`last_chance`; else it waits).
    fn unjoined(&mut self, torn: TornDown, last: Option<ExitSide>, last_chance: bool) -> bool {
        if !last_chance {
            return false;
        }
        let counts = &mut self.counts[torn.kind.index()];
        match last {
            Some(l) => {
                counts.outlived += 1;
                counts.outlived_by.record(torn.run_start_ns.saturating_sub(l.end_ns), 0);
            }
            None => counts.without_exit += 1,
        }
        true
    }

    /// The joins so far, taken out (`serve` folds them into its histograms as they come, and
    /// keeps none).
    pub fn take_joined(&mut self) -> Vec<Joined> {
        std::mem::take(&mut self.joined)
    }

    /// `kind`'s runs and teardowns joined so far (what did not join is [`Self::counted`]).
    pub fn counts(&self, kind: TeardownKind) -> TeardownCounts {
        let c = &self.counts[kind.index()];
        TeardownCounts { runs: c.runs, joined: c.joined }
    }

    /// What the teardowns of both kinds add to the run's table of counts
    /// (`exitprof_common::counters`): exits whose namespace's teardown was not seen, runs whose
    /// walk for their batch was cut, teardowns outlived and without an exit.
    pub fn counted(&self) -> [(u32, u64); 4] {
        let sum = |count: fn(&KindCounts) -> u64| self.counts.iter().map(count).sum();
        [
            (counters::TEARDOWNS_NOT_SEEN, sum(|c| c.not_seen)),
            (counters::TEARDOWN_WALKS_TRUNCATED, sum(|c| c.walks_truncated)),
            (counters::TEARDOWNS_OUTLIVED, sum(|c| c.outlived)),
            (counters::TEARDOWNS_WITHOUT_EXIT, sum(|c| c.without_exit)),
        ]
    }

    /// Keeps the complete runs to [`RUNS_KEPT`], dropping the oldest.
    fn bound_runs(&mut self) {
        while self.complete.len() > RUNS_KEPT {
            if let Some(key) = self.complete.pop_front() {
                self.runs.remove(&key);
            }
        }
        for ends in &mut self.run_ends {
            while ends.len() > RUNS_KEPT {
                ends.pop_first();
            }
        }
    }

    /// Notes the time of a record; once a second of it, decides what waited too long.
    fn advance(&mut self, ts_ns: u64) {
        self.latest_ns = self.latest_ns.max(ts_ns);
        if self.latest_ns < self.pruned_ns + 1_000_000_000 {
            return;
        }
        self.pruned_ns = self.latest_ns;
        if let Some(horizon) = self.latest_ns.checked_sub(EXPIRY_NS) {
            self.decide(|ts| ts < horizon);
        }
    }

    /// Decides every teardown still waiting for its exit, and counts the exits still waiting
    /// for their teardown as not seen, of those `old` says are done waiting (by their time).
    fn decide(&mut self, old: impl Fn(u64) -> bool) {
        for kind in TeardownKind::ALL {
            let expired: Vec<TornDown> = self.waiting[kind.index()]
                .values_mut()
                .flat_map(|w| {
                    let (gone, kept) =
                        std::mem::take(w).into_iter().partition(|t| old(t.done_ns()));
                    *w = kept;
                    gone
                })
                .collect::<Vec<_>>();
            self.waiting[kind.index()].retain(|_, w| !w.is_empty());
            for torn in expired {
                self.try_join(torn, true);
            }
            let mut not_seen = 0;
            self.exits[kind.index()].retain(|_, at| {
                let before = at.released.len();
                at.released.retain(|e| !old(e.end_ns));
                not_seen += (before - at.released.len()) as u64;
                if at.latest.is_some_and(|l| old(l.end_ns)) {
                    at.latest = None;
                }
                !at.released.is_empty() || at.latest.is_some()
            });
            self.counts[kind.index()].not_seen += not_seen;
        }
        // Incomplete runs whose end never came (exitprof detached in their middle, their record
        // dropped) are let go alike, and frees whose exit never came.
        self.runs.retain(|_, r| r.complete || !old(r.seen_ns));
        self.early_frees.retain(|_, &mut (freed, _)| !old(freed));
    }

    /// The run is over: what still waits is decided.
    pub fn finish(&mut self) {
        self.decide(|_| true);
    }

    /// Whether a teardown's run is in progress: its namespaces' records came, its end not yet.
    pub fn awaiting_run(&self) -> bool {
        self.runs.values().any(|r| !r.complete && !r.namespaces.is_empty())
    }

    /// Exits whose task's free is to look at their network namespace again, not read yet.
    pub fn awaiting_frees(&self) -> usize {
        self.frees_awaited.len()
    }

    /// Exits that left a namespace without a reference whose teardown has not been read yet,
    /// and may still come: those whose namespace died (by their end, or by their task's free)
    /// after the latest run of its kind began (one that began later would have torn it down).
    pub fn awaiting_teardowns(&self) -> usize {
        TeardownKind::ALL
            .into_iter()
            .map(|kind| {
                let last_run = self.counts[kind.index()].last_run_start_ns;
                self.exits[kind.index()]
                    .values()
                    .flat_map(|at| &at.released)
                    .filter(|e| e.end_ns.max(e.freed_ns.unwrap_or(0)) >= last_run)
                    .count()
            })
            .sum()
    }

    /// Each kind's report, its stacks named with `symbols`.
    pub fn report(&self, symbols: &Kallsyms) -> TeardownReports {
        let report = |kind| self.report_of(kind, symbols);
        TeardownReports { net: report(TeardownKind::Net), user: report(TeardownKind::User) }
    }

    fn report_of(&self, kind: TeardownKind, symbols: &Kallsyms) -> TeardownReport {
        let counts = &self.counts[kind.index()];
        let joined: Vec<&Joined> = self.joined.iter().filter(|j| j.torn.kind == kind).collect();
        let mut teardown = Latency::default();
        let mut wait = Latency::default();
        let mut done = Latency::default();
        let mut waits = Latency::default();
        let mut started_before_exit_end = 0;
        for j in &joined {
            let t = &j.torn;
            teardown.record_waits(t.share_ns, t.blocked_ns + t.runq_ns, t.runq_ns);
            match j.wait_ns() {
                Some(w) => wait.record(w, 0),
                None => started_before_exit_end += 1,
            }
            waits.record(j.wait_ns().unwrap_or(0), 0);
            done.record(t.done_ns().saturating_sub(j.exit.end_ns), 0);
        }
        let where_ = self.where_(kind, symbols);
        let mut named: Vec<&Joined> = joined.clone();
        named.sort_by_key(|j| std::cmp::Reverse(j.torn.share_ns));
        let teardown_latency = teardown.clone();
        let teardown = teardown.summary();
        let share = |part: u128| {
            if teardown.total_ns == 0 { 0.0 } else { part as f64 / teardown.total_ns as f64 }
        };
        let blocked = teardown.off_cpu_ns.saturating_sub(teardown.runq_ns);
        TeardownReport {
            kind: kind.what().to_owned(),
            kind_key: kind.proc_name(),
            teardown_latency,
            wait_latency: waits,
            function: kind.function().to_owned(),
            seen: self.sees(kind),
            runs: counts.runs,
            namespaces: counts.namespaces,
            mean_per_run: if counts.runs == 0 {
                0.0
            } else {
                counts.namespaces as f64 / counts.runs as f64
            },
            max_per_run: counts.max_batch,
            walks_truncated: counts.walks_truncated,
            run_ns: counts.run_ns.summary(),
            joined: joined.len() as u64,
            on_cpu_share: share(teardown.total_ns.saturating_sub(teardown.off_cpu_ns)),
            blocked_share: share(blocked),
            runnable_share: share(teardown.runq_ns),
            teardown_ns: teardown,
            exit_to_start_ns: wait.summary(),
            started_before_exit_end,
            exit_to_done_ns: done.summary(),
            without_exit: counts.without_exit,
            outlived: counts.outlived,
            outlived_by_ns: counts.outlived_by.summary(),
            not_seen: counts.not_seen,
            blocked_in: where_.blocks,
            on_cpu_in: where_.samples,
            computes_mostly_in: where_.hot_path,
            slowest: named.into_iter().take(NAMED).map(NamedTeardown::of).collect(),
        }
    }

    /// Where the runs that tore down joined namespaces spent their time, each run counting in
    /// the proportion of its namespaces that were joined.
    fn where_(&self, kind: TeardownKind, symbols: &Kallsyms) -> Where {
        let runs = self.runs.values().filter(|r| r.complete && r.kind == Some(kind));
        let weighed = runs.map(|run| (run, f64::from(run.joined) / f64::from(run.batch())));
        self.where_in(weighed, kind, symbols)
    }

    /// Where one joined namespace's teardown spent its time: its run's, in the proportion of
    /// its share (empty where the run is no longer kept).
    pub fn where_one(&self, joined: &Joined, symbols: &Kallsyms) -> Where {
        let key = RunKey { pid: joined.torn.run_pid, start_ns: joined.torn.run_start_ns };
        let run = self.runs.get(&key).filter(|r| r.complete);
        let weighed = run.map(|run| (run, 1.0 / f64::from(run.batch())));
        self.where_in(weighed.into_iter(), joined.torn.kind, symbols)
    }

    /// Where `runs` spent their time, each counting by its weight: the stacks its kworker
    /// blocked in (all of its blocked time shared out by the blocks walked, as for exits), and
    /// those the sampling clock caught it in.
    fn where_in<'a>(
        &self,
        runs: impl Iterator<Item = (&'a Run, f64)>,
        kind: TeardownKind,
        symbols: &Kallsyms,
    ) -> Where {
        let function = kind.function();
        let mut teardown_ns = 0.0;
        let mut blocked_ns = 0.0;
        let mut on_cpu_ns = 0.0;
        let mut walked: HashMap<Vec<String>, f64> = HashMap::new();
        let mut sampled: HashMap<Vec<String>, f64> = HashMap::new();
        for (run, weight) in runs {
            if weight == 0.0 {
                continue;
            }
            teardown_ns += weight * run.took_ns as f64;
            blocked_ns += weight * run.off_cpu_ns.saturating_sub(run.runq_ns) as f64;
            on_cpu_ns += weight * run.took_ns.saturating_sub(run.off_cpu_ns) as f64;
            for (&(stack_kind, id), tally) in &run.stacks {
                let stack = self.stacks.get(id);
                match stack_kind {
                    StackKind::Blocked => {
                        let frames = frames_within(stack, symbols, SCHEDULER_FRAMES, function);
                        *walked.entry(frames).or_default() += weight * tally.ns as f64;
                    }
                    StackKind::OnCpu => {
                        let frames = frames_within(stack, symbols, SAMPLING_FRAMES, function);
                        *sampled.entry(frames).or_default() += weight * tally.count as f64;
                    }
                }
            }
        }
        let walked_ns: f64 = walked.values().sum();
        let mut blocks: Vec<TeardownBlock> = walked
            .into_iter()
            .map(|(stack, ns)| {
                let est_ns = if walked_ns == 0.0 { 0.0 } else { blocked_ns * ns / walked_ns };
                TeardownBlock {
                    wait: wait_site(&stack),
                    stack,
                    est_ns,
                    share: if teardown_ns == 0.0 { 0.0 } else { est_ns / teardown_ns },
                }
            })
            .collect();
        blocks.sort_by(|a, b| b.est_ns.total_cmp(&a.est_ns).then_with(|| a.stack.cmp(&b.stack)));
        blocks.truncate(STACKS_LISTED);
        let samples: f64 = sampled.values().sum();
        let mut computes: Vec<TeardownSample> = sampled
            .into_iter()
            .map(|(stack, n)| {
                let of_samples = n / samples;
                TeardownSample {
                    stack,
                    samples: n,
                    est_ns: of_samples * on_cpu_ns,
                    share: if teardown_ns == 0.0 {
                        0.0
                    } else {
                        of_samples * on_cpu_ns / teardown_ns
                    },
                }
            })
            .collect();
        computes
            .sort_by(|a, b| b.samples.total_cmp(&a.samples).then_with(|| a.stack.cmp(&b.stack)));
        let weighed: Vec<(&[String], f64)> =
            computes.iter().map(|c| (c.stack.as_slice(), c.samples)).collect();
        let mostly_in = heaviest_chain(&weighed, function);
        computes.truncate(STACKS_LISTED);
        Where { blocks, samples: computes, hot_path: mostly_in }
    }
}

/// Where teardowns spent their time: the stacks they blocked in, those they were sampled in,
/// and the chain of calls most samples went through.
pub struct Where {
    pub blocks: Vec<TeardownBlock>,
    pub samples: Vec<TeardownSample>,
    pub hot_path: Option<HotPath>,
}

/// What a block waited for: the first frame, innermost first, that is not the scheduler's or a
/// generic wait or lock (`rtnl_lock`, `synchronize_rcu_expedited`, `rcu_barrier`, ...).
pub fn wait_site(frames: &[String]) -> String {
    frames
        .iter()
        .find(|f| !WAIT_FRAMES.iter().any(|w| f.starts_with(w)))
        .or(frames.first())
        .cloned()
        .unwrap_or_else(|| "(stack unknown)".to_owned())
}

/// A kind of teardown's histograms in fixed buckets (`serve`'s series): each joined namespace's
/// share of its run, and its wait from its exit's end to the run's start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TeardownBuckets {
    pub teardown: FixedBuckets,
    pub wait: FixedBuckets,
}

impl TeardownBuckets {
    /// Counts one joined teardown (a run that began before its exit's end waited nothing).
    pub fn record(&mut self, joined: &Joined) {
        self.teardown.record(joined.torn.share_ns);
        self.wait.record(joined.wait_ns().unwrap_or(0));
    }
}

/// One kind's runs, and its teardowns joined to their exits (`serve`'s counters of each kind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TeardownCounts {
    pub runs: u64,
    pub joined: u64,
}

/// Both kinds' reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TeardownReports {
    pub net: TeardownReport,
    pub user: TeardownReport,
}

impl TeardownReports {
    pub fn each(&self) -> [&TeardownReport; 2] {
        [&self.net, &self.user]
    }
}

/// One kind of namespace teardown over a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TeardownReport {
    /// `network namespace`, `user namespace`.
    pub kind: String,
    /// `net`, `user`: how `/proc/PID/ns` names it.
    #[serde(skip)]
    pub kind_key: &'static str,
    /// The work function its runs are.
    pub function: String,
    /// Whether its runs were seen at all (their probes attached).
    pub seen: bool,
    /// Runs seen, the namespaces they tore down, per run.
    pub runs: u64,
    pub namespaces: u64,
    pub mean_per_run: f64,
    pub max_per_run: u64,
    /// Runs whose walk for the namespaces they tore down stopped at its bound.
    pub walks_truncated: u64,
    /// Each run's duration, with its time off a CPU.
    pub run_ns: Summary,
    /// Namespaces joined to the exit that set their teardown off.
    pub joined: u64,
    /// Each joined namespace's share of its run, with its share of the run's time off a CPU
    /// (`off_cpu_ns`) and runnable (`runq_ns`).
    pub teardown_ns: Summary,
    /// Of the joined namespaces' teardown time: on a CPU, blocked, runnable.
    pub on_cpu_share: f64,
    pub blocked_share: f64,
    pub runnable_share: f64,
    /// From the end of the exit to the start of its namespace's teardown; teardowns that
    /// started before their exit ended are counted apart.
    pub exit_to_start_ns: Summary,
    pub started_before_exit_end: u64,
    /// From the end of the exit to the end of its namespace's teardown.
    pub exit_to_done_ns: Summary,
    /// Teardowns of namespaces no recorded exit was in.
    pub without_exit: u64,
    /// Teardowns of namespaces that outlived their last recorded exit (held by other tasks,
    /// sockets, bind mounts, devices), and by how long (its end to the teardown's start).
    pub outlived: u64,
    pub outlived_by_ns: Summary,
    /// Exits that left their namespace without a reference whose teardown was not seen.
    pub not_seen: u64,
    /// Where the teardowns of joined namespaces blocked, and computed.
    pub blocked_in: Vec<TeardownBlock>,
    pub on_cpu_in: Vec<TeardownSample>,
    /// The chain of calls from the work function most of the samples go through, if one does.
    pub computes_mostly_in: Option<HotPath>,
    /// The joined namespaces whose share took longest.
    pub slowest: Vec<NamedTeardown>,
    /// The histograms of `teardown_ns` and `exit_to_start_ns` (a teardown that began before its
    /// exit's end waited 0 here), for the exports.
    #[serde(skip)]
    pub teardown_latency: Latency,
    #[serde(skip)]
    pub wait_latency: Latency,
}

impl TeardownReport {
    /// Whether anything of this kind was seen.
    pub fn is_empty(&self) -> bool {
        self.runs == 0 && self.not_seen == 0
    }
}

/// A stack a teardown's kworker blocked in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeardownBlock {
    /// What it waited for (see [`wait_site`]).
    pub wait: String,
    /// Innermost frame first, the scheduler left out, down to the work function.
    pub stack: Vec<String>,
    /// Its part of the teardowns' blocked time (shared out by the time of the blocks walked).
    pub est_ns: f64,
    /// Of the teardowns' time.
    pub share: f64,
}

/// A stack the sampling clock caught a teardown's kworker in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeardownSample {
    pub stack: Vec<String>,
    /// Samples, each run's counted in the proportion of its namespaces joined.
    pub samples: f64,
    /// The teardowns' time on a CPU times its share of the samples, and that of their time.
    pub est_ns: f64,
    pub share: f64,
}

/// A namespace torn down, named, with the exit that set its teardown off.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NamedTeardown {
    /// `net:[4026532008]`.
    pub namespace: String,
    pub pid: u32,
    pub tgid: u32,
    pub comm: TaskName,
    pub process_comm: TaskName,
    /// From the exit's end to the teardown's start (`null`: it started first).
    pub wait_ns: Option<u64>,
    /// Its share of its run, the run, and how many namespaces the run tore down.
    pub teardown_ns: u64,
    pub run_ns: u64,
    pub batch: u32,
    /// Of its share: blocked, and on a CPU.
    pub blocked_ns: u64,
    pub on_cpu_ns: u64,
}

impl NamedTeardown {
    pub fn of(j: &Joined) -> Self {
        Self {
            namespace: j.torn.name(),
            pid: j.exit.pid,
            tgid: j.exit.tgid,
            comm: j.exit.comm,
            process_comm: j.exit.process_comm,
            wait_ns: j.wait_ns(),
            teardown_ns: j.torn.share_ns,
            run_ns: j.torn.run_ns,
            batch: j.torn.batch,
            blocked_ns: j.torn.blocked_ns,
            on_cpu_ns: j.torn.on_cpu_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::{
        point::{Marker, Point},
        record::{FLAG_NET_NS_FREE_AWAITED, FLAG_NET_NS_RELEASED},
    };

    use super::*;
    use crate::analysis::records::PointHit;

    const WORKER: u32 = 77;

    /// An exit of `pid` in network namespace `net` from `start` to `end`, with `flags`.
    fn exit(pid: u32, net: u64, start: u64, end: u64, flags: u32) -> Exit {
        let hit = |point, ts_ns| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 };
        Exit {
            pid,
            tgid: pid,
            net_ns: net,
            flags,
            hits: vec![
                hit(Point::Marker(Marker::DoExit), start),
                hit(Point::Marker(Marker::FinalSwitch), end),
            ],
            ..Exit::default()
        }
    }

    fn torn_down(net: u64, inum: u32, run_start: u64) -> DeferredRecord {
        DeferredRecord {
            kind: DeferredKind::NetNsTornDown as u32,
            pid: WORKER,
            start_ns: run_start,
            end_ns: run_start,
            object: net,
            inum,
            ..DeferredRecord::default()
        }
    }

    /// Exit `pid`'s task freed at `at`, its network namespace `released` by then or not.
    fn freed(pid: u64, at: u64, released: bool) -> DeferredRecord {
        DeferredRecord {
            kind: DeferredKind::NetNsAtFree as u32,
            start_ns: at,
            end_ns: at,
            object: pid,
            flags: if released { DEFERRED_NET_NS_RELEASED } else { 0 },
            ..DeferredRecord::default()
        }
    }

    /// A `cleanup_net` run of `count` namespaces from `start` to `end`, off a CPU `off` of it,
    /// `runq` of that runnable.
    fn run(start: u64, end: u64, count: u32, off: u64, runq: u64) -> DeferredRecord {
        DeferredRecord {
            kind: DeferredKind::NetTeardownRun as u32,
            pid: WORKER,
            start_ns: start,
            end_ns: end,
            wait_ns: off,
            runq_ns: runq,
            count,
            ..DeferredRecord::default()
        }
    }

    fn report(t: &mut Teardowns) -> TeardownReport {
        t.finish();
        t.report(&Kallsyms::of_symbols(&[])).net
    }

    /// One run tears three namespaces down: each joins its own exit once, and their shares of
    /// the run (its time, on a CPU, blocked, runnable) add up to the run's to the nanosecond.
    #[test]
    fn a_batch_is_shared_equally_and_each_namespace_joins_once() {
        let mut t = Teardowns::new(true, false);
        for (i, net) in [0xA0, 0xB0, 0xC0].into_iter().enumerate() {
            let i = i as u64;
            t.exit(&exit(10 + i as u32, net, 100 * i, 100 * i + 50, FLAG_NET_NS_RELEASED));
        }
        for (net, inum) in [(0xA0, 1), (0xB0, 2), (0xC0, 3)] {
            t.record(&torn_down(net, inum, 1_000));
        }
        // The same namespace found twice (its count at the start, and the run's own list).
        t.record(&DeferredRecord { flags: 1 << 2, ..torn_down(0xB0, 2, 1_000) });
        t.record(&run(1_000, 1_000 + 1_000_003, 3, 700_001, 100_000));
        let r = report(&mut t);
        assert_eq!((r.runs, r.namespaces, r.joined, r.max_per_run), (1, 3, 3, 3));
        let shares: Vec<(u64, u64, u64, u64)> = t
            .joined
            .iter()
            .map(|j| (j.torn.share_ns, j.torn.on_cpu_ns, j.torn.blocked_ns, j.torn.runq_ns))
            .collect();
        assert_eq!(shares.iter().map(|s| s.0).sum::<u64>(), 1_000_003);
        assert_eq!(shares.iter().map(|s| s.1).sum::<u64>(), 1_000_003 - 700_001);
        assert_eq!(shares.iter().map(|s| s.2).sum::<u64>(), 600_001);
        assert_eq!(shares.iter().map(|s| s.3).sum::<u64>(), 100_000);
        assert_eq!(shares[0].0, 333_335);
        let pids: Vec<u32> = t.joined.iter().map(|j| j.exit.pid).collect();
        assert_eq!(pids, [10, 11, 12]);
        assert_eq!(r.slowest[0].namespace, "net:[1]");
        assert_eq!((r.without_exit, r.outlived, r.not_seen), (0, 0, 0));
    }

    /// The exit's record may be read after its namespace's teardown (two ring buffers); a
    /// namespace's address is reused by the next one: each teardown joins its own exit.
    #[test]
    fn joins_hold_in_either_order_and_across_a_reused_address() {
        let mut t = Teardowns::new(true, false);
        t.record(&torn_down(0xA0, 1, 1_000));
        t.record(&run(1_000, 2_000, 1, 0, 0));
        t.exit(&exit(10, 0xA0, 100, 200, FLAG_NET_NS_RELEASED));
        t.exit(&exit(11, 0xA0, 2_500, 2_600, FLAG_NET_NS_RELEASED));
        t.record(&torn_down(0xA0, 2, 3_000));
        t.record(&run(3_000, 4_000, 1, 0, 0));
        let r = report(&mut t);
        let joined: Vec<(u32, u32)> = t.joined.iter().map(|j| (j.exit.pid, j.torn.inum)).collect();
        assert_eq!(joined, [(10, 1), (11, 2)]);
        assert_eq!((r.exit_to_start_ns.min_ns, r.exit_to_start_ns.max_ns), (400, 800));
    }

    /// A namespace still referenced at its exit's end and at its task's free, torn down a second
    /// later, outlived its exit; one with no exit recorded is counted as such; an exit whose
    /// namespace died with it but whose teardown never came, as not seen.
    #[test]
    fn what_does_not_join_is_counted() {
        let mut t = Teardowns::new(true, false);
        t.exit(&exit(10, 0xA0, 100, 200, FLAG_NET_NS_FREE_AWAITED));
        t.record(&freed(10, 10_200, false));
        t.record(&torn_down(0xA0, 1, 1_000_000_000));
        t.record(&torn_down(0xF0, 9, 1_000_000_000));
        t.record(&run(1_000_000_000, 1_000_001_000, 2, 0, 0));
        t.exit(&exit(11, 0xB0, 300, 400, FLAG_NET_NS_RELEASED));
        let r = report(&mut t);
        assert_eq!((r.joined, r.outlived, r.without_exit, r.not_seen), (0, 1, 1, 1));
        // From the exit's end to the run's start (a histogram's, within 0.1 %).
        assert!(r.outlived_by_ns.max_ns.abs_diff(999_999_800) < 1_000_000, "{r:?}");
        // And in the run's table of counts.
        let counted = [
            (counters::TEARDOWNS_NOT_SEEN, 1),
            (counters::TEARDOWN_WALKS_TRUNCATED, 0),
            (counters::TEARDOWNS_OUTLIVED, 1),
            (counters::TEARDOWNS_WITHOUT_EXIT, 1),
        ];
        assert_eq!(t.counted(), counted);
    }

    /// Sockets the exit closed let go of its namespace from RCU callbacks: the namespace is
    /// still referenced at the exit's end, dead by its task's free (or soon after, its run
    /// right after one in progress then), and its teardown is the exit's.
    #[test]
    fn a_namespace_dead_by_the_task_s_free_is_the_exit_s() {
        let mut t = Teardowns::new(true, false);
        t.exit(&exit(10, 0xA0, 100, 1_000, FLAG_NET_NS_FREE_AWAITED));
        t.record(&freed(10, 11_000, true));
        t.record(&torn_down(0xA0, 1, 500_000));
        t.record(&run(500_000, 600_000, 1, 0, 0));
        // Still referenced at its free (a socket's callback ran later, on another CPU); the
        // kworker was busy with a run that began 1 µs after the free: its next run, right after,
        // tore it down.
        t.exit(&exit(11, 0xB0, 100, 1_000_000, FLAG_NET_NS_FREE_AWAITED));
        t.record(&freed(11, 1_010_000, false));
        t.record(&torn_down(0xC0, 2, 1_011_000));
        t.record(&run(1_011_000, 1_500_000, 1, 0, 0));
        t.record(&torn_down(0xB0, 3, 1_500_010));
        t.record(&run(1_500_010, 1_600_000, 1, 0, 0));
        let r = report(&mut t);
        let joined: Vec<u32> = t.joined.iter().map(|j| j.torn.inum).collect();
        assert_eq!(joined, [1, 3]);
        assert_eq!((r.outlived, r.without_exit), (0, 1));
    }

    /// An exit whose task's free never comes leaves its namespace's teardown waiting; the next
    /// namespace at its address, whose exit waits for its free too, must not take its place:
    /// the earlier teardown is decided (outlived, its free unseen) and the later one joins its
    /// own exit. Every exit and every teardown is accounted once.
    #[test]
    fn a_reused_address_decides_the_teardown_waiting_there() {
        let mut t = Teardowns::new(true, false);
        t.exit(&exit(10, 0xA0, 100, 200, FLAG_NET_NS_FREE_AWAITED));
        t.record(&torn_down(0xA0, 1, 60_000));
        t.record(&run(60_000, 70_000, 1, 0, 0));
        t.exit(&exit(11, 0xA0, 700_000, 700_200, FLAG_NET_NS_FREE_AWAITED));
        t.record(&freed(11, 710_000, true));
        t.record(&torn_down(0xA0, 2, 760_000));
        t.record(&run(760_000, 770_000, 1, 0, 0));
        let r = report(&mut t);
        let joined: Vec<(u32, u32)> = t.joined.iter().map(|j| (j.exit.pid, j.torn.inum)).collect();
        assert_eq!(joined, [(11, 2)]);
        assert_eq!((r.namespaces, r.outlived, r.without_exit, r.not_seen), (2, 1, 0, 0));
    }

    #[test]
    fn a_block_is_named_after_what_it_waits_for() {
        let frames = |f: &[&str]| f.iter().map(|&s| s.to_owned()).collect::<Vec<_>>();
        let rtnl = frames(&["__mutex_lock.constprop.0", "rtnl_lock", "default_device_exit_batch"]);
        assert_eq!(wait_site(&rtnl), "rtnl_lock");
        let rcu = frames(&["wait_for_completion", "__wait_rcu_gp", "synchronize_rcu", "x"]);
        assert_eq!(wait_site(&rcu), "synchronize_rcu");
        assert_eq!(
            wait_site(&frames(&["synchronize_rcu_expedited", "y"])),
            "synchronize_rcu_expedited"
        );
        assert_eq!(wait_site(&[]), "(stack unknown)");
    }
}
