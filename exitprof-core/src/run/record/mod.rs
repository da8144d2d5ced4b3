//! A run kept in a file (`exitprof record -o FILE`) and read back (`exitprof report FILE`): the
//! raw records in the order they came from the kernel, with the rest of what the run's outcome
//! is made of (`contents`), in a versioned, compressed file (`container`). Read back, the same
//! records are folded into a new session and the outcome is made from it by the code a live run
//! uses, on any machine: the report of a file is the report its run printed; or of only some
//! of its exits (`selection`).

mod container;
mod contents;
mod opaque;
pub mod selection;
pub mod view;

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use exitprof_common::counters;

pub use self::container::{Kind, MAGIC, ReadError};
use self::{
    container::{Reader, Writer},
    contents::{Closing, Opening},
    opaque::Opaque,
    selection::{ExitFilter, Selected, Selection},
};
use crate::{
    analysis::{
        exit_teardown::ExitTeardown,
        exit_timeline::{Context, ExitTimeline},
        kept_exits::{KeptExit, Pick},
        records::{Exit, ExitKey},
        session::Session,
    },
    base::atomic_file,
    kernel::kallsyms::Kallsyms,
    run::outcome::{RunOutcome, RunSetup},
};

/// Checks, before anything runs, that a record can be written to `path`.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    atomic_file::check_writable(path)
        .map_err(|why| anyhow::anyhow!("cannot record to {}: {why}", path.display()))
}

/// A record file being written through a run, in place once the run is over.
pub struct Recorder {
    file: Writer,
    path: PathBuf,
    /// The kernel addresses of the records kept, and what the file holds instead.
    opaque: Opaque,
    /// The record being kept, its addresses replaced.
    scratch: Vec<u8>,
}

impl Recorder {
    /// Begins the record file at `path` with the run's setup.
    pub fn create(path: &Path, setup: &RunSetup) -> anyhow::Result<Self> {
        let mut file =
            Writer::create(path).with_context(|| format!("recording to {}", path.display()))?;
        file.frame(Kind::Opening, &serde_json::to_vec(&Opening::new(setup))?);
        Ok(Self { file, path: path.to_owned(), opaque: Opaque::default(), scratch: Vec::new() })
    }

    /// Keeps one raw record, without the kernel addresses it holds ([`opaque`]).
    pub fn keep(&mut self, kind: Kind, bytes: &[u8]) {
        self.scratch.clear();
        self.scratch.extend_from_slice(bytes);
        self.opaque.conceal(kind, &mut self.scratch);
        self.file.frame(kind, &self.scratch);
    }

    /// Ends the file with how the run ended and the symbols that name its stacks' frames
    /// (`symbols`, the running kernel's, name them), and puts it in place.
    pub fn finish(mut self, outcome: &RunOutcome, symbols: &Kallsyms) -> anyhow::Result<()> {
        let closing = Closing::new(outcome, self.opaque.symbols(symbols));
        self.file.frame(Kind::Closing, &serde_json::to_vec(&closing)?);
        self.file.commit().with_context(|| format!("writing the record {}", self.path.display()))
    }
}

/// The outcome of the run recorded in the file at `path`.
pub fn replay(path: &Path) -> Result<RunOutcome, ReadError> {
    // The whole file is checked first: a damaged one is refused before any of its records is
    // folded (with a warning for each record the damage made undecodable).
    let (opening, _) = read(path, |_, _| {})?;
    let Folded { outcome, .. } = fold(path, opening, None, |_, _| true)?;
    refuse_undecodable(path, &outcome)?;
    Ok(outcome)
}

/// The kernel sends no exit record exitprof cannot decode, and the file's checksum covers what
/// it kept: an undecodable one was read in the wrong format, which the header's version (outside
/// the checksum) said. Its run's figures would be all losses.
fn refuse_undecodable(path: &Path, outcome: &RunOutcome) -> Result<(), ReadError> {
    let undecodable = outcome.losses.get(counters::UNDECODABLE);
    if undecodable > 0 {
        let version = Reader::open(path)?.version();
        let records = undecodable + outcome.profile.exits;
        return Err(ReadError::ExitsUndecodable { undecodable, records, version });
    }
    Ok(())
}

/// Which of a record's exits to look at one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitsShown {
    /// The N that took longest, longest first.
    Slowest(usize),
    /// The exits of thread PID (or of the threads of process PID), as exitprof's PID
    /// namespace saw them, in the order they ended.
    Of(u32),
}

/// The exits of the record at `path` that `shown` names, each with its whole timeline.
pub fn replay_exits(path: &Path, shown: ExitsShown) -> Result<Vec<ExitTimeline>, ReadError> {
    let mut candidates: Vec<(u64, ExitKey)> = Vec::new();
    let (opening, _) = read(path, |kind, bytes| {
        if kind != Kind::Exit {
            return;
        }
        let Ok(exit) = Exit::decode(bytes) else { return };
        let chosen = match shown {
            ExitsShown::Slowest(_) => true,
            ExitsShown::Of(pid) => exit.ns_pid == pid || exit.ns_tgid == pid,
        };
        if chosen && let Some(key) = exit.key() {
            candidates.push((exit.duration_ns(), key));
        }
    })?;
    if let ExitsShown::Slowest(n) = shown {
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        candidates.truncate(n);
    }
    let keys = candidates.iter().map(|&(_, key)| key).collect();
    let Folded { outcome, kept, teardowns, symbols } =
        fold(path, opening, Some(Pick::Exits(keys)), |_, _| true)?;
    refuse_undecodable(path, &outcome)?;
    // Where the run grouped its exits by cgroup, the record names their cgroups.
    let mut cgroup = |id: u64| {
        let paths = &outcome.groups.as_ref()?.cgroup_paths;
        paths.path(id).map(str::to_owned)
    };
    let mut context = Context {
        profile: &outcome.profile,
        symbols: &symbols,
        cgroup: &mut cgroup,
        wall_at_zero: None,
    };
    let mut timelines: Vec<ExitTimeline> =
        kept.iter().map(|k| ExitTimeline::of(k, &mut context)).collect();
    for t in &mut timelines {
        t.teardowns = teardowns.iter().filter(|d| d.is_of(t.pid, t.start_ns)).cloned().collect();
    }
    if let ExitsShown::Slowest(_) = shown {
        timelines.sort_by_key(|t| std::cmp::Reverse(t.duration_ns));
    }
    Ok(timelines)
}

/// The outcome of the run recorded at `path` made of the exits `filter` keeps, their stacks and
/// the deferred work that joins them. Its losses, and what its workload did (its elapsed, user
/// and sys time), are the whole run's: which exits were lost cannot be told.
pub fn replay_selected(path: &Path, filter: ExitFilter) -> Result<RunOutcome, ReadError> {
    let whole = replay(path)?;
    let mut selection = Selection::new(filter);
    let (opening, _) = read(path, |kind, bytes| {
        if kind == Kind::Exit {
            selection.note_exit(bytes);
        }
    })?;
    if filter.comm.is_some() && selection.named == 0 && whole.profile.exits > 0 {
        return Err(ReadError::Unnamed);
    }
    let Folded { mut outcome, .. } = fold(path, opening, None, |kind, bytes| match kind {
        Kind::Exit => selection.keeps_exit(bytes),
        Kind::Stack => selection.keeps_stack(bytes),
        Kind::Deferred | Kind::Cgroup | Kind::Opening | Kind::Closing => true,
    })?;
    outcome.losses = whole.losses;
    // What the run expected is of all its exits.
    outcome.expected_exits = None;
    outcome.selected = Some(Selected { filter, exits_in_run: whole.profile.exits });
    Ok(outcome)
}

/// A record folded: its run's outcome, the exits it was asked to keep whole, and the kernel
/// symbols its stacks lie in.
struct Folded {
    outcome: RunOutcome,
    kept: Vec<KeptExit>,
    /// The namespace teardowns joined to the exits kept.
    teardowns: Vec<ExitTeardown>,
    symbols: Kallsyms,
}

/// Folds the records of the file at `path` that `keep` keeps into the outcome of its run,
/// keeping the exits `pick` chooses whole.
fn fold(
    path: &Path,
    opening: Opening,
    pick: Option<Pick>,
    keep: impl Fn(Kind, &[u8]) -> bool,
) -> Result<Folded, ReadError> {
    let setup = opening.setup().map_err(ReadError::Damaged)?;
    let mut session = Session::new(&setup.plan, setup.groups);
    if let Some(pick) = pick {
        session.keep_exits(pick);
    }
    session.begin_run(setup.epoch);
    let (_, closing) = read(path, |kind, bytes| match kind {
        _ if !keep(kind, bytes) => {}
        Kind::Exit => session.exit_record(bytes),
        Kind::Deferred => session.deferred_record(bytes),
        Kind::Stack => session.stack_record(bytes),
        Kind::Cgroup => session.cgroup_record(bytes),
        Kind::Opening | Kind::Closing => unreachable!("records only"),
    })?;
    let (end, own_cost, symbols) = closing.end();
    let symbols = Kallsyms::of_symbols(&symbols);
    let kept = session.kept.as_mut().map(|k| k.finish(&[]).exits).unwrap_or_default();
    // The namespace teardowns joined to the exits kept.
    session.teardowns.finish();
    let keys: HashSet<ExitKey> = kept.iter().filter_map(|k| k.exit.key()).collect();
    let teardowns = session
        .teardowns
        .joined
        .iter()
        .filter(|j| keys.contains(&ExitKey { pid: j.exit.pid, start_ns: j.exit.start_ns }))
        .map(|j| ExitTeardown::of(j, &session.teardowns, &symbols, None))
        .collect();
    let outcome = RunOutcome::of(setup, session, end, &symbols, || own_cost);
    Ok(Folded { outcome, kept, teardowns, symbols })
}

/// Reads a record file whole, handing each raw record to `record` in order; returns its opening
/// and closing.
fn read(path: &Path, mut record: impl FnMut(Kind, &[u8])) -> Result<(Opening, Closing), ReadError> {
    let damaged = |why: String| ReadError::Damaged(why);
    let mut file = Reader::open(path)?;
    let opening = match file.next()? {
        Some((Kind::Opening, json)) => parse(json, "opening")?,
        Some((kind, _)) => return Err(damaged(format!("its first frame is {kind:?}"))),
        None => return Err(ReadError::Truncated),
    };
    let closing = loop {
        match file.next()? {
            Some((Kind::Closing, json)) => break parse(json, "closing")?,
            Some((Kind::Opening, _)) => return Err(damaged("a second opening".to_owned())),
            Some((kind, bytes)) => record(kind, bytes),
            None => return Err(ReadError::Truncated),
        }
    };
    file.finish()?;
    Ok((opening, closing))
}

fn parse<'a, T: serde::Deserialize<'a>>(json: &'a [u8], frame: &str) -> Result<T, ReadError> {
    serde_json::from_slice(json).map_err(|e| ReadError::Damaged(format!("its {frame}: {e}")))
}
