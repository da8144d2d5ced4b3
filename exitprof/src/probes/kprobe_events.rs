//! kprobes and kretprobes created through tracefs `kprobe_events`, so that a kretprobe can be
//! given a `maxactive` sized for exit storms (the perf kprobe PMU, which aya uses, always takes
//! the default of `max(10, 2 * CPUs)`: a storm with more tasks inside a probed function than
//! that loses returns) and so that `kprobe_profile` reports every probe's misses.

use std::{
    fs::{self, OpenOptions},
    io::{self, Write as _},
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use perf_event_open_sys as sys;

/// The largest `maxactive` tracefs accepts (`KRETPROBE_MAXACTIVE_MAX`).
pub const MAX_ACTIVE: u32 = 4096;

/// One kprobe event with a BPF program attached; removed again on drop.
pub struct KprobeEvent {
    tracefs: PathBuf,
    /// `group/event`, as kprobe_events and kprobe_profile name it.
    name: String,
    /// The perf event the program hangs on; closing it detaches the program.
    perf: Option<OwnedFd>,
}

#[derive(Debug, thiserror::Error)]
pub enum KprobeEventError {
    #[error("creating kprobe event {name} on {symbol} via {path}")]
    Create { name: String, symbol: String, path: PathBuf, source: io::Error },
    #[error("reading the id of kprobe event {name}")]
    Id { name: String, source: io::Error },
    #[error("perf_event_open for kprobe event {name}")]
    PerfOpen { name: String, source: io::Error },
    #[error("attaching the eBPF program to kprobe event {name}")]
    Attach { name: String, source: io::Error },
}

/// The tracefs group exitprof's kprobe events live in: one per exitprof process.
fn group() -> String {
    format!("exitprof_{}", std::process::id())
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
        let name = format!("{}/{program_name}", group());
        let definition = match ret {
            Some(maxactive) => format!("r{maxactive}:{name} {symbol}\n"),
            None => format!("p:{name} {symbol}\n"),
        };
        let events = tracefs.join("kprobe_events");
        append(&events, &definition).map_err(|source| KprobeEventError::Create {
            name: name.clone(),
            symbol: symbol.to_owned(),
            path: events.clone(),
            source,
        })?;
        // From here on, dropping `this` removes the event again.
        let mut this = Self { tracefs: tracefs.to_owned(), name, perf: None };
        let id_path = tracefs.join("events").join(&this.name).join("id");
        let id: u64 = fs::read_to_string(&id_path)
            .and_then(|s| {
                s.trim().parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            })
            .map_err(|source| KprobeEventError::Id { name: this.name.clone(), source })?;
        let perf = open_tracepoint_event(id)
            .map_err(|source| KprobeEventError::PerfOpen { name: this.name.clone(), source })?;
        // SAFETY: both descriptors are open for the duration of the calls.
        let attached = unsafe {
            sys::ioctls::SET_BPF(perf.as_raw_fd(), program.as_raw_fd() as u32) == 0
                && sys::ioctls::ENABLE(perf.as_raw_fd(), 0) == 0
        };
        if !attached {
            let source = io::Error::last_os_error();
            return Err(KprobeEventError::Attach { name: this.name.clone(), source });
        }
        this.perf = Some(perf);
        Ok(this)
    }

    /// `(hits, misses)` of this probe from `kprobe_profile`.
    pub fn profile(&self) -> io::Result<(u64, u64)> {
        let profile = fs::read_to_string(self.tracefs.join("kprobe_profile"))?;
        let event = self.name.rsplit('/').next().unwrap_or(&self.name);
        parse_profile(&profile, event).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not in kprobe_profile", self.name),
            )
        })
    }
}

impl Drop for KprobeEvent {
    fn drop(&mut self) {
        // Detach first: an event with a live perf user cannot be removed.
        drop(self.perf.take());
        let removal = format!("-:{}\n", self.name);
        if let Err(e) = append(&self.tracefs.join("kprobe_events"), &removal) {
            log::warn!("removing kprobe event {}: {e}", self.name);
        }
    }
}

/// The hits and misses columns of `event`'s line in kprobe_profile (`EVENT HITS MISSES`).
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

/// Removes kprobe events left behind by exitprof processes that no longer exist (killed hard).
pub fn remove_stale(tracefs: &Path) {
    let Ok(events) = fs::read_to_string(tracefs.join("kprobe_events")) else { return };
    for line in events.lines() {
        // Lines look like `p:exitprof_1234/kprobe_enter_exit_files exit_files`.
        let Some(name) =
            line.split_whitespace().next().and_then(|d| d.split_once(':')).map(|(_, n)| n)
        else {
            continue;
        };
        let Some(pid) = name.strip_prefix("exitprof_").and_then(|r| r.split('/').next()) else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        if let Err(e) = append(&tracefs.join("kprobe_events"), &format!("-:{name}\n")) {
            log::warn!("removing stale kprobe event {name}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hits_and_misses() {
        let profile = "  p_do_exit                                            200               0\n\
                         r_exit_files                                         198               2\n";
        assert_eq!(parse_profile(profile, "r_exit_files"), Some((198, 2)));
        assert_eq!(parse_profile(profile, "p_do_exit"), Some((200, 0)));
        assert_eq!(parse_profile(profile, "p_exit_fs"), None);
    }
}
