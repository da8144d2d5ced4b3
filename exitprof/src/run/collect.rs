//! Collecting a target's records: read as they come until the target ends, then until its last
//! exits have ended and their deferred work has run.

use std::time::{Duration, Instant};

use super::start::{Attached, Started, Stop};
use crate::{
    analysis::session::Session,
    probes::{
        load::Probes,
        maps::{self, RecordStream},
    },
    report::progress::{self, Progress},
    target::signals::{Signals, signal_name},
};

/// How often records are read from the ring buffers, unless one fills up first.
const READ_INTERVAL: Duration = Duration::from_millis(20);

/// How long to wait, after the target ended, for its last exits to reach their final switch.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

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
pub async fn collect_until(
    started: Started,
    attached: Option<&mut Attached>,
    session: &mut Session,
    signals: &mut Signals,
    progress: &mut Progress,
) -> anyhow::Result<Collected> {
    let Started { mut stop, killer } = started;
    let begin = Instant::now();
    let (mut probes, mut streams) = match attached {
        Some(a) => {
            let (probes, streams) = a.split();
            (Some(probes), streams)
        }
        None => (None, Streams::default()),
    };
    if let Some(probes) = probes.as_deref_mut() {
        maps::set_stopped(&mut probes.ebpf, false)?;
    }
    let mut ticker = tokio::time::interval(progress::INTERVAL);
    // Records do not wake exitprof one by one (that would put it on a CPU for every exit of the
    // storm it measures): they are read on this beat, or when a ring buffer fills up.
    let mut reads = tokio::time::interval(READ_INTERVAL);
    reads.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut interrupted = None;
    let stop = loop {
        tokio::select! {
            _ = reads.tick() => streams.drain(session),
            ready = streams.ready() => {
                ready?;
                streams.drain(session);
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
    progress.finish();
    let elapsed = begin.elapsed();
    let Some(probes) = probes.take() else {
        return Ok(Collected { stop, interrupted, elapsed, unfinished: 0 });
    };

    // The target has ended, but its last tasks may not have switched out for good yet, and
    // deferred work (RCU callbacks, the free_ipc kworker) runs later still. The kernel side
    // opens no exit from now on, so the exits in progress only end.
    maps::set_stopped(&mut probes.ebpf, true)?;
    let settle_start = Instant::now();
    let unfinished = loop {
        // Counted before the ring buffers are read: an exit that ends after the count is in
        // progress still; one that ended before it is in the ring buffer and read now. (Read
        // the other way round, a record sent in between was never read, and never counted.)
        let in_progress = maps::in_progress(&probes.ebpf)?;
        streams.drain(session);
        let settled = in_progress == 0
            && session.deferred.awaiting_task_free() == 0
            && !session.deferred.awaiting_ipc_run();
        if settled || settle_start.elapsed() >= SETTLE_TIMEOUT {
            break in_progress;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    Ok(Collected { stop, interrupted, elapsed, unfinished })
}

/// What records are read into: a run's [`Session`], or what `serve` keeps.
pub trait RecordSink {
    fn exit_record(&mut self, bytes: &[u8]);
    fn deferred_record(&mut self, bytes: &[u8]);
    fn sample_record(&mut self, bytes: &[u8]);
}

impl RecordSink for Session {
    fn exit_record(&mut self, bytes: &[u8]) {
        Session::exit_record(self, bytes);
    }

    fn deferred_record(&mut self, bytes: &[u8]) {
        Session::deferred_record(self, bytes);
    }

    fn sample_record(&mut self, bytes: &[u8]) {
        Session::sample_record(self, bytes);
    }
}

/// The ring buffers a run reads (none without probes).
#[derive(Default)]
pub struct Streams<'a> {
    exits: Option<&'a mut RecordStream>,
    deferred: Option<&'a mut RecordStream>,
    samples: Option<&'a mut RecordStream>,
}

impl Attached {
    /// The loaded programs, and the ring buffers they fill.
    pub fn split(&mut self) -> (&mut Probes, Streams<'_>) {
        let streams = Streams {
            exits: Some(&mut self.exits),
            deferred: Some(&mut self.deferred),
            samples: Some(&mut self.samples),
        };
        (&mut self.probes, streams)
    }
}

impl Streams<'_> {
    /// Reads every record available now, exits first (a sample joins its exit's record).
    pub fn drain(&mut self, sink: &mut impl RecordSink) {
        if let Some(exits) = self.exits.as_deref_mut() {
            exits.drain(|b| sink.exit_record(b));
        }
        if let Some(deferred) = self.deferred.as_deref_mut() {
            deferred.drain(|b| sink.deferred_record(b));
        }
        if let Some(samples) = self.samples.as_deref_mut() {
            samples.drain(|b| sink.sample_record(b));
        }
    }

    /// Waits until a ring buffer has records to read (forever without ring buffers).
    pub async fn ready(&mut self) -> anyhow::Result<()> {
        tokio::select! {
            ready = ready(self.exits.as_deref_mut()) => ready,
            ready = ready(self.deferred.as_deref_mut()) => ready,
            ready = ready(self.samples.as_deref_mut()) => ready,
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
