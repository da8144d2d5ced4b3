//! Kernel stacks of exits — on-CPU samples and the stacks where exits blocked — joined to their
//! exits' records and tallied by stage and stack.
//!
//! A stack is sent before its exit's record (the record goes at the exit's final switch-out),
//! but the two come through different ring buffers, read one after the other: a stack may be
//! read before its exit's record, and then waits for it, or after it, and then finds it among
//! the exits recently read. Either way it is keyed by the exit it names: (thread id, first hit's
//! timestamp). It says how many hits the record held when it was taken, so the stage is the one
//! of the span between the last of those hits and the next, exactly as the profile cut it.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::analysis::{
    records::{Exit, ExitKey, KernelStack, StackKind},
    stages::{Span, span_after},
};

/// A stack waits this long (by the stacks' own clock) for its exit's record. An exit that takes
/// longer than this is stuck, and its stacks are counted as never joined.
pub(crate) const WAIT_LIMIT_NS: u64 = 30_000_000_000;
/// Most stacks waiting at once; later ones are counted as never joined. At the default sampling
/// rate on 2 CPUs this is minutes of exits that never end.
const MAX_WAITING: usize = 200_000;
/// How often (by the stacks' clock) the waiting stacks are swept for expired ones.
const SWEEP_EVERY_NS: u64 = 1_000_000_000;
/// Exits remembered for stacks read after their record (the stacks' ring buffer is read right
/// after the exits'): more than a full exit ring buffer holds, in a few MiB.
const RECENT_EXITS: usize = 16_384;

/// What became of the stacks of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinCounts {
    /// Counted under a stage of their exit.
    pub joined: u64,
    /// Their exit's record never came (the exit was lost, or did not end while exitprof
    /// watched), or they waited too long for it.
    pub unjoined: u64,
    /// Their exit came, but lost the hits that would place them (more hits than a record
    /// holds).
    pub unplaced: u64,
}

/// The stacks of one kind, stage and stack: how many, and (for blocks) how long.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub count: u64,
    pub ns: u128,
}

/// A stack waiting for its exit.
#[derive(Clone, Copy)]
struct Waiting {
    kind: StackKind,
    n_hits: u32,
    ts_ns: u64,
    ns: u64,
    stack: u32,
}

/// Stacks tallied by kind, stage and stack, and those still waiting for their exit.
#[derive(Default)]
pub struct ExitStacks {
    waiting: HashMap<ExitKey, Vec<Waiting>>,
    /// The stage of each span of the exits read last, by exit, oldest first in `recent_order`.
    recent: HashMap<ExitKey, Box<[u16]>>,
    recent_order: VecDeque<ExitKey>,
    n_waiting: usize,
    newest_ns: u64,
    swept_ns: u64,
    /// Each distinct raw stack once; tallies refer to it by index.
    stacks: StackTable,
    tallies: HashMap<(StackKind, usize, u32), Tally>,
    /// On-CPU samples, and blocks whose stack was taken.
    pub samples: JoinCounts,
    pub blocks: JoinCounts,
}

impl ExitStacks {
    /// One stack: it joins its exit if that was read already, or waits for it.
    pub fn record(&mut self, s: &KernelStack) {
        let stack = self.stacks.intern(&s.stack);
        let waiting = Waiting { kind: s.kind, n_hits: s.n_hits, ts_ns: s.ts_ns, ns: s.ns, stack };
        if let Some(stages) = self.recent.get(&s.exit) {
            let stage = place(stages, s.n_hits);
            self.tally(stage, waiting);
            return;
        }
        self.newest_ns = self.newest_ns.max(s.ts_ns);
        if self.newest_ns.saturating_sub(self.swept_ns) >= SWEEP_EVERY_NS {
            self.expire();
        }
        if self.n_waiting >= MAX_WAITING {
            self.counts(s.kind).unjoined += 1;
            return;
        }
        self.waiting.entry(s.exit).or_default().push(waiting);
        self.n_waiting += 1;
    }

    /// An exit, with the spans the profile cut it into: the stacks that wait for it join it,
    /// and it is remembered for those read later. With `keep`, the stacks that joined it are
    /// returned too, as they came (an exit looked at on its own).
    pub fn exit(&mut self, exit: &Exit, spans: &[Span], keep: bool) -> Vec<KernelStack> {
        let Some(key) = exit.key() else { return Vec::new() };
        // Stage indices are few (one per distinct name): u16 keeps the remembered exits small.
        let stages: Box<[u16]> =
            spans.iter().map(|s| u16::try_from(s.stage).unwrap_or(u16::MAX)).collect();
        let waiting = self.waiting.remove(&key).unwrap_or_default();
        self.n_waiting -= waiting.len();
        let kept = if keep {
            waiting
                .iter()
                .map(|w| KernelStack {
                    kind: w.kind,
                    exit: key,
                    n_hits: w.n_hits,
                    ts_ns: w.ts_ns,
                    ns: w.ns,
                    stack: self.stacks.get(w.stack).to_vec(),
                })
                .collect()
        } else {
            Vec::new()
        };
        for w in waiting {
            let stage = place(&stages, w.n_hits);
            self.tally(stage, w);
        }
        if self.recent_order.len() >= RECENT_EXITS
            && let Some(oldest) = self.recent_order.pop_front()
        {
            self.recent.remove(&oldest);
        }
        self.recent.insert(key, stages);
        self.recent_order.push_back(key);
        kept
    }

    fn counts(&mut self, kind: StackKind) -> &mut JoinCounts {
        match kind {
            StackKind::OnCpu => &mut self.samples,
            StackKind::Blocked => &mut self.blocks,
        }
    }

    fn tally(&mut self, stage: Option<usize>, w: Waiting) {
        match stage {
            Some(stage) => {
                let t = self.tallies.entry((w.kind, stage, w.stack)).or_default();
                t.count += 1;
                t.ns += u128::from(w.ns);
                self.counts(w.kind).joined += 1;
            }
            None => self.counts(w.kind).unplaced += 1,
        }
    }

    /// The run is over: stacks still waiting will never join their exit.
    pub fn finish(&mut self) {
        for w in self.waiting.drain().flat_map(|(_, w)| w).collect::<Vec<_>>() {
            self.counts(w.kind).unjoined += 1;
        }
        self.n_waiting = 0;
    }

    /// Counts as never joined the stacks of exits whose newest stack is older than the wait
    /// limit.
    fn expire(&mut self) {
        let limit = self.newest_ns.saturating_sub(WAIT_LIMIT_NS);
        let mut expired = Vec::new();
        self.waiting.retain(|_, stacks| {
            let keep = stacks.iter().any(|w| w.ts_ns >= limit);
            if !keep {
                expired.extend(stacks.iter().map(|w| w.kind));
            }
            keep
        });
        self.n_waiting -= expired.len();
        for kind in expired {
            self.counts(kind).unjoined += 1;
        }
        self.swept_ns = self.newest_ns;
    }

    /// The tallies of one kind: (stage index, raw stack, tally).
    pub fn tallies(&self, kind: StackKind) -> impl Iterator<Item = (usize, &[u64], Tally)> {
        self.tallies
            .iter()
            .filter(move |((k, _, _), _)| *k == kind)
            .map(|(&(_, stage, stack), &t)| (stage, self.stacks.get(stack), t))
    }
}

/// Distinct raw kernel stacks, each kept once and named by an index.
#[derive(Default)]
pub struct StackTable {
    stacks: Vec<Vec<u64>>,
    ids: HashMap<Vec<u64>, u32>,
}

impl StackTable {
    /// The index of `stack`, kept if it is new.
    pub fn intern(&mut self, stack: &[u64]) -> u32 {
        if let Some(&id) = self.ids.get(stack) {
            return id;
        }
        let id = u32::try_from(self.stacks.len()).expect("fewer than 2^32 distinct stacks");
        self.stacks.push(stack.to_vec());
        self.ids.insert(stack.to_vec(), id);
        id
    }

    /// The stack of index `id`.
    pub fn get(&self, id: u32) -> &[u64] {
        &self.stacks[id as usize]
    }
}

/// The stage of the span a stack taken after `n_hits` hits lies in (`None` when the exit's
/// record lacks the hits that would place it).
fn place(stages: &[u16], n_hits: u32) -> Option<usize> {
    span_after(n_hits).and_then(|i| stages.get(i)).map(|&s| usize::from(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(pid: u32, start_ns: u64, spans: usize) -> (Exit, Vec<Span>) {
        let hits = (0..=spans as u64)
            .map(|i| crate::analysis::records::PointHit {
                point: exitprof_common::point::Point::Marker(
                    exitprof_common::point::Marker::FinalSwitch,
                ),
                ts_ns: start_ns + i,
                off_cpu_ns: 0,
                runq_ns: 0,
            })
            .collect();
        let spans = (0..spans).map(|stage| Span { stage, ns: 1, off_cpu_ns: 0, runq_ns: 0 });
        (Exit { pid, tgid: pid, hits, ..Exit::default() }, spans.collect())
    }

    fn stack(kind: StackKind, pid: u32, start_ns: u64, n_hits: u32, ns: u64) -> KernelStack {
        KernelStack {
            kind,
            exit: ExitKey { pid, start_ns },
            n_hits,
            ts_ns: start_ns,
            ns,
            stack: vec![u64::from(n_hits)],
        }
    }

    /// Blocks and samples join their exit whether they are read before or after its record,
    /// each under the stage it was taken in, and each kind is tallied apart.
    #[test]
    fn both_kinds_join_before_and_after_their_exit() {
        let mut s = ExitStacks::default();
        s.record(&stack(StackKind::Blocked, 7, 100, 1, 5_000));
        s.record(&stack(StackKind::OnCpu, 7, 100, 2, 0));
        let (e, spans) = exit(7, 100, 3);
        s.exit(&e, &spans, false);
        s.record(&stack(StackKind::Blocked, 7, 100, 1, 7_000));
        s.record(&stack(StackKind::Blocked, 7, 100, 9, 1));
        s.record(&stack(StackKind::Blocked, 8, 100, 1, 1));
        s.finish();
        assert_eq!(s.blocks, JoinCounts { joined: 2, unjoined: 1, unplaced: 1 });
        assert_eq!(s.samples, JoinCounts { joined: 1, unjoined: 0, unplaced: 0 });
        let blocked: Vec<(usize, Tally)> =
            s.tallies(StackKind::Blocked).map(|(stage, _, t)| (stage, t)).collect();
        assert_eq!(blocked, [(0, Tally { count: 2, ns: 12_000 })]);
    }
}
