//! Reading and writing the kernel side's maps: records from the ring buffers, counters, exits
//! still in progress, the processes to follow, and the stop flag.

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, Map, MapData, PerCpuArray, RingBuf},
};
use std::{
    collections::BTreeMap,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd},
};

use exitprof_common::{
    counters, names,
    task::{PidMark, TaskMark},
};
use serde::Serialize;
use tokio::io::unix::AsyncFd;

use crate::base::pidfd::PidFd;

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

/// Defines [`KernelLosses`] from the one list of the kernel side's counters that userspace reads:
/// each field, with its doc, and the index of its counter in `exitprof_common::counters`.
macro_rules! kernel_losses {
    ($($(#[$attr:meta])* $field:ident => $counter:ident,)+) => {
        /// Everything the kernel side could not keep, summed over CPUs, and what it did besides
        /// recording exits (not losses: left out of the document's losses).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct KernelLosses {
            $($(#[$attr])* pub $field: u64,)+
        }

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

            /// Every counter by its name, as a record file keeps them.
            pub fn by_name(&self) -> BTreeMap<String, u64> {
                BTreeMap::from([$((stringify!($field).to_owned(), self.$field)),+])
            }

            /// The counters of [`KernelLosses::by_name`]; those it lacks are 0.
            pub fn from_names(counts: &BTreeMap<String, u64>) -> Self {
                Self { $($field: counts.get(stringify!($field)).copied().unwrap_or(0)),+ }
            }
        }
    };
}

kernel_losses! {
    /// Exit records dropped because the ring buffer was full.
    ringbuf_full => RINGBUF_FULL,
    /// Exits not recorded because both slots they could take were held by other exits.
    state_map_full => STATE_FULL,
    /// Tasks whose following could not be decided (no mark within the generations of ancestors
    /// looked through, or a mark not passed on at an exec): their exits are not recorded.
    follow_unknown => FOLLOW_UNKNOWN,
    /// Deferred-work records dropped because their ring buffer was full.
    deferred_ringbuf_full => DEFERRED_RINGBUF_FULL,
    /// Deferred work in progress that could not be noted (its map was full).
    deferred_state_full => DEFERRED_STATE_FULL,
    /// Exits whose record was dropped because the same task started its exit again before
    /// their end was seen.
    stale_records => STALE_RECORD,
    /// On-CPU samples dropped because their ring buffer was full.
    samples_lost => SAMPLES_LOST,
    /// Kernel stacks of blocks dropped because their ring buffer was full: the exits are
    /// recorded, those blocks' time goes without a stack.
    block_stacks_lost => BLOCK_STACKS_LOST,
    /// Refused exits (`state_map_full`, `follow_unknown`) that could not be remembered as
    /// refused: each may also have been counted again, or recorded, later.
    refusals_forgotten => REFUSALS_FORGOTTEN,
    /// Followed processes whose mark could not be kept for a thread that takes them over by
    /// exec: their exits after the exec may be missing, uncounted.
    marks_not_passed => MARKS_NOT_PASSED,
    /// Cgroups made or removed whose path could not be sent: their exits are grouped under the
    /// cgroup's id, not its name.
    cgroup_names_lost => CGROUP_NAMES_LOST,
    /// Not a loss: followed exits back on a CPU without a `sched_switch` showing it, whose
    /// off-CPU interval therefore closed late (at their next probe point or their final
    /// switch-out).
    #[serde(skip)]
    unseen_returns => UNSEEN_RETURN,
    /// Not a loss: blocks whose kernel stack was walked, and those that would have been walked
    /// but for the budget of walks per second.
    #[serde(skip)]
    stacks_walked => STACKS_WALKED,
    #[serde(skip)]
    stacks_skipped => STACKS_SKIPPED,
    /// Not a loss: on-CPU samples of followed exits sent.
    #[serde(skip)]
    samples => SAMPLES,
    /// Not a loss of this run: exits opened in an earlier run (which counted them unfinished)
    /// that ended in this one.
    #[serde(skip)]
    stray_ends => STRAY_ENDS,
    /// Not a loss: refusals left behind by a task freed unseen, found and forgotten when
    /// another task's exit came to the same address.
    #[serde(skip)]
    stale_refusals => STALE_REFUSALS,
}

impl KernelLosses {
    /// Exits lost, each counted once by the kernel side under one cause.
    pub fn exits(&self) -> u64 {
        self.ringbuf_full + self.state_map_full + self.follow_unknown + self.stale_records
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
/// through a pidfd, which names the process itself whatever PID namespace exitprof runs in. The
/// compat object keeps marks in a hash by pid instead, each with its process's start time.
pub fn track(ebpf: &Ebpf, pids: &[u32], follow: u32) -> anyhow::Result<()> {
    let (tasks, by_pid) = match ebpf.map(names::maps::TASKS) {
        Some(Map::Unsupported(tasks)) => (tasks, false),
        Some(Map::HashMap(tasks)) => (tasks, true),
        _ => anyhow::bail!("the eBPF object has no {} map", names::maps::TASKS),
    };
    for &pid in pids {
        let marked = if by_pid {
            mark_by_pid(tasks.fd().as_fd(), pid, follow)
        } else {
            mark_task_storage(tasks.fd().as_fd(), pid, follow)
        };
        match marked {
            Ok(()) => {}
            // Ended since it was found: it has no exit left to follow.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(e).with_context(|| format!("following pid {pid}")),
        }
    }
    Ok(())
}

/// Marks `pid` in its task storage, through a pidfd.
fn mark_task_storage(map: BorrowedFd<'_>, pid: u32, follow: u32) -> std::io::Result<()> {
    let pidfd = PidFd::open(pid)?;
    update_elem(map, &pidfd.as_fd().as_raw_fd(), &TaskMark { follow })
}

/// Marks `pid` in the compat object's hash, with its start time (`ESRCH` once it is gone).
fn mark_by_pid(map: BorrowedFd<'_>, pid: u32, follow: u32) -> std::io::Result<()> {
    let gone = || std::io::Error::from_raw_os_error(libc::ESRCH);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|_| gone())?;
    // The fields after the name, which is in parentheses and may hold anything; the start
    // time is the 22nd field, the 20th after the name.
    let start_ticks = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|ticks| ticks.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("unreadable /proc/{pid}/stat")))?;
    update_elem(map, &pid, &PidMark::new(follow, start_ticks))
}

/// `bpf(BPF_MAP_UPDATE_ELEM)` of any map (aya has no task-storage map type, and the marks' map
/// is shared between the run's parts).
fn update_elem<K, V>(map: BorrowedFd<'_>, key: &K, value: &V) -> std::io::Result<()> {
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
    let attr = ElemAttr {
        map_fd: map.as_raw_fd().cast_unsigned(),
        _pad: 0,
        key: std::ptr::from_ref(key) as u64,
        value: std::ptr::from_ref(value) as u64,
        flags: 0,
    };
    // SAFETY: `attr` points at a key and a value of the map's sizes, alive for the call.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, &raw const attr, size_of::<ElemAttr>())
    };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// `CONTROL` slots (see the eBPF side's `maps::CONTROL`).
const STOPPED: u32 = 0;
const EPOCH: u32 = 1;

/// The exit records of one run: its number, and the kernel's counts of exits opened and ended
/// when it began.
#[derive(Clone, Copy, Debug)]
pub struct RunStart {
    pub epoch: u32,
    opened: u64,
    ended: u64,
}

/// Begins run number `epoch`: exits that open from now on carry it, and are opened again (the
/// previous run stopped opening them). The kernel counts only the ends of this run's exits, so
/// that an exit stuck since an earlier run is never in this one's figures.
pub fn begin_run(ebpf: &mut Ebpf, epoch: u32) -> anyhow::Result<RunStart> {
    set_control(ebpf, EPOCH, epoch).context("numbering the run for the kernel side")?;
    let counters = Counters::new(ebpf)?;
    let start = RunStart {
        epoch,
        opened: counters.sum(counters::EXITS_OPENED)?,
        ended: counters.sum(counters::EXITS_ENDED)?,
    };
    set_stopped(ebpf, false)?;
    Ok(start)
}

/// The run's exits the kernel side has opened and not yet ended (sent or dropped): exits in
/// progress. The kernel counts an end after its record is in the ring buffer, so a read of the
/// ring buffer after this count finds every record it no longer includes.
pub fn in_progress(ebpf: &Ebpf, run: &RunStart) -> anyhow::Result<u64> {
    let counters = Counters::new(ebpf)?;
    let opened = counters.sum(counters::EXITS_OPENED)? - run.opened;
    let ended = counters.sum(counters::EXITS_ENDED)? - run.ended;
    Ok(opened.saturating_sub(ended))
}

/// Stops opening exit records (the target ended: exits that start from now on are not part of
/// the run), or opens them again.
pub fn set_stopped(ebpf: &mut Ebpf, stopped: bool) -> anyhow::Result<()> {
    set_control(ebpf, STOPPED, u32::from(stopped)).context("setting the kernel side's stop flag")
}

fn set_control(ebpf: &mut Ebpf, slot: u32, value: u32) -> anyhow::Result<()> {
    let map = ebpf
        .map_mut(names::maps::CONTROL)
        .with_context(|| format!("the eBPF object has no {} map", names::maps::CONTROL))?;
    let mut control: Array<_, u32> = Array::try_from(map)?;
    control.set(slot, value, 0)?;
    Ok(())
}
