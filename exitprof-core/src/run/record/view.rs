//! What `exitprof report` shows of a record: the run's report, or a view of it that needs no
//! new run — of one process's exits, each kind of exit apart, one stage in detail.

use std::path::Path;

use super::selection::ExitFilter;
use super::{ReadError, replay, replay_selected};
use crate::{
    analysis::records::{ExitKind, TaskName},
    run::outcome::RunOutcome,
};

/// A view: of whose exits, shown how.
#[derive(Debug)]
pub struct View {
    /// A process's exits, or a thread's (`--pid`); all of the run's when `None`.
    pub pid: Option<u32>,
    /// The exits of the processes of a name (`--comm`).
    pub comm: Option<TaskName>,
    pub shown: Shown,
}

#[derive(Debug)]
pub enum Shown {
    /// The run's report, as the run printed it.
    Report,
    /// Each kind of exit with its own report (`--by-kind`).
    ByKind,
    /// One stage, named or found by a function it covers, in detail (`--stage`).
    Stage(String),
    /// Exits one by one, each with its timeline (`--slowest`, `--exit`).
    Exits(super::ExitsShown),
}

impl View {
    /// The outcome of the recorded run, of the exits the view is of.
    pub fn replay(&self, path: &Path) -> Result<RunOutcome, ReadError> {
        if self.pid.is_none() && self.comm.is_none() {
            return replay(path);
        }
        replay_selected(path, ExitFilter { pid: self.pid, comm: self.comm, kind: None })
    }

    /// The outcome of the recorded run, of the view's exits of one kind (`--by-kind`).
    pub fn replay_kind(&self, path: &Path, kind: ExitKind) -> Result<RunOutcome, ReadError> {
        replay_selected(path, ExitFilter { pid: self.pid, comm: self.comm, kind: Some(kind) })
    }
}
