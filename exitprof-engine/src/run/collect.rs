//! Collecting a target's records: read as they come until the target ends, then until its last
//! exits have ended and their deferred work has run.

use std::time::{Duration, Instant, SystemTime};

use exitprof_core::analysis::{
    exit_teardown::ExitTeardown,
    exit_timeline::{Context, ExitTimeline},
    records::cgroup_of,
    session::Session,
};
use exitprof_core::run::record::{Kind, Recorder};

use super::{
    cgroupfs::CgroupTree,
    start::{Attached, Started, Stop},
};
use crate::{
    base::signals::{Signals, signal_name},
    kernel::kallsyms::Kallsyms,
    probes::{
        load::Probes,
        maps::{self, RecordStream, RunStart},
    },
};

/// How often records are read from the ring buffers, unless one fills up first.
const READ_INTERVAL: Duration = Duration::from_millis(20);

/// How long to wait, after the target ended, for its last exits to reach their final switch.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a run waits beyond that for the namespace teardowns its exits set off: a
/// `cleanup_net` run of a thousand devices takes half a second on a host, tens of seconds
/// emulated, and the batch behind it waits for it.
const TEARDOWN_SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How often the progress is updated.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// What a run shows while it collects: the presentation layer's progress line, or nothing.
pub trait Progress {
    /// Starts showing, once the probes are attached; `expected`: the exits to come, if known.
    fn start(&mut self, expected: Option<u64>);
    /// Whether anything is shown: nothing to update otherwise.
    fn is_shown(&self) -> bool;
    /// Shows `exits` so far.
    fn update(&mut self, exits: u64);
    /// Removes what is shown, before a message or the report.
    fn finish(&self);
    /// Shows an exit kept whole (over `--slower-than`) as it ends.
    fn exit(&mut self, exit: &ExitTimeline);
    /// Shows a namespace teardown joined to an exit, later: the exit's, if `exit_shown`, or one
    /// over `--slower-than` itself.
    fn teardown(&mut self, teardown: &ExitTeardown, exit_shown: bool);
}

/// Nothing shown: the storms of a comparison.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _: Option<u64>) {}

    fn is_shown(&self) -> bool {
        false
    }

    fn update(&mut self, _: u64) {}

    fn finish(&self) {}

    fn exit(&mut self, _: &ExitTimeline) {}

    fn teardown(&mut self, _: &ExitTeardown, _: bool) {}
}

/// What collecting a target's records found.
pub struct Collected {
    pub stop: Stop,
    /// The signal that stopped exitprof's children, if one did.
    pub interrupted: Option<i32>,
    /// From the start of collecting to the end of the target.
    pub elapsed: Duration,
    /// Exits of the target still in progress when collecting stopped.
    pub unfinished: u64,
}

/// Collects records until the target ends (or a signal stops exitprof's children), then until
/// its last exits reach their final switch-out and the deferred work they caused has run.
/// Without probes attached it only waits for the target.
/// `attached` comes with the run it began ([`Attached::begin_run`]) before the target started.
/// A `recorder` keeps each record as it is read.
pub async fn collect_until(
    started: Started,
    attached: Option<(&mut Attached, RunStart)>,
    session: &mut Session,
    mut recorder: Option<&mut Recorder>,
    signals: &mut Signals,
    progress: &mut dyn Progress,
) -> anyhow::Result<Collected> {
    let Started { mut stop, killer } = started;
    let begin = Instant::now();
    let mut kept = KeptShown::new(attached.as_ref().map(|(a, _)| a.symbols.clone()));
    let (mut probes, mut streams, run) = match attached {
        Some((a, run)) => {
            let (probes, streams) = a.split();
            (Some(probes), streams, Some(run))
        }
        None => (None, Streams::default(), None),
    };
    let mut ticker = tokio::time::interval(PROGRESS_INTERVAL);
    // Records do not wake exitprof one by one (that would put it on a CPU for every exit of the
    // storm it measures): they are read on this beat, or when a ring buffer fills up.
    let mut reads = tokio::time::interval(READ_INTERVAL);
    reads.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut interrupted = None;
    let stop = loop {
        tokio::select! {
            _ = reads.tick() => {
                streams.drain(&mut Reading::new(session, &mut recorder));
                kept.pass(session, progress, false);
            }
            ready = streams.ready() => {
                ready?;
                streams.drain(&mut Reading::new(session, &mut recorder));
                kept.pass(session, progress, false);
            }
            stopped = &mut stop => break stopped?,
            signal = signals.next(), if interrupted.is_none() => {
                let Some(killer) = &killer else { break Stop::Signal };
                progress.finish();
                eprintln!("exitprof: {}: stopping the workload; partial results follow", signal_name(signal));
                interrupted = Some(signal);
                killer.kill();
            }
            _ = ticker.tick(), if progress.is_shown() => progress.update(session.profile.exits),
        }
    };
    let elapsed = begin.elapsed();
    let (Some(probes), Some(run)) = (probes.take(), run) else {
        progress.finish();
        return Ok(Collected { stop, interrupted, elapsed, unfinished: 0 });
    };

    // The target has ended, but its last tasks may not have switched out for good yet, and
    // deferred work (RCU callbacks, the free_ipc kworker, namespace teardowns) runs later
    // still. The kernel side opens no exit from now on, so the exits in progress only end.
    maps::set_stopped(&mut probes.ebpf, true)?;
    let settle_start = Instant::now();
    let mut told = false;
    let unfinished = loop {
        // Counted before the ring buffers are read: an exit that ends after the count is in
        // progress still; one that ended before it is in the ring buffer and read now. (Read
        // the other way round, a record sent in between was never read, and never counted.)
        let in_progress = maps::in_progress(&probes.ebpf, &run)?;
        streams.drain(&mut Reading::new(session, &mut recorder));
        kept.pass(session, progress, false);
        let settled = in_progress == 0
            && session.deferred.awaiting_task_free() == 0
            && session.teardowns.awaiting_frees() == 0
            && !session.deferred.awaiting_ipc_run();
        let teardowns = session.teardowns.awaiting_teardowns();
        let tearing_down = teardowns > 0 || session.teardowns.awaiting_run();
        let waited = settle_start.elapsed();
        if (settled || waited >= SETTLE_TIMEOUT)
            && (!tearing_down || waited >= TEARDOWN_SETTLE_TIMEOUT)
        {
            break in_progress;
        }
        if settled && !told && waited >= SETTLE_TIMEOUT {
            told = true;
            eprintln!(
                "exitprof: waiting up to {} s for the teardowns of {teardowns} namespaces the \
                 exits left (Ctrl-C stops waiting)",
                TEARDOWN_SETTLE_TIMEOUT.as_secs()
            );
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
            signal = signals.next() => {
                eprintln!(
                    "exitprof: {}: not waiting for deferred work; partial results follow",
                    signal_name(signal)
                );
                break in_progress;
            }
        }
    };
    kept.pass(session, progress, true);
    progress.finish();
    Ok(Collected { stop, interrupted, elapsed, unfinished })
}

/// Shows the exits the session keeps whole as they end, named with the running kernel's
/// symbols and the live cgroup tree.
struct KeptShown {
    symbols: Option<std::sync::Arc<Kallsyms>>,
    /// The cgroup tree, looked for at the first exit shown (`None` where there is no v2
    /// hierarchy).
    cgroups: Option<CgroupTree>,
    cgroups_looked_for: bool,
    /// The wall clock at the kernel's monotonic 0, in seconds since the Unix epoch.
    wall_at_zero: Option<f64>,
}

impl KeptShown {
    fn new(symbols: Option<std::sync::Arc<Kallsyms>>) -> Self {
        let wall = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).ok();
        let wall_at_zero = wall.map(|w| w.as_secs_f64() - monotonic_now().as_secs_f64());
        Self { symbols, cgroups: None, cgroups_looked_for: false, wall_at_zero }
    }

    /// A reading pass is over: shows the kept exits ready (all of them when `last`).
    fn pass(&mut self, session: &mut Session, progress: &mut dyn Progress, last: bool) {
        let (Some(kept), Some(symbols)) = (session.kept.as_mut(), self.symbols.as_deref()) else {
            return;
        };
        let joined = &session.teardowns.joined;
        let ready = if last { kept.finish(joined) } else { kept.pass(joined) };
        if ready.exits.is_empty() && ready.teardowns.is_empty() {
            return;
        }
        if !std::mem::replace(&mut self.cgroups_looked_for, true) {
            self.cgroups = CgroupTree::mounted().ok();
        }
        let tree = &mut self.cgroups;
        let mut cgroup = |id: u64| tree.as_mut()?.path(id).map(str::to_owned);
        let mut context = Context {
            profile: &session.profile,
            symbols,
            cgroup: &mut cgroup,
            wall_at_zero: self.wall_at_zero,
        };
        for exit in &ready.exits {
            progress.exit(&ExitTimeline::of(exit, &mut context));
        }
        for (joined, exit_shown) in &ready.teardowns {
            let teardown = ExitTeardown::of(joined, &session.teardowns, symbols, self.wall_at_zero);
            progress.teardown(&teardown, *exit_shown);
        }
    }
}

/// The kernel's monotonic clock now (what `bpf_ktime_get_ns` reads).
fn monotonic_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What records are read into: a run's [`Session`] (and its record file), or what `serve`
/// keeps.
pub trait RecordSink {
    fn exit_record(&mut self, bytes: &[u8]);
    fn deferred_record(&mut self, bytes: &[u8]);
    fn stack_record(&mut self, bytes: &[u8]);
    /// A cgroup made or removed (or found in the cgroup tree, for an exit in a cgroup no record
    /// named).
    fn cgroup_record(&mut self, bytes: &[u8]);
    /// Whether the path of cgroup `id` is known.
    fn knows_cgroup(&self, id: u64) -> bool;
}

/// A run's session, and the record file that keeps each record, if one is written.
struct Reading<'a> {
    session: &'a mut Session,
    recorder: Option<&'a mut Recorder>,
}

impl<'a> Reading<'a> {
    fn new(session: &'a mut Session, recorder: &'a mut Option<&mut Recorder>) -> Self {
        Self { session, recorder: recorder.as_deref_mut() }
    }

    fn keep(&mut self, kind: Kind, bytes: &[u8]) {
        if let Some(recorder) = self.recorder.as_deref_mut() {
            recorder.keep(kind, bytes);
        }
    }
}

impl RecordSink for Reading<'_> {
    fn exit_record(&mut self, bytes: &[u8]) {
        self.keep(Kind::Exit, bytes);
        self.session.exit_record(bytes);
    }

    fn deferred_record(&mut self, bytes: &[u8]) {
        self.keep(Kind::Deferred, bytes);
        self.session.deferred_record(bytes);
    }

    fn stack_record(&mut self, bytes: &[u8]) {
        self.keep(Kind::Stack, bytes);
        self.session.stack_record(bytes);
    }

    fn cgroup_record(&mut self, bytes: &[u8]) {
        self.keep(Kind::Cgroup, bytes);
        self.session.cgroup_record(bytes);
    }

    fn knows_cgroup(&self, id: u64) -> bool {
        self.session.groups.as_ref().is_none_or(|g| g.cgroup_paths.knows(id))
    }
}

/// The ring buffers a run reads (none without probes).
#[derive(Default)]
pub struct Streams<'a> {
    exits: Option<&'a mut RecordStream>,
    deferred: Option<&'a mut RecordStream>,
    stacks: Option<&'a mut RecordStream>,
    cgroups: Option<&'a mut RecordStream>,
    /// Where exits are grouped by cgroup: the tree, for the cgroups no record named.
    cgroup_tree: Option<&'a mut CgroupTree>,
}

impl Attached {
    /// The loaded programs, and the ring buffers they fill.
    pub fn split(&mut self) -> (&mut Probes, Streams<'_>) {
        let streams = Streams {
            exits: Some(&mut self.exits),
            deferred: Some(&mut self.deferred),
            stacks: Some(&mut self.stacks),
            cgroups: Some(&mut self.cgroups),
            cgroup_tree: self.cgroup_tree.as_mut(),
        };
        (&mut self.probes, streams)
    }
}

impl Streams<'_> {
    /// Reads every record available now: cgroups first (an exit is named after its cgroup's
    /// path), and again before an exit whose cgroup is not known yet; then exits (a stack joins
    /// its exit's record).
    pub fn drain(&mut self, sink: &mut impl RecordSink) {
        if let Some(cgroups) = self.cgroups.as_deref_mut() {
            cgroups.drain(|b| sink.cgroup_record(b));
        }
        if let Some(exits) = self.exits.as_deref_mut() {
            let mut tree = self.cgroup_tree.as_deref_mut();
            let mut cgroups = self.cgroups.as_deref_mut();
            exits.drain(|b| {
                if let Some(tree) = tree.as_deref_mut() {
                    // A cgroup made since its ring buffer was read (and maybe removed already,
                    // out of the tree): its record is there now.
                    if cgroup_of(b).is_some_and(|id| !sink.knows_cgroup(id))
                        && let Some(cgroups) = cgroups.as_deref_mut()
                    {
                        cgroups.drain(|c| sink.cgroup_record(c));
                    }
                    if let Some(found) = tree.record_of_unknown(b, |id| sink.knows_cgroup(id)) {
                        sink.cgroup_record(&found);
                    }
                }
                sink.exit_record(b);
            });
        }
        if let Some(deferred) = self.deferred.as_deref_mut() {
            deferred.drain(|b| sink.deferred_record(b));
        }
        if let Some(stacks) = self.stacks.as_deref_mut() {
            stacks.drain(|b| sink.stack_record(b));
        }
    }

    /// Waits until a ring buffer has records to read (forever without ring buffers).
    pub async fn ready(&mut self) -> anyhow::Result<()> {
        tokio::select! {
            ready = ready(self.exits.as_deref_mut()) => ready,
            ready = ready(self.deferred.as_deref_mut()) => ready,
            ready = ready(self.stacks.as_deref_mut()) => ready,
        }
    }
}

/// Waits for records on a stream; forever when there is none.
async fn ready(stream: Option<&mut RecordStream>) -> anyhow::Result<()> {
    match stream {
        Some(stream) => stream.ready().await,
        None => std::future::pending().await,
    }
}
