//! The soak's own count of exits, independent of exitprof and of BPF: the kernel's perf events
//! count every hit of the `sched:sched_process_exit` tracepoint, one counter per CPU for the whole
//! machine (`perf stat -e sched:sched_process_exit -a` does the same), optionally behind a
//! tracepoint filter on the exiting task's name. A count is read at any instant with one `read`
//! per CPU, so exitprof's own counters can be bracketed between two reads of it.
//!
//! Every exit passes `sched_process_exit` once (`do_exit`, kernel/exit.c), after its task set
//! `PF_EXITING` and before its final switch.

use std::{
    ffi::CString,
    fs,
    io::Read as _,
    os::fd::{FromRawFd as _, OwnedFd},
    path::Path,
};

use anyhow::{Context as _, bail};

use super::bpf_maps::cpu_count;

/// `PERF_TYPE_TRACEPOINT`, `PERF_FLAG_FD_CLOEXEC` and `PERF_EVENT_IOC_SET_FILTER`
/// (include/uapi/linux/perf_event.h).
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

/// `struct perf_event_attr` as of its first version (`PERF_ATTR_SIZE_VER0`, 64 bytes): a
/// counting event, enabled at once, of every task on one CPU.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// A count of `sched_process_exit` hits on every CPU.
pub struct ExitCounter {
    per_cpu: Vec<OwnedFd>,
}

impl ExitCounter {
    /// Counts the exits of every task, or of tasks named `comm` only.
    pub fn new(tracefs: &Path, comm: Option<&str>) -> anyhow::Result<Self> {
        let id_path = tracefs.join("events/sched/sched_process_exit/id");
        let id: u64 = fs::read_to_string(&id_path)
            .with_context(|| format!("reading {}", id_path.display()))?
            .trim()
            .parse()?;
        let online = fs::read_to_string("/sys/devices/system/cpu/online")?;
        let cpus = cpu_count(online.trim())?;
        let filter = comm.map(|c| CString::new(format!("comm == \"{c}\""))).transpose()?;
        let per_cpu = (0..cpus)
            .map(|cpu| open_counter(id, cpu as i32, filter.as_ref()))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { per_cpu })
    }

    /// Exits counted since the counter was opened.
    pub fn read(&self) -> anyhow::Result<u64> {
        let mut total = 0;
        for fd in &self.per_cpu {
            let mut count = [0u8; 8];
            // SAFETY: the descriptor is borrowed for the read only; ManuallyDrop keeps it open.
            let mut file = std::mem::ManuallyDrop::new(unsafe {
                fs::File::from_raw_fd(std::os::fd::AsRawFd::as_raw_fd(fd))
            });
            file.read_exact(&mut count).context("reading a perf counter")?;
            total += u64::from_ne_bytes(count);
        }
        Ok(total)
    }
}

fn open_counter(id: u64, cpu: i32, filter: Option<&CString>) -> anyhow::Result<OwnedFd> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_TRACEPOINT,
        size: size_of::<PerfEventAttr>() as u32,
        config: id,
        ..PerfEventAttr::default()
    };
    // SAFETY: a valid attribute of the size it states; pid -1 with a CPU counts every task there.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, &raw const attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| {
            format!("counting sched_process_exit on CPU {cpu} (perf_event_open)")
        });
    }
    // SAFETY: a descriptor the kernel just gave this process, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if let Some(filter) = filter {
        // SAFETY: a NUL-terminated filter string, alive for the call.
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                PERF_EVENT_IOC_SET_FILTER,
                filter.as_ptr(),
            )
        };
        if rc != 0 {
            bail!(
                "setting the filter {filter:?} on sched_process_exit: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(fd)
}
