//! Which of a record's exits a report covers (`exitprof report --pid`, each kind of `--by-kind`):
//! the exit records kept, and the kernel stacks of those exits, joined by the exit they name.
//! Deferred work is kept whole: what joins a kept exit joins it as in the whole run, and what
//! joins none (the `free_ipc` kworker's runs) is the run's.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::analysis::records::{Exit, ExitKey, ExitKind, TaskName, decode_stack};

/// What a kept exit is: of one process (or thread), of one kind, or both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitFilter {
    /// A process id (the exits of its threads) or the id of one thread (its exit alone), as
    /// exitprof's PID namespace saw them.
    pub pid: Option<u32>,
    /// The exits of the processes of this name (their threads' own names aside).
    pub comm: Option<TaskName>,
    pub kind: Option<ExitKind>,
}

impl ExitFilter {
    pub fn keeps(&self, exit: &Exit) -> bool {
        let pid = self.pid.is_none_or(|pid| exit.ns_tgid == pid || exit.ns_pid == pid);
        let comm = self.comm.is_none_or(|comm| exit.process_comm == comm);
        pid && comm && self.kind.is_none_or(|kind| exit.kind() == kind)
    }

    /// `pid 42`, `thread exits`, `thread exits of pid 42`, `comm make`.
    pub fn describe(&self) -> String {
        let whose = match (self.pid, self.comm) {
            (Some(pid), _) => Some(format!("pid {pid}")),
            (None, Some(comm)) => Some(format!("comm {comm}")),
            (None, None) => None,
        };
        match (self.kind, whose) {
            (Some(kind), Some(whose)) => format!("{} exits of {whose}", kind.name()),
            (Some(kind), None) => format!("{} exits", kind.name()),
            (None, Some(whose)) => whose,
            (None, None) => "all exits".to_owned(),
        }
    }
}

/// A report of the exits a filter kept, out of how many the run recorded.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Selected {
    #[serde(flatten)]
    pub filter: ExitFilter,
    pub exits_in_run: u64,
}

/// The exits a filter keeps, found in a first reading of the file; the second keeps their
/// records and only the stacks of theirs.
pub struct Selection {
    filter: ExitFilter,
    kept: HashSet<ExitKey>,
    /// Exits whose process's name the record has (none in a record of format 1).
    pub named: u64,
}

impl Selection {
    pub fn new(filter: ExitFilter) -> Self {
        Self { filter, kept: HashSet::new(), named: 0 }
    }

    /// First reading: one exit record.
    pub fn note_exit(&mut self, bytes: &[u8]) {
        let Ok(exit) = Exit::decode(bytes) else { return };
        self.named += u64::from(exit.process_comm.is_known());
        if self.filter.keeps(&exit)
            && let Some(key) = exit.key()
        {
            self.kept.insert(key);
        }
    }

    /// Second reading: whether an exit record is kept. One that cannot be decoded is nobody's:
    /// it is among the run's losses.
    pub fn keeps_exit(&self, bytes: &[u8]) -> bool {
        Exit::decode(bytes).is_ok_and(|exit| self.filter.keeps(&exit))
    }

    /// Whether a kernel stack is of a kept exit. A stack of an exit never recorded cannot be
    /// told to be of one, and is left out.
    pub fn keeps_stack(&self, bytes: &[u8]) -> bool {
        decode_stack(bytes).is_some_and(|stack| self.kept.contains(&stack.exit))
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::{
        point::{Marker, Point},
        record::{FLAG_GROUP_DEAD, FLAG_KIND_KNOWN},
    };

    use super::*;
    use crate::analysis::records::{
        KernelStack, PointHit, StackKind,
        tests::{encode_exit, encode_stack},
    };

    /// An exit of thread `pid` of process `tgid` (as exitprof's namespace sees them; the
    /// kernel's ids differ), starting at `start`.
    fn exit(pid: u32, tgid: u32, flags: u32, start: u64) -> Exit {
        let hit = |point, ts_ns| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 };
        Exit {
            pid: pid + 1000,
            tgid: tgid + 1000,
            ns_pid: pid,
            ns_tgid: tgid,
            flags,
            hits: vec![
                hit(Point::Marker(Marker::SysEnterExit), start),
                hit(Point::Marker(Marker::FinalSwitch), start + 100),
            ],
            ..Exit::default()
        }
    }

    fn stack_of(exit: &Exit) -> Vec<u8> {
        encode_stack(&KernelStack {
            kind: StackKind::OnCpu,
            exit: exit.key().unwrap(),
            n_hits: 1,
            ts_ns: exit.hits[0].ts_ns + 50,
            ns: 0,
            stack: vec![1, 2],
        })
    }

    const THREAD: u32 = FLAG_KIND_KNOWN;
    const PROCESS: u32 = FLAG_KIND_KNOWN | FLAG_GROUP_DEAD;

    #[test]
    fn a_pid_keeps_its_process_threads_and_a_thread_id_its_thread_alone() {
        let exits = [
            exit(11, 10, THREAD, 0),
            exit(12, 10, THREAD, 10),
            exit(10, 10, PROCESS, 20),
            exit(20, 20, PROCESS, 30),
        ];
        let kept = |filter: ExitFilter| -> Vec<u32> {
            exits.iter().filter(|e| filter.keeps(e)).map(|e| e.ns_pid).collect()
        };
        assert_eq!(kept(ExitFilter { pid: Some(10), comm: None, kind: None }), [11, 12, 10]);
        assert_eq!(kept(ExitFilter { pid: Some(12), comm: None, kind: None }), [12]);
        // The kernel's ids are not the ones exitprof's namespace saw.
        assert_eq!(kept(ExitFilter { pid: Some(1010), comm: None, kind: None }), [0u32; 0]);
        let threads = ExitFilter { pid: None, comm: None, kind: Some(ExitKind::Thread) };
        assert_eq!(kept(threads), [11, 12]);
        let processes = ExitFilter { pid: Some(10), comm: None, kind: Some(ExitKind::Process) };
        assert_eq!(kept(processes), [10]);
        assert_eq!(kept(ExitFilter::default()).len(), exits.len());
    }

    #[test]
    fn only_the_stacks_of_kept_exits_are_kept_whichever_comes_first() {
        let mine = exit(11, 10, THREAD, 0);
        // The same thread id's next exit, of another process (the id was reused).
        let reused = exit(11, 30, PROCESS, 5_000);
        let mut selection = Selection::new(ExitFilter { pid: Some(10), comm: None, kind: None });
        for e in [&mine, &reused] {
            selection.note_exit(&encode_exit(e));
        }
        assert!(selection.keeps_exit(&encode_exit(&mine)));
        assert!(!selection.keeps_exit(&encode_exit(&reused)));
        assert!(selection.keeps_stack(&stack_of(&mine)));
        assert!(!selection.keeps_stack(&stack_of(&reused)));
        // Of an exit never recorded: not known to be the process's.
        assert!(!selection.keeps_stack(&stack_of(&exit(13, 10, THREAD, 9_000))));
        // Undecodable records are nobody's.
        assert!(!selection.keeps_exit(&[0; 3]) && !selection.keeps_stack(&[0; 3]));
    }
}
