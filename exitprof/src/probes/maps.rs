//! The eBPF object's maps as userspace uses them: the ring buffers of records, readable from
//! tokio; the loss counters; the kernel stacks where exits blocked; the processes to follow; the
//! exits still in progress.

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray, RingBuf, StackTraceMap},
};
use exitprof_common::{counters, names, record::ExitRecord};
use serde::Serialize;
use tokio::io::unix::AsyncFd;

use crate::kernel::kallsyms::Kallsyms;

/// A ring buffer of records from the kernel side, readable from tokio.
pub struct RecordStream {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl RecordStream {
    /// Takes the ring buffer map `name` out of the object.
    pub fn take(ebpf: &mut Ebpf, name: &str) -> anyhow::Result<Self> {
        let map =
            ebpf.take_map(name).with_context(|| format!("the eBPF object has no map {name}"))?;
        let ring =
            RingBuf::try_from(map).with_context(|| format!("{name} is not a ring buffer"))?;
        // SAFETY: the ring buffer owns its descriptor, and the AsyncFd owns the ring buffer, so
        // the descriptor outlives its registration.
        let ring = unsafe { AsyncFd::register(ring) }
            .map_err(|e| e.into_parts().1)
            .with_context(|| format!("polling the {name} ring buffer"))?;
        Ok(Self { ring })
    }

    /// Waits until records may be available; [`RecordStream::drain`] then takes them.
    pub async fn ready(&mut self) -> anyhow::Result<()> {
        let mut guard = self.ring.readable_mut().await.context("waiting on a ring buffer")?;
        // Cleared before draining: a record committed after this wakes the next wait.
        guard.clear_ready();
        Ok(())
    }

    /// Hands every record available now to `f`, without waiting. Returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let ring = self.ring.get_mut();
        let mut n = 0;
        while let Some(item) = ring.next() {
            f(&item);
            n += 1;
        }
        n
    }
}

/// Everything the kernel side could not keep, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelLosses {
    /// Exit records dropped because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Exits not followed because the per-task state map was full.
    pub state_map_full: u64,
    /// Forked processes not followed because the tracking map was full.
    pub tracked_map_full: u64,
    /// Deferred-work records dropped because their ring buffer was full.
    pub deferred_ringbuf_full: u64,
    /// Exits whose record was dropped because a new exit with the same thread id started
    /// before their end was seen.
    pub stale_records: u64,
    /// Not a loss, so not among them in the document: followed exits back on a CPU without a
    /// `sched_switch` showing it, whose off-CPU interval therefore closed late (at their next
    /// probe point or their final switch-out).
    #[serde(skip)]
    pub unseen_returns: u64,
}

impl KernelLosses {
    /// What was lost since `earlier` (the counters only grow).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            ringbuf_full: self.ringbuf_full - earlier.ringbuf_full,
            state_map_full: self.state_map_full - earlier.state_map_full,
            tracked_map_full: self.tracked_map_full - earlier.tracked_map_full,
            deferred_ringbuf_full: self.deferred_ringbuf_full - earlier.deferred_ringbuf_full,
            stale_records: self.stale_records - earlier.stale_records,
            unseen_returns: self.unseen_returns - earlier.unseen_returns,
        }
    }

    /// Both counts together.
    pub fn plus(&self, other: &Self) -> Self {
        Self {
            ringbuf_full: self.ringbuf_full + other.ringbuf_full,
            state_map_full: self.state_map_full + other.state_map_full,
            tracked_map_full: self.tracked_map_full + other.tracked_map_full,
            deferred_ringbuf_full: self.deferred_ringbuf_full + other.deferred_ringbuf_full,
            stale_records: self.stale_records + other.stale_records,
            unseen_returns: self.unseen_returns + other.unseen_returns,
        }
    }

    pub fn read(ebpf: &Ebpf) -> anyhow::Result<Self> {
        let map: PerCpuArray<_, u64> = PerCpuArray::try_from(
            ebpf.map(names::maps::LOSSES)
                .with_context(|| format!("the eBPF object has no {} map", names::maps::LOSSES))?,
        )?;
        let sum = |i: u32| -> anyhow::Result<u64> {
            Ok(map.get(&i, 0).with_context(|| format!("reading loss counter {i}"))?.iter().sum())
        };
        Ok(Self {
            ringbuf_full: sum(counters::RINGBUF_FULL)?,
            state_map_full: sum(counters::STATE_FULL)?,
            tracked_map_full: sum(counters::TRACKED_FULL)?,
            deferred_ringbuf_full: sum(counters::DEFERRED_RINGBUF_FULL)?,
            stale_records: sum(counters::STALE_RECORD)?,
            unseen_returns: sum(counters::UNSEEN_RETURN)?,
        })
    }

    /// Exits lost.
    pub fn exits(&self) -> u64 {
        self.ringbuf_full + self.state_map_full + self.stale_records
    }
}

/// The function names of a kernel stack the programs took, innermost first (`?` for an address
/// kallsyms does not name; nothing when the stack is gone).
pub fn stack_frames(ebpf: &Ebpf, symbols: &Kallsyms, id: u32) -> Vec<String> {
    let Some(map) = ebpf.map(names::maps::BLOCK_STACKS) else { return Vec::new() };
    let Ok(stacks) = StackTraceMap::try_from(map) else { return Vec::new() };
    let Ok(stack) = stacks.get(&id, 0) else { return Vec::new() };
    stack.frames().iter().map(|f| symbols.name_of(f.ip).unwrap_or("?").to_owned()).collect()
}

/// Records the exits of these thread groups, and of the processes they fork from now on;
/// `role` is an `exitprof_common::tracked` value (a driver's own exit is left out).
pub fn track(ebpf: &mut Ebpf, tgids: &[u32], role: u8) -> anyhow::Result<()> {
    let mut tracked: HashMap<_, u32, u8> = HashMap::try_from(
        ebpf.map_mut(names::maps::TRACKED)
            .with_context(|| format!("the eBPF object has no {} map", names::maps::TRACKED))?,
    )?;
    for &tgid in tgids {
        tracked.insert(tgid, role, 0).with_context(|| format!("tracking pid {tgid}"))?;
    }
    Ok(())
}

/// Exits in progress that started at or before `until_ns` (CLOCK_MONOTONIC), of thread groups
/// `keep` accepts.
pub fn in_progress(
    ebpf: &Ebpf,
    until_ns: u64,
    keep: impl Fn(u32) -> bool,
) -> anyhow::Result<usize> {
    let exiting: HashMap<_, u32, ExitRecord> = HashMap::try_from(
        ebpf.map(names::maps::EXITING)
            .with_context(|| format!("the eBPF object has no {} map", names::maps::EXITING))?,
    )?;
    let mut n = 0;
    for entry in &exiting {
        let (_, record) = entry.context("reading exits in progress")?;
        if record.n_hits > 0 && record.hits[0].ts_ns <= until_ns && keep(record.tgid) {
            n += 1;
        }
    }
    Ok(n)
}

/// CLOCK_MONOTONIC now, in ns: the clock of the kernel side's timestamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill in; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
