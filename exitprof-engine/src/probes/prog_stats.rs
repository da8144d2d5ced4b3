//! Per-program counters the kernel keeps in `bpf_prog_info`: runs and run time (counted while
//! BPF statistics are on, [`enable_bpf_stats`]) and how often a program could not run because another BPF program was
//! already running on that CPU (`recursion_misses`, v5.12+, which aya does not expose).

use std::{
    io,
    os::fd::{BorrowedFd, OwnedFd},
};

use anyhow::Context as _;
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};

/// Turns the kernel's BPF run-time statistics on for as long as the descriptor is open (closing
/// it, even by exitprof dying, turns them back off unless something else holds them on).
pub fn enable_bpf_stats() -> anyhow::Result<OwnedFd> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics (BPF_ENABLE_STATS, Linux 5.8+)")
}

/// A loaded program's counters.
pub struct ProgStats {
    pub runs: u64,
    pub run_ns: u64,
    pub recursion_misses: u64,
}

/// Reads `program`'s counters.
pub fn read(program: BorrowedFd<'_>) -> io::Result<ProgStats> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: plain-data kernel ABI structs, valid when zeroed.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.info.bpf_fd = program.as_raw_fd() as u32;
    attr.info.info_len = size_of::<bpf_prog_info>() as u32;
    attr.info.info = (&raw mut info) as u64;
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD writes at most `info_len` bytes into `info`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            &raw mut attr,
            size_of::<bpf_attr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ProgStats {
        runs: info.run_cnt,
        run_ns: info.run_time_ns,
        recursion_misses: info.recursion_misses,
    })
}
