//! Exits looked at one by one: those over `--slower-than` as they end, or those a report of a
//! record asks for (`report --exit`, `--slowest`). Each is kept whole — its record, its spans
//! and every kernel stack of it — while the rest of the run is only folded into histograms.
//!
//! An exit's stacks come through their own ring buffer, most of them before its record (which
//! goes at its final switch-out), but one taken just before the end may be read in the pass
//! after the record's. A kept exit is therefore held for [`HOLD_PASSES`] reading passes (one
//! reading interval, some 20 ms) before it is handed on, and the stacks that come meanwhile
//! join it. Exits under the threshold cost one comparison: nothing of them is kept.

use std::collections::HashSet;

use crate::analysis::{
    records::{Exit, ExitKey, KernelStack},
    stages::Span,
};

/// Reading passes a kept exit waits for late stacks: the pass that read its record, and one
/// more.
const HOLD_PASSES: u8 = 2;

/// Which exits are kept.
#[derive(Clone, Debug)]
pub enum Pick {
    /// Those that took at least this long (ns), first hit to last.
    SlowerThan(u64),
    /// These exits of a record.
    Exits(HashSet<ExitKey>),
}

/// One exit kept whole.
#[derive(Clone, Debug)]
pub struct KeptExit {
    pub exit: Exit,
    /// The spans the profile cut it into, in order.
    pub spans: Vec<Span>,
    /// Its kernel stacks, blocks and samples, in the order they were read.
    pub stacks: Vec<KernelStack>,
}

/// The exits kept, held until their late stacks have had time to come.
#[derive(Debug)]
pub struct KeptExits {
    pick: Pick,
    /// Kept exits not handed on yet, with the reading passes they have waited.
    held: Vec<(KeptExit, u8)>,
}

impl KeptExits {
    pub fn new(pick: Pick) -> Self {
        Self { pick, held: Vec::new() }
    }

    /// Whether `exit` is one to keep.
    pub fn picks(&self, exit: &Exit) -> bool {
        match &self.pick {
            Pick::SlowerThan(ns) => exit.duration_ns() >= *ns,
            Pick::Exits(keys) => exit.key().is_some_and(|k| keys.contains(&k)),
        }
    }

    /// Keeps an exit the pick chose, with the stacks that had come before its record.
    pub fn keep(&mut self, exit: Exit, spans: Vec<Span>, stacks: Vec<KernelStack>) {
        self.held.push((KeptExit { exit, spans, stacks }, 0));
    }

    /// A stack read after its exit's record: it joins the exit if that is held.
    pub fn stack(&mut self, stack: &KernelStack) {
        if self.held.is_empty() {
            return;
        }
        if let Some((kept, _)) =
            self.held.iter_mut().find(|(k, _)| k.exit.key() == Some(stack.exit))
        {
            kept.stacks.push(stack.clone());
        }
    }

    /// A reading pass is over: the exits held long enough, oldest first.
    pub fn pass(&mut self) -> Vec<KeptExit> {
        for (_, passes) in &mut self.held {
            *passes += 1;
        }
        let ready = self.held.iter().take_while(|(_, p)| *p >= HOLD_PASSES).count();
        self.held.drain(..ready).map(|(k, _)| k).collect()
    }

    /// No record is to come: every exit held.
    pub fn finish(&mut self) -> Vec<KeptExit> {
        self.held.drain(..).map(|(k, _)| k).collect()
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{Marker, Point};

    use super::*;
    use crate::analysis::records::{PointHit, StackKind};

    fn exit(pid: u32, start: u64, ns: u64) -> Exit {
        let hit = |ts_ns| PointHit {
            point: Point::Marker(Marker::FinalSwitch),
            ts_ns,
            off_cpu_ns: 0,
            runq_ns: 0,
        };
        Exit { pid, tgid: pid, hits: vec![hit(start), hit(start + ns)], ..Exit::default() }
    }

    fn stack(pid: u32, start: u64) -> KernelStack {
        KernelStack {
            kind: StackKind::Blocked,
            exit: ExitKey { pid, start_ns: start },
            n_hits: 1,
            ts_ns: start + 1,
            ns: 5,
            stack: vec![1, 2],
        }
    }

    #[test]
    fn slow_exits_are_held_for_their_late_stacks_then_handed_on() {
        let mut kept = KeptExits::new(Pick::SlowerThan(1_000));
        assert!(!kept.picks(&exit(1, 0, 999)) && kept.picks(&exit(2, 0, 1_000)));
        kept.keep(exit(2, 0, 1_000), Vec::new(), vec![stack(2, 0)]);
        // Read in the pass of its record: not yet handed on.
        kept.stack(&stack(2, 0));
        kept.stack(&stack(3, 0));
        assert!(kept.pass().is_empty());
        kept.keep(exit(4, 0, 5_000), Vec::new(), Vec::new());
        let ready = kept.pass();
        assert_eq!(ready.len(), 1);
        assert_eq!((ready[0].exit.pid, ready[0].stacks.len()), (2, 2));
        assert_eq!(kept.finish().len(), 1);
    }

    #[test]
    fn a_record_picks_the_exits_asked_for() {
        let asked = HashSet::from([ExitKey { pid: 7, start_ns: 10 }]);
        let kept = KeptExits::new(Pick::Exits(asked));
        assert!(kept.picks(&exit(7, 10, 1)) && !kept.picks(&exit(7, 11, 1)));
    }
}
