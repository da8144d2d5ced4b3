//! Deferred work joined back to the exits that caused it: IPC namespace teardown in the
//! `free_ipc` kworker, the parent's reap of a zombie, and the RCU-deferred free of the task.
//!
//! Exit records and deferred records come through different ring buffers, in either order; each
//! side waits in a small map for the other, keyed by pid or namespace address, and leaves it as
//! soon as it is joined. A side that waits longer than [`EXPIRY_NS`] (work of tasks that were not
//! recorded, with `--comm` or `--all`; an exit whose task outlives the run) is dropped and
//! counted, so memory stays bounded by the work in flight however long exitprof watches. A pid
//! joins only work that came after its exit began: a reused pid never meets a stale entry.

use std::collections::{BTreeMap, HashMap};

use exitprof_common::deferred::{DeferredKind, DeferredRecord, is_free_sampled};
use serde::{Deserialize, Serialize};

use crate::analysis::{
    histogram::{Latency, Summary},
    records::Exit,
};

/// How long a side waits for the other (in the kernel's clock, by the latest record seen).
const EXPIRY_NS: u64 = 10_000_000_000;

/// Exits remembered per IPC namespace address. A freed namespace's address is reused at once,
/// and its free comes tens of ms after its exit (an RCU grace period, then a kworker), so one
/// address can hold the exits of several namespaces whose frees are still on their way (under
/// emulation, 38 exits were read before the first free, 3 of them at one address; a bound of 4
/// lost joins). Enough for any such lag; the bound is for addresses no free comes for (the
/// initial namespace's, with `--all`).
const EXITS_KEPT_PER_NS: usize = 256;

/// Everything deferred that was seen, and how it joined.
#[derive(Default)]
pub struct DeferredWork {
    /// Whether every namespace freed is seen by name (`shm_exit_ns`); in tracepoint mode only
    /// the namespaces of recorded exits are recognised among `free_ipc`'s kfrees.
    exact_ns_frees: bool,
    /// Whether `synchronize_rcu` is probed (else there is no RCU wait to record).
    rcu_wait_measured: bool,
    /// When `free_ipc` was last queued, and when the last run that has ended started: a run
    /// queued after the latter is still to come.
    ipc_last_queued: u64,
    ipc_last_run_start: u64,
    ipc_runs: Latency,
    ipc_rcu_wait: Latency,
    /// Namespaces freed per `free_ipc` run, keyed by the run's start.
    ipc_batches: BTreeMap<u64, u64>,
    ipc_exit_to_free: Latency,
    reap_cost: Latency,
    exit_to_reap: Latency,
    reaped_before_exit_end: u64,
    exit_to_task_free: Latency,
    namespaces_freed: u64,
    namespaces_joined: u64,
    /// Namespace address -> (start, end) of the latest exits seen in it, oldest first. A freed
    /// namespace's address can be reused at once, and the two ring buffers do not keep each
    /// other's order, so a free is joined to the latest exit that started before it. (Not
    /// ended: the exit drops its namespace well before its final switch-out, and on a slow
    /// machine the free can come first.)
    exits_by_ns: HashMap<u64, Vec<(u64, u64)>>,
    /// Namespaces freed before their exit's record arrived: address -> (run start, free time)
    /// of each, oldest first (the address of a freed namespace is soon reused).
    early_ns_frees: HashMap<u64, Vec<(u64, u64)>>,
    /// Leader exits waiting for their reap, and reaps waiting for their exit: pid -> times
    /// (an exit's start and end; a reap's start and end). Keyed by the pid as exitprof's PID
    /// namespace sees it where reaps come from `wait4`, else by the kernel's pid.
    reaps_by_ns_pid: bool,
    awaiting_reap: HashMap<u32, (u64, u64)>,
    early_reaps: HashMap<u32, (u64, u64)>,
    /// Exits waiting for their task to be freed (start, end), and frees waiting for their exit:
    /// the exits whose pids pass `is_free_sampled`.
    awaiting_free: HashMap<u32, (u64, u64)>,
    early_frees: HashMap<u32, u64>,
    /// The latest time any record carried, and when the waiting sides were last pruned.
    latest_ns: u64,
    pruned_ns: u64,
    /// Entries that waited longer than [`EXPIRY_NS`] and were dropped.
    expired: u64,
}

impl DeferredWork {
    pub fn new(exact_ns_frees: bool, rcu_wait_measured: bool, reaps_by_ns_pid: bool) -> Self {
        Self { exact_ns_frees, rcu_wait_measured, reaps_by_ns_pid, ..Self::default() }
    }

    /// Notes the time of a record; once a second of it, drops what waited too long.
    fn advance(&mut self, ts_ns: u64) {
        self.latest_ns = self.latest_ns.max(ts_ns);
        if self.latest_ns < self.pruned_ns + 1_000_000_000 {
            return;
        }
        self.pruned_ns = self.latest_ns;
        let Some(horizon) = self.latest_ns.checked_sub(EXPIRY_NS) else { return };
        let before = self.waiting();
        self.awaiting_reap.retain(|_, &mut (_, end)| end >= horizon);
        self.early_reaps.retain(|_, &mut (_, reaped)| reaped >= horizon);
        self.awaiting_free.retain(|_, &mut (_, end)| end >= horizon);
        self.early_frees.retain(|_, &mut freed| freed >= horizon);
        self.early_ns_frees.retain(|_, frees| {
            frees.retain(|&(_, freed)| freed >= horizon);
            !frees.is_empty()
        });
        self.exits_by_ns.retain(|_, exits| {
            exits.retain(|&(_, end)| end >= horizon);
            !exits.is_empty()
        });
        self.expired += (before - self.waiting()) as u64;
    }

    /// Entries waiting for their other side.
    fn waiting(&self) -> usize {
        self.awaiting_reap.len()
            + self.early_reaps.len()
            + self.awaiting_free.len()
            + self.early_frees.len()
            + self.early_ns_frees.values().map(Vec::len).sum::<usize>()
            + self.exits_by_ns.values().map(Vec::len).sum::<usize>()
    }

    /// An exit was recorded: remember what deferred work can be joined to it.
    pub fn exit(&mut self, exit: &Exit) {
        let end = exit.end_ns();
        let start = exit.hits.first().map_or(end, |h| h.ts_ns);
        self.advance(end);
        if exit.ipc_ns != 0 {
            match self.take_free_after(exit.ipc_ns, start) {
                Some((run, freed)) => self.join_ns_free(run, end, freed),
                None => {
                    let exits = self.exits_by_ns.entry(exit.ipc_ns).or_default();
                    let at = exits.partition_point(|&(s, _)| s <= start);
                    exits.insert(at, (start, end));
                    if exits.len() > EXITS_KEPT_PER_NS {
                        exits.remove(0);
                    }
                }
            }
        }
        if exit.pid == exit.tgid {
            let pid = if self.reaps_by_ns_pid { exit.ns_pid } else { exit.pid };
            match self.early_reaps.remove(&pid) {
                // A reap can come before the exit's final switch-out, not before its start.
                Some((reap_start, reaped)) if reaped >= start => {
                    self.join_reap(end, reap_start, reaped);
                }
                _ => {
                    self.awaiting_reap.insert(pid, (start, end));
                }
            }
        }
        // The kernel side reports the frees of a sample of the exits' tasks.
        if !is_free_sampled(exit.pid) {
            return;
        }
        match self.early_frees.remove(&exit.pid) {
            Some(freed) if freed >= start => {
                self.exit_to_task_free.record(freed.saturating_sub(end), 0);
            }
            _ => {
                self.awaiting_free.insert(exit.pid, (start, end));
            }
        }
    }

    /// A deferred-work record arrived.
    pub fn record(&mut self, r: &DeferredRecord) {
        self.advance(r.end_ns.max(r.start_ns));
        match DeferredKind::from_u32(r.kind) {
            Some(DeferredKind::IpcFreeRun) => {
                self.ipc_runs.record(r.end_ns.saturating_sub(r.start_ns), 0);
                if self.rcu_wait_measured {
                    self.ipc_rcu_wait.record(r.wait_ns, r.wait_ns);
                }
                self.ipc_batches.entry(r.start_ns).or_default();
                self.ipc_last_run_start = self.ipc_last_run_start.max(r.start_ns);
            }
            Some(DeferredKind::IpcFreeQueued) => {
                self.ipc_last_queued = self.ipc_last_queued.max(r.start_ns);
            }
            Some(DeferredKind::IpcNsFreed) => {
                if self.exact_ns_frees {
                    self.namespaces_freed += 1;
                    *self.ipc_batches.entry(r.start_ns).or_default() += 1;
                }
                match self.take_exit_before(r.object, r.end_ns) {
                    Some(exit_end) => self.join_ns_free(r.start_ns, exit_end, r.end_ns),
                    // Without exact frees, most of a run's kfrees are not namespaces at all.
                    None if self.exact_ns_frees => {
                        let frees = self.early_ns_frees.entry(r.object).or_default();
                        let at = frees.partition_point(|&(_, freed)| freed <= r.end_ns);
                        frees.insert(at, (r.start_ns, r.end_ns));
                    }
                    None => {}
                }
            }
            Some(DeferredKind::Reap | DeferredKind::WaitReaped) => {
                let pid = r.object as u32;
                match self.awaiting_reap.remove(&pid) {
                    Some((start, exit_end)) if r.end_ns >= start => {
                        self.join_reap(exit_end, r.start_ns, r.end_ns);
                    }
                    _ => {
                        self.early_reaps.insert(pid, (r.start_ns, r.end_ns));
                    }
                }
            }
            Some(DeferredKind::TaskFreed) => {
                let pid = r.object as u32;
                match self.awaiting_free.remove(&pid) {
                    Some((start, exit_end)) if r.start_ns >= start => {
                        self.exit_to_task_free.record(r.start_ns.saturating_sub(exit_end), 0);
                    }
                    _ => {
                        self.early_frees.insert(pid, r.start_ns);
                    }
                }
            }
            // Namespace teardowns are `crate::analysis::teardown`'s.
            Some(
                DeferredKind::NetTeardownRun
                | DeferredKind::NetNsTornDown
                | DeferredKind::UserNsTeardown
                | DeferredKind::NetNsAtFree,
            ) => {}
            None => log::warn!("unknown deferred-work record kind {}", r.kind),
        }
    }

    /// The end of the latest exit in namespace `ns` that started before `freed`, taken out with
    /// the exits before it (they belonged to the same namespace).
    fn take_exit_before(&mut self, ns: u64, freed: u64) -> Option<u64> {
        let exits = self.exits_by_ns.get_mut(&ns)?;
        let before = exits.partition_point(|&(start, _)| start <= freed);
        let end = exits[..before].last().map(|&(_, end)| end);
        exits.drain(..before);
        if exits.is_empty() {
            self.exits_by_ns.remove(&ns);
        }
        end
    }

    /// The first free of namespace `ns` that came after `start`, an exit's start: frees before
    /// it were of earlier namespaces at the same address, whose exits are still to come.
    fn take_free_after(&mut self, ns: u64, start: u64) -> Option<(u64, u64)> {
        let frees = self.early_ns_frees.get_mut(&ns)?;
        let at = frees.partition_point(|&(_, freed)| freed < start);
        let free = (at < frees.len()).then(|| frees.remove(at));
        if frees.is_empty() {
            self.early_ns_frees.remove(&ns);
        }
        free
    }

    fn join_ns_free(&mut self, run_start: u64, exit_end: u64, freed: u64) {
        self.namespaces_joined += 1;
        if !self.exact_ns_frees {
            self.namespaces_freed += 1;
            *self.ipc_batches.entry(run_start).or_default() += 1;
        }
        self.ipc_exit_to_free.record(freed.saturating_sub(exit_end), 0);
    }

    fn join_reap(&mut self, exit_end: u64, start: u64, reaped: u64) {
        if start != reaped {
            self.reap_cost.record(reaped.saturating_sub(start), 0);
        }
        // The parent may reap a zombie before the child's final switch-out (it is a zombie from
        // exit_notify on): that is counted, not recorded as a negative delay.
        match reaped.checked_sub(exit_end) {
            Some(delay) => self.exit_to_reap.record(delay, 0),
            None => self.reaped_before_exit_end += 1,
        }
    }

    /// Whether a queued `free_ipc` run has not run (to its end) yet.
    pub fn awaiting_ipc_run(&self) -> bool {
        self.ipc_last_queued > self.ipc_last_run_start
    }

    /// Exits still waiting for their task to be freed.
    pub fn awaiting_task_free(&self) -> usize {
        self.awaiting_free.len()
    }

    pub fn report(&self) -> DeferredReport {
        let batches: Vec<u64> = self.ipc_batches.values().copied().collect();
        let per_run = |f: fn(&[u64]) -> u64| if batches.is_empty() { 0 } else { f(&batches) };
        DeferredReport {
            ipc: IpcReport {
                runs: batches.len() as u64,
                namespaces_freed: self.namespaces_freed,
                namespaces_joined: self.namespaces_joined,
                every_namespace_seen: self.exact_ns_frees,
                max_per_run: per_run(|b| b.iter().copied().max().unwrap_or(0)),
                mean_per_run: if batches.is_empty() {
                    0.0
                } else {
                    batches.iter().sum::<u64>() as f64 / batches.len() as f64
                },
                run_ns: self.ipc_runs.summary(),
                rcu_wait_ns: self.ipc_rcu_wait.summary(),
                exit_to_free_ns: self.ipc_exit_to_free.summary(),
            },
            reap: ReapReport {
                release_task_ns: self.reap_cost.summary(),
                exit_to_reap_ns: self.exit_to_reap.summary(),
                reaped_before_exit_end: self.reaped_before_exit_end,
            },
            task_free: TaskFreeReport {
                exit_to_free_ns: self.exit_to_task_free.summary(),
                not_freed_yet: self.awaiting_free.len() as u64,
            },
        }
    }
}

/// Deferred work, summarised.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeferredReport {
    pub ipc: IpcReport,
    pub reap: ReapReport,
    pub task_free: TaskFreeReport,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IpcReport {
    /// `free_ipc` runs seen.
    pub runs: u64,
    /// Namespaces those runs freed (in tracepoint mode: those of recorded exits).
    pub namespaces_freed: u64,
    /// Namespaces freed that belonged to recorded exits.
    pub namespaces_joined: u64,
    /// Whether every namespace freed was seen (`shm_exit_ns` probed), or only the workload's.
    pub every_namespace_seen: bool,
    pub mean_per_run: f64,
    pub max_per_run: u64,
    /// Duration of each run.
    pub run_ns: Summary,
    /// Time each run waited in `synchronize_rcu` (zero where it cannot be probed).
    pub rcu_wait_ns: Summary,
    /// From the end of an exit to its namespace being freed.
    pub exit_to_free_ns: Summary,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReapReport {
    /// The parent's `release_task` of each zombie (kprobe/fentry modes).
    pub release_task_ns: Summary,
    /// From the end of an exit to the parent reaping it.
    pub exit_to_reap_ns: Summary,
    /// Zombies reaped before their final switch-out (no delay to measure).
    pub reaped_before_exit_end: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskFreeReport {
    /// From the end of an exit to `sched_process_free` (the RCU callback freeing the task).
    pub exit_to_free_ns: Summary,
    /// Exits whose task was not freed by the end of the run.
    pub not_freed_yet: u64,
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{Marker, Point};

    use super::*;
    use crate::analysis::records::PointHit;

    fn exit(pid: u32, tgid: u32, ipc_ns: u64, start: u64, end: u64) -> Exit {
        let hit = |point, ts_ns| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 };
        Exit {
            pid,
            tgid,
            ipc_ns,
            hits: vec![
                hit(Point::Marker(Marker::DoExit), start),
                hit(Point::Marker(Marker::FinalSwitch), end),
            ],
            ..Exit::default()
        }
    }

    fn record(kind: DeferredKind, start_ns: u64, end_ns: u64, object: u64) -> DeferredRecord {
        DeferredRecord {
            kind: kind as u32,
            pid: 99,
            start_ns,
            end_ns,
            object,
            ..DeferredRecord::default()
        }
    }

    #[test]
    fn a_reused_namespace_address_joins_each_free_to_its_own_exit() {
        let mut d = DeferredWork::new(false, false, false);
        // Namespace 0xA is freed at 200 and its address reused by the next child, whose exit
        // (ending at 300) is read before the first free.
        d.exit(&exit(10, 10, 0xA, 50, 100));
        d.exit(&exit(11, 11, 0xA, 250, 300));
        d.record(&record(DeferredKind::IpcFreeRun, 150, 210, 0));
        d.record(&record(DeferredKind::IpcNsFreed, 150, 200, 0xA));
        d.record(&record(DeferredKind::IpcNsFreed, 350, 400, 0xA));
        let r = d.report();
        assert_eq!(r.ipc.namespaces_joined, 2);
        assert_eq!(r.ipc.exit_to_free_ns.count, 2);
        assert_eq!(r.ipc.exit_to_free_ns.min_ns, 100, "each free joins the exit before it");
        // A kfree of something else in a run is not a namespace in tracepoint mode.
        d.record(&record(DeferredKind::IpcNsFreed, 350, 401, 0xB));
        assert_eq!(d.report().ipc.namespaces_freed, 2);
    }

    #[test]
    fn a_namespace_freed_before_its_exits_final_switch_out_is_joined() {
        // The exit drops the namespace well before its end; on a slow machine the free (after
        // an RCU grace period in a kworker) can come first, in either order of reading.
        for free_first in [false, true] {
            let mut d = DeferredWork::new(true, false, false);
            let free = record(DeferredKind::IpcNsFreed, 150, 200, 0xD);
            if free_first {
                d.record(&free);
            }
            d.exit(&exit(13, 13, 0xD, 100, 300));
            if !free_first {
                d.record(&free);
            }
            let r = d.report();
            assert_eq!((r.ipc.namespaces_freed, r.ipc.namespaces_joined), (1, 1), "{free_first}");
        }
    }

    #[test]
    fn an_address_reused_many_times_before_its_frees_are_read_joins_each_free() {
        let mut d = DeferredWork::new(true, false, false);
        // Eight namespaces in turn at one address, their exits read before any free.
        for i in 0..8 {
            d.exit(&exit(30 + i as u32, 30 + i as u32, 0xF, 100 * i + 10, 100 * i + 20));
        }
        for i in 0..8 {
            d.record(&record(DeferredKind::IpcNsFreed, 100 * i + 40, 100 * i + 50, 0xF));
        }
        let r = d.report();
        assert_eq!((r.ipc.namespaces_freed, r.ipc.namespaces_joined), (8, 8));
        assert_eq!((r.ipc.exit_to_free_ns.min_ns, r.ipc.exit_to_free_ns.max_ns), (30, 30));
    }

    #[test]
    fn frees_of_a_reused_address_read_before_their_exits_join_each_its_own() {
        // Sequential children get the address of the namespace freed just before; the
        // kworker's records can be read ahead of the exits' (another ring buffer).
        let mut d = DeferredWork::new(true, false, false);
        d.record(&record(DeferredKind::IpcNsFreed, 150, 200, 0xE));
        d.record(&record(DeferredKind::IpcNsFreed, 350, 400, 0xE));
        d.exit(&exit(20, 20, 0xE, 50, 100));
        d.exit(&exit(21, 21, 0xE, 250, 300));
        let r = d.report();
        assert_eq!((r.ipc.namespaces_freed, r.ipc.namespaces_joined), (2, 2));
        assert_eq!(
            (r.ipc.exit_to_free_ns.min_ns, r.ipc.exit_to_free_ns.max_ns),
            (100, 100),
            "each free joins the exit before it"
        );
    }

    #[test]
    fn deferred_work_can_arrive_before_its_exit() {
        let mut d = DeferredWork::new(true, true, false);
        d.record(&record(DeferredKind::IpcNsFreed, 500, 600, 0xC));
        // Pid 16: its task's free is one of those the kernel side reports.
        d.record(&record(DeferredKind::Reap, 450, 470, 16));
        d.record(&record(DeferredKind::TaskFreed, 900, 900, 16));
        d.exit(&exit(16, 16, 0xC, 100, 400));
        let r = d.report();
        assert_eq!((r.ipc.namespaces_freed, r.ipc.namespaces_joined), (1, 1));
        assert_eq!(r.ipc.exit_to_free_ns.max_ns, 200);
        assert_eq!(r.reap.release_task_ns.max_ns, 20);
        assert_eq!(r.reap.exit_to_reap_ns.max_ns, 70);
        assert_eq!(r.task_free.exit_to_free_ns.max_ns, 500);
        assert_eq!(d.awaiting_task_free(), 0);
    }

    #[test]
    fn a_queued_run_is_awaited_until_one_starts_after_it() {
        let mut d = DeferredWork::new(true, false, false);
        assert!(!d.awaiting_ipc_run());
        d.record(&record(DeferredKind::IpcFreeQueued, 100, 100, 0));
        assert!(d.awaiting_ipc_run());
        d.record(&record(DeferredKind::IpcFreeRun, 90, 95, 0));
        assert!(d.awaiting_ipc_run(), "a run that started before the queueing does not count");
        d.record(&record(DeferredKind::IpcFreeRun, 120, 130, 0));
        assert!(!d.awaiting_ipc_run());
    }
}
