//! Reading and writing the kernel side's maps: records from the ring buffers, counters, exits
//! still in progress, the processes to follow, and the stop flag.

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, Map, MapData, PerCpuArray, RingBuf},
};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};

use exitprof_common::{counters, names, task::TaskMark};
use serde::Serialize;
use tokio::io::unix::AsyncFd;

use crate::target::pidfd::PidFd;

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

/// Everything the kernel side could not keep, summed over CPUs, and what it did besides
/// recording exits (not losses: left out of the document's losses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelLosses {
    /// Exit records dropped because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Exits not recorded because both slots they could take were held by other exits.
    pub state_map_full: u64,
    /// Tasks whose following could not be decided (no mark within the generations of ancestors
    /// looked through, or a mark not passed on at an exec): their exits are not recorded.
    pub follow_unknown: u64,
    /// Deferred-work records dropped because their ring buffer was full.
    pub deferred_ringbuf_full: u64,
    /// Deferred work in progress that could not be noted (its map was full).
    pub deferred_state_full: u64,
    /// Exits whose record was dropped because the same task started its exit again before
    /// their end was seen.
    pub stale_records: u64,
    /// On-CPU samples dropped because their ring buffer was full.
    pub samples_lost: u64,
    /// Not a loss: followed exits back on a CPU without a `sched_switch` showing it, whose
    /// off-CPU interval therefore closed late (at their next probe point or their final
    /// switch-out).
    #[serde(skip)]
    pub unseen_returns: u64,
    /// Not a loss: blocks whose kernel stack was walked, and those that would have been walked
    /// but for the budget of walks per second.
    #[serde(skip)]
    pub stacks_walked: u64,
    #[serde(skip)]
    pub stacks_skipped: u64,
    /// Not a loss: on-CPU samples of followed exits sent.
    #[serde(skip)]
    pub samples: u64,
}

/// Every counter of [`KernelLosses`] with its index in the kernel side's counters.
macro_rules! kernel_counters {
    ($callback:ident) => {
        $callback! {
            ringbuf_full => RINGBUF_FULL,
            state_map_full => STATE_FULL,
            follow_unknown => FOLLOW_UNKNOWN,
            deferred_ringbuf_full => DEFERRED_RINGBUF_FULL,
            deferred_state_full => DEFERRED_STATE_FULL,
            stale_records => STALE_RECORD,
            samples_lost => SAMPLES_LOST,
            unseen_returns => UNSEEN_RETURN,
            stacks_walked => STACKS_WALKED,
            stacks_skipped => STACKS_SKIPPED,
            samples => SAMPLES,
        }
    };
}

macro_rules! impl_kernel_losses {
    ($($field:ident => $counter:ident),+ $(,)?) => {
        impl KernelLosses {
            /// What was counted since `earlier` (the counters only grow).
            pub fn since(&self, earlier: &Self) -> Self {
                Self { $($field: self.$field - earlier.$field),+ }
            }

            /// Both counts together.
            pub fn plus(&self, other: &Self) -> Self {
                Self { $($field: self.$field + other.$field),+ }
            }

            pub fn read(ebpf: &Ebpf) -> anyhow::Result<Self> {
                let counters = Counters::new(ebpf)?;
                Ok(Self { $($field: counters.sum(counters::$counter)?),+ })
            }
        }
    };
}

kernel_counters!(impl_kernel_losses);

impl KernelLosses {
    /// Exits lost.
    pub fn exits(&self) -> u64 {
        self.ringbuf_full + self.state_map_full + self.stale_records
    }
}

/// The kernel side's per-CPU counters.
struct Counters<'a>(PerCpuArray<&'a MapData, u64>);

impl<'a> Counters<'a> {
    fn new(ebpf: &'a Ebpf) -> anyhow::Result<Self> {
        let map = ebpf
            .map(names::maps::COUNTERS)
            .with_context(|| format!("the eBPF object has no {} map", names::maps::COUNTERS))?;
        Ok(Self(PerCpuArray::try_from(map)?))
    }

    /// One counter, summed over CPUs.
    fn sum(&self, counter: u32) -> anyhow::Result<u64> {
        Ok(self
            .0
            .get(&counter, 0)
            .with_context(|| format!("reading counter {counter}"))?
            .iter()
            .sum())
    }
}

/// Follows these processes (pids as exitprof sees them), their threads and their descendants:
/// `follow` is an `exitprof_common::task` value, written to each one's task-local storage
/// through a pidfd, which names the process itself whatever PID namespace exitprof runs in.
pub fn track(ebpf: &Ebpf, pids: &[u32], follow: u32) -> anyhow::Result<()> {
    let Some(Map::Unsupported(tasks)) = ebpf.map(names::maps::TASKS) else {
        anyhow::bail!("the eBPF object has no {} task-storage map", names::maps::TASKS);
    };
    let mark = TaskMark { follow };
    for &pid in pids {
        let pidfd = match PidFd::open(pid) {
            Ok(pidfd) => pidfd,
            // Ended since it was found: it has no exit left to follow.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
            Err(e) => return Err(e).with_context(|| format!("opening a pidfd for pid {pid}")),
        };
        update_task_storage(tasks.fd().as_fd(), pidfd.as_fd(), &mark)
            .with_context(|| format!("following pid {pid}"))?;
    }
    Ok(())
}

/// `bpf(BPF_MAP_UPDATE_ELEM)` of a task-storage map, whose key is a pidfd (aya has no
/// task-storage map type).
fn update_task_storage(
    map: BorrowedFd<'_>,
    pidfd: BorrowedFd<'_>,
    value: &TaskMark,
) -> std::io::Result<()> {
    /// The `BPF_MAP_*_ELEM` part of `union bpf_attr` (include/uapi/linux/bpf.h).
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    let key: i32 = pidfd.as_raw_fd();
    let attr = ElemAttr {
        map_fd: map.as_raw_fd().cast_unsigned(),
        _pad: 0,
        key: (&raw const key) as u64,
        value: std::ptr::from_ref(value) as u64,
        flags: 0,
    };
    // SAFETY: `attr` points at a key and a value of the map's sizes, alive for the call.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, &raw const attr, size_of::<ElemAttr>())
    };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Exit records the kernel side has opened and not yet ended (sent or dropped): exits in
/// progress. The kernel counts an end after its record is in the ring buffer, so a read of the
/// ring buffer after this count finds every record it no longer includes.
pub fn in_progress(ebpf: &Ebpf) -> anyhow::Result<u64> {
    let counters = Counters::new(ebpf)?;
    Ok(counters.sum(counters::EXITS_OPENED)?.saturating_sub(counters.sum(counters::EXITS_ENDED)?))
}

/// Stops opening exit records (the target ended: exits that start from now on are not part of
/// the run), or opens them again (a new target starts).
pub fn set_stopped(ebpf: &mut Ebpf, stopped: bool) -> anyhow::Result<()> {
    let map = ebpf
        .map_mut(names::maps::CONTROL)
        .with_context(|| format!("the eBPF object has no {} map", names::maps::CONTROL))?;
    let mut control: Array<_, u32> = Array::try_from(map)?;
    control.set(0, u32::from(stopped), 0).context("setting the kernel side's stop flag")?;
    Ok(())
}
