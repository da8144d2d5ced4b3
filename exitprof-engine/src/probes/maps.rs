//! Reading and writing the kernel side's maps: records from the ring buffers, counters, exits
//! still in progress, the processes to follow, and the stop flag.

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, Map, MapData, PerCpuArray, RingBuf},
};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};

use exitprof_common::{
    counters, names,
    task::{PidMark, TaskMark},
};
use tokio::io::unix::AsyncFd;

use crate::{base::pidfd::PidFd, probes::counts::KernelLosses};

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

/// The kernel side's counters, each summed over CPUs.
pub fn kernel_losses(ebpf: &Ebpf) -> anyhow::Result<KernelLosses> {
    let counters = Counters::new(ebpf)?;
    let mut read = KernelLosses::default();
    for (counter, n) in (0..).zip(&mut read.0) {
        *n = counters.sum(counter)?;
    }
    Ok(read)
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

/// Which processes the kernel side takes as decided followed or not as they were created: an
/// unmarked one is not followed, however deep its tree (`follow::DECIDED_SINCE` of the eBPF
/// side); each process created from then on takes its parent's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decided {
    /// None: exits are decided by the walk up their ancestry (`--all`, `--comm`, and before a
    /// run's target is marked).
    None,
    /// Those created from now on, once the target's marks are set (`--pid`: a process created
    /// before could have an unmarked parent about to be marked, or an old one deep below the
    /// target).
    FromNow,
    /// Every process (a workload, marked before it could create any: no process older than
    /// its marks descends from it unmarked).
    All,
}

/// Sets which processes are [`Decided`]. Cleared as a run begins, before its target is marked.
pub fn decide_creations(ebpf: &mut Ebpf, decided: Decided) -> anyhow::Result<()> {
    let since = match decided {
        Decided::None => 0,
        Decided::FromNow => boottime_now_ns()?,
        // Every task was created at or after 1 ns of boot time (but the idle tasks, the roots
        // of every tree).
        Decided::All => 1,
    };
    let map = ebpf
        .map_mut(names::maps::DECIDED_SINCE)
        .with_context(|| format!("the eBPF object has no {} map", names::maps::DECIDED_SINCE))?;
    let mut slot: Array<_, u64> = Array::try_from(map)?;
    slot.set(0, since, 0).context("setting since when the kernel side decides creations")
}

/// Now in the kernel's boot-time clock (`ktime_get_boottime_ns`, which stamps every task's
/// `start_boottime`), in ns: `CLOCK_BOOTTIME` less the boot-time offset of exitprof's time
/// namespace (Linux 5.6+, `/proc/self/timens_offsets`; none where the file is missing).
fn boottime_now_ns() -> anyhow::Result<u64> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: the clock writes into a local timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut now) } != 0 {
        return Err(std::io::Error::last_os_error()).context("reading CLOCK_BOOTTIME");
    }
    let offset_ns = match std::fs::read_to_string("/proc/self/timens_offsets") {
        Ok(offsets) => timens_boottime_offset_ns(&offsets)
            .context("reading the boot-time offset in /proc/self/timens_offsets")?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e).context("reading /proc/self/timens_offsets"),
    };
    let ns = i128::from(now.tv_sec) * 1_000_000_000 + i128::from(now.tv_nsec) - offset_ns;
    u64::try_from(ns).context("CLOCK_BOOTTIME before the boot")
}

/// The `boottime SECONDS NANOSECONDS` line of `timens_offsets`, in ns (0 where it has none).
fn timens_boottime_offset_ns(offsets: &str) -> Option<i128> {
    let Some(line) = offsets.lines().find(|l| l.starts_with("boottime ")) else { return Some(0) };
    let mut fields = line.split_whitespace().skip(1).map(str::parse::<i128>);
    Some(fields.next()?.ok()? * 1_000_000_000 + fields.next()?.ok()?)
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
    decide_creations(ebpf, Decided::None)?;
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

#[cfg(test)]
mod tests {
    use super::timens_boottime_offset_ns;

    #[test]
    fn the_boottime_offset_of_a_time_namespace_is_read_in_ns() {
        let offsets = "monotonic 5 0\nboottime -2 500\n";
        assert_eq!(timens_boottime_offset_ns(offsets), Some(-2_000_000_000 + 500));
        assert_eq!(timens_boottime_offset_ns("monotonic 0 0\n"), Some(0));
        assert_eq!(timens_boottime_offset_ns("boottime x 0\n"), None);
    }
}
