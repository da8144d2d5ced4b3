//! Exits looked at one by one: those over `--slower-than` as they end, or those a report of a
//! record asks for (`report --exit`, `--slowest`). Each is kept whole — its record, its spans
//! and every kernel stack of it — while the rest of the run is only folded into histograms.
//!
//! An exit's stacks come through their own ring buffer, most of them before its record (which
//! goes at its final switch-out), but one taken just before the end may be read in the pass
//! after the record's. A kept exit is therefore held for [`HOLD_PASSES`] reading passes (one
//! reading interval, some 20 ms) before it is handed on, and the stacks that come meanwhile
//! join it. Exits under the threshold cost one comparison: nothing of them is kept.
//!
//! A namespace teardown an exit set off runs later, in a kworker, and is joined to its exit
//! then (`analysis::teardown`). Under `--slower-than`, a teardown is shown when it joins an exit
//! that was shown, or when its own share of its run took the threshold or longer (its exit was
//! quick, but the namespace it left took that long to tear down): held, too, for its run's late
//! stacks.

use std::collections::{HashSet, VecDeque};

use crate::analysis::{
    records::{Exit, ExitKey, KernelStack},
    stages::Span,
    teardown::Joined,
};

/// Reading passes a kept exit waits for late stacks: the pass that read its record, and one
/// more.
const HOLD_PASSES: u8 = 2;

/// Exits shown that a teardown may still join, the latest: a bound for a run that lasts days
/// (slow exits are few; a namespace's teardown comes within seconds of its exit).
const SHOWN_REMEMBERED: usize = 4096;

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

/// The exits kept, held until their late stacks have had time to come, and the teardowns
/// joined to them.
#[derive(Debug)]
pub struct KeptExits {
    pick: Pick,
    /// Kept exits not handed on yet, with the reading passes they have waited.
    held: Vec<(KeptExit, u8)>,
    /// The exits handed on, the latest [`SHOWN_REMEMBERED`].
    shown: VecDeque<ExitKey>,
    /// Teardowns joined so far that were looked at (an index into the session's joins).
    joins_read: usize,
    /// Teardowns to show, not handed on yet, with the passes they have waited.
    held_teardowns: Vec<(Joined, u8)>,
}

/// What a reading pass hands on: exits, and teardowns joined to exits.
#[derive(Debug, Default)]
pub struct Ready {
    pub exits: Vec<KeptExit>,
    /// Each with whether its exit was handed on (else it is shown for its own length).
    pub teardowns: Vec<(Joined, bool)>,
}

impl KeptExits {
    pub fn new(pick: Pick) -> Self {
        Self {
            pick,
            held: Vec::new(),
            shown: VecDeque::new(),
            joins_read: 0,
            held_teardowns: Vec::new(),
        }
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

    /// A reading pass is over: the exits held long enough, oldest first, and the teardowns
    /// `joined` (the session's joins so far) holds for them, once held long enough too.
    pub fn pass(&mut self, joined: &[Joined]) -> Ready {
        for (_, passes) in &mut self.held {
            *passes += 1;
        }
        let ready = self.held.iter().take_while(|(_, p)| *p >= HOLD_PASSES).count();
        let exits = self.held.drain(..ready).map(|(k, _)| k).collect();
        self.hand_on(exits, joined, false)
    }

    /// No record is to come: every exit held, and every teardown joined to them.
    pub fn finish(&mut self, joined: &[Joined]) -> Ready {
        let exits = self.held.drain(..).map(|(k, _)| k).collect();
        self.hand_on(exits, joined, true)
    }

    /// Hands `exits` on, remembering them for their teardowns; holds the teardowns joined
    /// since the last pass that are to be shown, and hands on those held long enough (all of
    /// them with `all`).
    fn hand_on(&mut self, exits: Vec<KeptExit>, joined: &[Joined], all: bool) -> Ready {
        for kept in &exits {
            if let Some(key) = kept.exit.key() {
                if self.shown.len() == SHOWN_REMEMBERED {
                    self.shown.pop_front();
                }
                self.shown.push_back(key);
            }
        }
        for (_, passes) in &mut self.held_teardowns {
            *passes += 1;
        }
        let new = joined.get(self.joins_read..).unwrap_or_default();
        self.joins_read = joined.len();
        for j in new {
            let key = exit_of(j);
            let of_kept = self.shown.contains(&key)
                || self.held.iter().any(|(k, _)| k.exit.key() == Some(key));
            let slow = matches!(self.pick, Pick::SlowerThan(ns) if j.torn.share_ns >= ns);
            if of_kept || slow {
                self.held_teardowns.push((*j, 0));
            }
        }
        let ready = if all {
            self.held_teardowns.len()
        } else {
            self.held_teardowns.iter().take_while(|(_, p)| *p >= HOLD_PASSES).count()
        };
        let teardowns = self
            .held_teardowns
            .drain(..ready)
            .map(|(j, _)| (j, self.shown.contains(&exit_of(&j))))
            .collect();
        Ready { exits, teardowns }
    }
}

/// The exit a teardown is joined to.
fn exit_of(j: &Joined) -> ExitKey {
    ExitKey { pid: j.exit.pid, start_ns: j.exit.start_ns }
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{Marker, Point};

    use super::*;
    use crate::analysis::{
        records::{PointHit, StackKind, TaskName},
        teardown::{ExitSide, TeardownKind, TornDown},
    };

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
        assert!(kept.pass(&[]).exits.is_empty());
        kept.keep(exit(4, 0, 5_000), Vec::new(), Vec::new());
        let ready = kept.pass(&[]).exits;
        assert_eq!(ready.len(), 1);
        assert_eq!((ready[0].exit.pid, ready[0].stacks.len()), (2, 2));
        assert_eq!(kept.finish(&[]).exits.len(), 1);
    }

    /// A network namespace teardown of `share_ns` joined to the exit of `pid` that started at `start`.
    fn joined(pid: u32, start: u64, share_ns: u64) -> Joined {
        Joined {
            torn: TornDown {
                kind: TeardownKind::Net,
                address: 0xA0,
                run_pid: 9,
                inum: 1,
                run_start_ns: start + 10_000,
                run_ns: share_ns,
                batch: 1,
                share_ns,
                on_cpu_ns: share_ns,
                blocked_ns: 0,
                runq_ns: 0,
            },
            exit: ExitSide {
                pid,
                tgid: pid,
                start_ns: start,
                end_ns: start + 100,
                released: true,
                free_awaited: false,
                freed_ns: None,
                comm: TaskName::default(),
                process_comm: TaskName::default(),
                cgroup_id: 0,
            },
        }
    }

    /// Teardowns joined later are handed on after their exit: that of an exit shown (joined
    /// while the exit was still held, or after it was shown), and that of a quick exit whose
    /// teardown alone took the threshold; not that of a quick exit with a quick teardown.
    #[test]
    fn teardowns_follow_the_exits_shown_and_are_shown_when_slow_themselves() {
        let mut kept = KeptExits::new(Pick::SlowerThan(1_000));
        kept.keep(exit(2, 0, 5_000), Vec::new(), Vec::new());
        let mut joins = vec![joined(2, 0, 10)];
        let ready = kept.pass(&joins);
        assert!(ready.exits.is_empty() && ready.teardowns.is_empty());
        let ready = kept.pass(&joins);
        assert_eq!((ready.exits.len(), ready.teardowns.len()), (1, 0));
        joins.extend([joined(3, 50, 999), joined(4, 60, 1_000)]);
        let shown = |ready: Ready| -> Vec<(u32, bool)> {
            ready.teardowns.iter().map(|(j, shown)| (j.exit.pid, *shown)).collect()
        };
        assert_eq!(shown(kept.pass(&joins)), [(2, true)]);
        assert_eq!(shown(kept.pass(&joins)), []);
        joins.push(joined(2, 0, 20));
        assert_eq!(shown(kept.finish(&joins)), [(4, false), (2, true)]);
    }

    #[test]
    fn a_record_picks_the_exits_asked_for() {
        let asked = HashSet::from([ExitKey { pid: 7, start_ns: 10 }]);
        let kept = KeptExits::new(Pick::Exits(asked));
        assert!(kept.picks(&exit(7, 10, 1)) && !kept.picks(&exit(7, 11, 1)));
    }
}
