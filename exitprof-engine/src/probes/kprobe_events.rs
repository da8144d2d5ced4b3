//! kprobes and kretprobes created through tracefs `kprobe_events`, so that a kretprobe can be
//! given a `maxactive` sized for exit storms and so that `kprobe_profile` reports every probe's
//! misses. (aya attaches a `KProbe` program through the perf kprobe PMU instead, with
//! `perf_event_open` on `/sys/bus/event_source/devices/kprobe` since 4.17: such a probe belongs
//! to its perf event alone, is listed in neither file, and a kretprobe made so always takes the
//! default `maxactive` of `max(10, 2 * CPUs)`: a storm with more tasks inside a probed function
//! than that loses returns.)
//!
//! Several exitprof processes may run at once, in PID namespaces of their own: each has its own
//! group, `exitprof_<pidns>_<pid>`, the inode of its PID namespace and its pid there, which
//! together no other live process has (two containers may each run exitprof as pid 1). Since
//! `kprobe_profile` names an event without its group, the events' names end with the same
//! `_<pidns>_<pid>`, and each process reads the misses of its own.
//!
//! A process killed hard leaves its events behind; a later exitprof removes them, whatever PID
//! namespace they came from, once their owner is provably gone. The kernel refuses to remove an
//! event that a perf event uses (`EBUSY`: every exitprof event has its program's), and each
//! exitprof holds an exclusive lock on `kprobe_events` (`flock`: one file for every mount of
//! tracefs, in every container, and released when its holder dies) from before it creates an
//! event until its program uses it, and from before its program lets go of it until it is
//! removed. Under that lock, an exitprof event that no perf event uses has no live owner.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write as _},
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use perf_event_open_sys as sys;

/// The largest `maxactive` tracefs accepts (`KRETPROBE_MAXACTIVE_MAX`).
pub const MAX_ACTIVE: u32 = 4096;

/// The longest event name tracefs accepts (`MAX_EVENT_NAME_LEN`, kernel/trace/trace_probe.h).
const MAX_EVENT_NAME_LEN: usize = 64;

/// What the groups of exitprof's events begin with, whichever process made them.
const GROUP_PREFIX: &str = "exitprof_";

/// One kprobe event with a BPF program attached; removed again on drop.
pub struct KprobeEvent {
    tracefs: PathBuf,
    /// `group/event`, as kprobe_events names it.
    name: String,
    /// The perf event the program hangs on; closing it detaches the program.
    perf: Option<OwnedFd>,
}

#[derive(Debug, thiserror::Error)]
pub enum KprobeEventError {
    #[error("taking the lock on {path} (every exitprof takes it around its kprobe events)")]
    Lock { path: PathBuf, source: io::Error },
    #[error("the kprobe event name {name} is longer than tracefs takes ({MAX_EVENT_NAME_LEN})")]
    NameTooLong { name: String },
    #[error("creating kprobe event {name} on {symbol} via {path}")]
    Create { name: String, symbol: String, path: PathBuf, source: io::Error },
    #[error("reading the id of kprobe event {name}")]
    Id { name: String, source: io::Error },
    #[error("perf_event_open for kprobe event {name}")]
    PerfOpen { name: String, source: io::Error },
    #[error("attaching the eBPF program to kprobe event {name}")]
    Attach { name: String, source: io::Error },
}

/// This process among every exitprof's: `<pidns>_<pid>`, its PID namespace's inode and its pid
/// there.
fn instance() -> String {
    use std::os::linux::fs::MetadataExt as _;
    // Unreadable (no /proc): the pid alone, unique where nothing else can be seen.
    let pidns = fs::metadata("/proc/self/ns/pid").map_or(0, |ns| ns.st_ino());
    format!("{pidns}_{}", std::process::id())
}

/// The group of this process's events.
fn group() -> String {
    format!("{GROUP_PREFIX}{}", instance())
}

impl KprobeEvent {
    /// Creates a kprobe (or a kretprobe with `maxactive` instances) on `symbol` and attaches
    /// the loaded kprobe program `program` to it. The event is named after the program, since
    /// several programs may probe one symbol.
    pub fn attach(
        tracefs: &Path,
        program_name: &str,
        program: BorrowedFd<'_>,
        symbol: &str,
        ret: Option<u32>,
    ) -> Result<Self, KprobeEventError> {
        let event = format!("{program_name}_{}", instance());
        if event.len() > MAX_EVENT_NAME_LEN {
            return Err(KprobeEventError::NameTooLong { name: event });
        }
        let name = format!("{}/{event}", group());
        let definition = match ret {
            Some(maxactive) => format!("r{maxactive}:{name} {symbol}\n"),
            None => format!("p:{name} {symbol}\n"),
        };
        let _lock = EventsLock::take(tracefs)?;
        let events = tracefs.join("kprobe_events");
        append(&events, &definition).map_err(|source| KprobeEventError::Create {
            name: name.clone(),
            symbol: symbol.to_owned(),
            path: events.clone(),
            source,
        })?;
        match hang(tracefs, &name, program) {
            Ok(perf) => Ok(Self { tracefs: tracefs.to_owned(), name, perf: Some(perf) }),
            Err(e) => {
                remove(tracefs, &name);
                Err(e)
            }
        }
    }

    /// This event's name in `kprobe_profile`.
    fn event(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

/// Hangs `program` on the kprobe event `name`, just created: through a perf event, which from
/// then on uses the event.
fn hang(tracefs: &Path, name: &str, program: BorrowedFd<'_>) -> Result<OwnedFd, KprobeEventError> {
    let id_path = tracefs.join("events").join(name).join("id");
    let id: u64 = fs::read_to_string(&id_path)
        .and_then(|s| s.trim().parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)))
        .map_err(|source| KprobeEventError::Id { name: name.to_owned(), source })?;
    let perf = open_tracepoint_event(id)
        .map_err(|source| KprobeEventError::PerfOpen { name: name.to_owned(), source })?;
    // SAFETY: both descriptors are open for the duration of the calls.
    let attached = unsafe {
        sys::ioctls::SET_BPF(perf.as_raw_fd(), program.as_raw_fd() as u32) == 0
            && sys::ioctls::ENABLE(perf.as_raw_fd(), 0) == 0
    };
    if !attached {
        let source = io::Error::last_os_error();
        return Err(KprobeEventError::Attach { name: name.to_owned(), source });
    }
    Ok(perf)
}

impl Drop for KprobeEvent {
    fn drop(&mut self) {
        let lock = EventsLock::take(&self.tracefs);
        if let Err(e) = &lock {
            log::warn!("{e}: removing kprobe event {} without it", self.name);
        }
        // Detach first: an event with a live perf user cannot be removed.
        drop(self.perf.take());
        remove(&self.tracefs, &self.name);
    }
}

/// Probe hits missed of `events` (`kprobe_profile`'s misses: a kretprobe's `maxactive`
/// exhausted, or a probe hit while another probe's handler ran on its CPU).
pub fn misses(events: &[KprobeEvent]) -> io::Result<u64> {
    let Some(first) = events.first() else { return Ok(0) };
    let profile = fs::read_to_string(first.tracefs.join("kprobe_profile"))?;
    events.iter().try_fold(0, |sum, event| {
        let (_, misses) = parse_profile(&profile, event.event()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not in kprobe_profile", event.name),
            )
        })?;
        Ok(sum + misses)
    })
}

/// The hits and misses columns of `event`'s line in kprobe_profile (`EVENT HITS MISSES`; the
/// event's name without its group).
fn parse_profile(profile: &str, event: &str) -> Option<(u64, u64)> {
    profile.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next()? != event {
            return None;
        }
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

fn append(path: &Path, line: &str) -> io::Result<()> {
    OpenOptions::new().append(true).open(path)?.write_all(line.as_bytes())
}

/// Removes the event `name` (`group/event`), saying so when it cannot.
fn remove(tracefs: &Path, name: &str) {
    if let Err(e) = append(&tracefs.join("kprobe_events"), &format!("-:{name}\n")) {
        log::warn!("removing kprobe event {name}: {e}");
    }
}

/// The lock every exitprof holds while one of its kprobe events is not in use by its program:
/// an exclusive `flock` of `kprobe_events`, released when dropped (or when its holder dies).
struct EventsLock {
    /// Locked; closing it unlocks.
    _locked: File,
}

impl EventsLock {
    fn take(tracefs: &Path) -> Result<Self, KprobeEventError> {
        let path = tracefs.join("kprobe_events");
        let failed = |source| KprobeEventError::Lock { path: path.clone(), source };
        let file = File::open(&path).map_err(failed)?;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Self { _locked: file });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(failed(e));
            }
        }
    }
}

/// Opens a system-wide perf event on a trace event; BPF programs attached to it run on every CPU.
fn open_tracepoint_event(id: u64) -> io::Result<OwnedFd> {
    let mut attr = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_TRACEPOINT,
        size: size_of::<sys::bindings::perf_event_attr>() as u32,
        config: id,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_2.wakeup_events = 1;
    // SAFETY: a valid attr; pid -1 with cpu 0 is the usual system-wide tracepoint event.
    let fd = unsafe {
        sys::perf_event_open(
            &raw mut attr,
            -1,
            0,
            -1,
            u64::from(sys::bindings::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Removes the kprobe events of exitprof processes that are gone (killed hard), in whatever PID
/// namespace they ran: under the lock, those no perf event uses (the kernel refuses to remove
/// the others, `EBUSY`).
pub fn remove_stale(tracefs: &Path) {
    let path = tracefs.join("kprobe_events");
    let own = format!("{}/", group());
    let others = || -> Vec<String> {
        // Unreadable: the kernel has no kprobe events, or they are not for this process to see.
        let events = fs::read_to_string(&path).unwrap_or_default();
        let names = events.lines().filter_map(exitprof_event);
        names.filter(|name| !name.starts_with(&own)).map(str::to_owned).collect()
    };
    if others().is_empty() {
        return;
    }
    let _lock = match EventsLock::take(tracefs) {
        Ok(lock) => lock,
        Err(e) => return log::warn!("{e}: stale kprobe events left"),
    };
    for name in others() {
        match append(&path, &format!("-:{name}\n")) {
            Ok(()) => log::info!("removed kprobe event {name}, left by an exitprof that is gone"),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                log::debug!("kprobe event {name} is in use: its exitprof runs");
            }
            Err(e) => log::warn!("removing stale kprobe event {name}: {e}"),
        }
    }
}

/// The `group/event` of a line of `kprobe_events` that is an exitprof event (of any exitprof:
/// `p:exitprof_4026531836_1234/kprobe_enter_exit_files_4026531836_1234 exit_files`).
fn exitprof_event(line: &str) -> Option<&str> {
    let (_, name) = line.split_whitespace().next()?.split_once(':')?;
    name.starts_with(GROUP_PREFIX).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::sites;

    /// Each event's line, by its name alone: two exitprof, each pid 1 of a PID namespace of its
    /// own, have events of different names.
    #[test]
    fn reads_hits_and_misses() {
        let profile = "  p_do_exit                                            200               0\n\
                         r_exit_files                                         198               2\n\
                         kretprobe_exit_exit_files_4026532401_1               10               7\n\
                         kretprobe_exit_exit_files_4026532402_1               10               0\n";
        assert_eq!(parse_profile(profile, "r_exit_files"), Some((198, 2)));
        assert_eq!(parse_profile(profile, "p_do_exit"), Some((200, 0)));
        assert_eq!(parse_profile(profile, "p_exit_fs"), None);
        assert_eq!(parse_profile(profile, "kretprobe_exit_exit_files_4026532402_1"), Some((10, 0)));
        assert_eq!(parse_profile(profile, "kretprobe_exit_exit_files_4026532401_1"), Some((10, 7)));
    }

    #[test]
    fn exitprof_events_are_told_from_others() {
        let line =
            "r4096:exitprof_4026531836_77/kretprobe_exit_exit_files_4026531836_77 exit_files";
        assert_eq!(
            exitprof_event(line),
            Some("exitprof_4026531836_77/kretprobe_exit_exit_files_4026531836_77")
        );
        // An earlier exitprof's group: its pid alone.
        assert_eq!(
            exitprof_event("p:exitprof_12/kprobe_enter_do_exit do_exit"),
            Some("exitprof_12/kprobe_enter_do_exit")
        );
        assert_eq!(exitprof_event("p:kprobes/p_do_exit_0 do_exit"), None);
        assert_eq!(exitprof_event("p:aya_12_p_do_exit_0x0_0/x do_exit"), None);
    }

    /// Every kprobe program's event fits tracefs's bound with the longest suffix a process can
    /// have: a 32-bit namespace inode and a pid up to `kernel.pid_max`'s 4194304.
    #[test]
    fn every_event_name_fits() {
        let longest = format!("_{}_{}", u32::MAX, 4_194_304);
        let kprobes = sites::every_program().into_iter().map(|(_, program)| program);
        let kprobes: Vec<&str> =
            kprobes.filter(|p| p.starts_with("kprobe_") || p.starts_with("kretprobe_")).collect();
        assert!(kprobes.len() > 20, "{kprobes:?}");
        for program in kprobes {
            let event = format!("{program}{longest}");
            assert!(event.len() <= MAX_EVENT_NAME_LEN, "{event}: {} bytes", event.len());
        }
    }
}
