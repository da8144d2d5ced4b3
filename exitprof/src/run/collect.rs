//! Collecting a target's records: read as they come until the target ends, then until its last
//! exits have ended and their deferred work has run.

use std::time::{Duration, Instant};

use super::start::{Attached, Started, Stop};
use crate::{
    analysis::session::Session,
    probes::maps::{self, RecordStream, monotonic_ns},
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
    // A session can collect several targets in turn (compare): each is collected in full.
    session.stop_ns = u64::MAX;
    let (mut probes, mut exits, mut deferred, symbols) = match attached {
        Some(a) => (Some(&a.probes), Some(&mut a.exits), Some(&mut a.deferred), Some(&a.symbols)),
        None => (None, None, None, None),
    };
    let mut ticker = tokio::time::interval(progress::INTERVAL);
    // Records do not wake exitprof one by one (that would put it on a CPU for every exit of the
    // storm it measures): they are read on this beat, or when a ring buffer fills up.
    let mut reads = tokio::time::interval(READ_INTERVAL);
    reads.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut interrupted = None;
    let stop = loop {
        tokio::select! {
            _ = reads.tick() => {
                drain(exits.as_deref_mut(), |b| session.exit_record(b));
                drain(deferred.as_deref_mut(), |b| session.deferred_record(b));
            }
            ready = ready(exits.as_deref_mut()) => {
                ready?;
                drain(exits.as_deref_mut(), |b| session.exit_record(b));
            }
            ready = ready(deferred.as_deref_mut()) => {
                ready?;
                drain(deferred.as_deref_mut(), |b| session.deferred_record(b));
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
    // Exits that start from now on are outside the run.
    let stop_ns = monotonic_ns();
    session.stop_ns = stop_ns;
    let Some(probes) = probes.take() else {
        return Ok(Collected { stop, interrupted, elapsed, unfinished: 0 });
    };

    // The target has ended, but its last tasks may not have switched out for good yet, and
    // deferred work (RCU callbacks, the free_ipc kworker) runs later still.
    let exclusion = session.exclusion.clone();
    let keep = |tgid| !exclusion.excludes(tgid);
    let settle_start = Instant::now();
    loop {
        drain(exits.as_deref_mut(), |b| session.exit_record(b));
        drain(deferred.as_deref_mut(), |b| session.deferred_record(b));
        let settled = maps::in_progress(&probes.ebpf, stop_ns, keep)? == 0
            && session.deferred.awaiting_task_free() == 0
            && !session.deferred.awaiting_ipc_run();
        if settled || settle_start.elapsed() >= SETTLE_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let unfinished = maps::in_progress(&probes.ebpf, stop_ns, keep)? as u64;
    // Stack ids belong to this loaded object: name the stacks while it is loaded.
    if let Some(symbols) = symbols {
        session.blocking.name_stacks(|id| maps::stack_frames(&probes.ebpf, symbols, id));
    }
    Ok(Collected { stop, interrupted, elapsed, unfinished })
}

/// Waits for records on a stream; forever when there is none.
async fn ready(stream: Option<&mut RecordStream>) -> anyhow::Result<()> {
    match stream {
        Some(stream) => stream.ready().await,
        None => std::future::pending().await,
    }
}

fn drain(stream: Option<&mut RecordStream>, f: impl FnMut(&[u8])) {
    if let Some(stream) = stream {
        stream.drain(f);
    }
}
