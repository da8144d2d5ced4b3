//! The machine's limits on a storm, checked before anything starts: a storm that cannot run
//! fails with a clear message instead of dying halfway with probes attached.

use std::{fs, io};

use anyhow::Context as _;

use super::default_stack;
use crate::{
    probes::privileges,
    profiled::{ForkParams, NetnsParams, Storm, ThreadsParams},
};

/// What a live thread costs in memory that must really exist, at least: its kernel stack
/// (16 KiB on x86_64), its task_struct, and the user stack pages it touches (glibc keeps the
/// thread descriptor and TLS at the top of the stack). The rest of its default stack is only
/// reserved address space, which the kernel hands out freely unless overcommit is strict.
const RESIDENT_PER_THREAD: u64 = 32 << 10;

/// The limits that bound a storm, read from the running system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemLimits {
    /// `kernel.threads-max`.
    pub threads_max: u64,
    /// `kernel.pid_max`.
    pub pid_max: u64,
    /// Tasks that exist now (every thread of every process).
    pub tasks_now: u64,
    /// RLIMIT_NPROC and the tasks of this user that count against it, when the kernel enforces
    /// it for this process (not for root's user, CAP_SYS_RESOURCE or CAP_SYS_ADMIN).
    pub nproc: Option<(u64, u64)>,
    /// The stack size of the storm's threads (glibc's default, from RLIMIT_STACK).
    pub stack_bytes: u64,
    pub memory: Memory,
}

/// How much memory new thread stacks can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// `vm.overcommit_memory` 0 or 1: stacks are reserved freely; what must exist is the
    /// resident part, out of MemAvailable.
    Overcommit { available: u64 },
    /// `vm.overcommit_memory` 2: every stack is committed in full, out of
    /// CommitLimit - Committed_AS.
    Strict { commit_free: u64 },
}

/// A storm the machine cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LimitError {
    #[error(
        "{what} needs {needed} tasks at once, but kernel.threads-max is {max} and {now} tasks \
         exist already; ask for fewer or raise /proc/sys/kernel/threads-max"
    )]
    ThreadsMax { what: String, needed: u64, max: u64, now: u64 },
    #[error(
        "{what} needs {needed} pids at once, but kernel.pid_max is {max} and {now} are in use; \
         ask for fewer or raise /proc/sys/kernel/pid_max"
    )]
    PidMax { what: String, needed: u64, max: u64, now: u64 },
    #[error(
        "{what} needs {needed} tasks at once, but RLIMIT_NPROC is {limit} and this user has \
         {now} already; ask for fewer or raise it (ulimit -u)"
    )]
    Nproc { what: String, needed: u64, limit: u64, now: u64 },
    #[error(
        "{threads} threads need {needed_mib} MiB for their stacks ({stack_kib} KiB each, \
         vm.overcommit_memory=2), but only {free_mib} MiB can still be committed"
    )]
    CommitLimit { threads: u64, stack_kib: u64, needed_mib: u64, free_mib: u64 },
    #[error(
        "{threads} threads need at least {needed_mib} MiB of memory ({per_thread_kib} KiB each \
         for kernel stack, task and touched stack pages), but MemAvailable is {available_mib} MiB"
    )]
    Memory { threads: u64, per_thread_kib: u64, needed_mib: u64, available_mib: u64 },
    #[error(
        "--stagger-us {stagger_us} with {threads} threads: the first would sleep {longest_s:.1} s \
         before it exits, each rep; the longest sleep, threads x stagger, is at most \
         {MAX_SLEEP_S} s"
    )]
    StaggerTooLong { stagger_us: u32, threads: u32, longest_s: f64 },
}

/// The longest a threads storm's first thread may sleep before it exits, (N-0) x stagger: a
/// storm is about exits close together, and a longer one only looks hung.
pub const MAX_SLEEP_S: u64 = 60;

/// What a storm asks of the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Needs {
    /// How the storm is named in messages.
    what: String,
    /// Tasks alive at once, the driver included.
    tasks: u64,
    /// Threads with a stack of the default size.
    thread_stacks: u64,
    /// Distinct processes exitprof follows, the drivers included.
    processes: u64,
}

fn needs(storm: &Storm) -> Needs {
    match *storm {
        Storm::Threads(ThreadsParams { threads, .. }) => Needs {
            what: format!("--threads {threads}"),
            tasks: u64::from(threads) + 1,
            thread_stacks: u64::from(threads),
            processes: 1,
        },
        Storm::Fork(ForkParams { count, parallel })
        | Storm::Ipcns(ForkParams { count, parallel })
        | Storm::Netns(NetnsParams { forks: ForkParams { count, parallel }, .. }) => {
            Needs {
                what: format!("--parallel {parallel}"),
                // Every loop is a process with one child at a time.
                tasks: 2 * u64::from(parallel),
                thread_stacks: 0,
                processes: u64::from(count) + u64::from(parallel),
            }
        }
    }
}

/// Fails when the machine cannot run `storm`.
pub fn check(storm: &Storm, limits: &SystemLimits) -> Result<(), LimitError> {
    const MIB: u64 = 1 << 20;
    if let Storm::Threads(ThreadsParams { threads, stagger_us, .. }) = *storm {
        let longest_us = u64::from(threads) * u64::from(stagger_us);
        if longest_us > MAX_SLEEP_S * 1_000_000 {
            let longest_s = longest_us as f64 / 1e6;
            return Err(LimitError::StaggerTooLong { stagger_us, threads, longest_s });
        }
    }
    let n = needs(storm);
    let what = || n.what.clone();
    if limits.tasks_now + n.tasks > limits.threads_max {
        return Err(LimitError::ThreadsMax {
            what: what(),
            needed: n.tasks,
            max: limits.threads_max,
            now: limits.tasks_now,
        });
    }
    if limits.tasks_now + n.tasks > limits.pid_max {
        return Err(LimitError::PidMax {
            what: what(),
            needed: n.tasks,
            max: limits.pid_max,
            now: limits.tasks_now,
        });
    }
    if let Some((limit, now)) = limits.nproc
        && now + n.tasks > limit
    {
        return Err(LimitError::Nproc { what: what(), needed: n.tasks, limit, now });
    }
    match limits.memory {
        Memory::Strict { commit_free } => {
            let needed = n.thread_stacks * limits.stack_bytes;
            if needed > commit_free {
                return Err(LimitError::CommitLimit {
                    threads: n.thread_stacks,
                    stack_kib: limits.stack_bytes >> 10,
                    needed_mib: needed.div_ceil(MIB),
                    free_mib: commit_free / MIB,
                });
            }
        }
        Memory::Overcommit { available } => {
            let needed = n.thread_stacks * RESIDENT_PER_THREAD;
            if needed > available {
                return Err(LimitError::Memory {
                    threads: n.thread_stacks,
                    per_thread_kib: RESIDENT_PER_THREAD >> 10,
                    needed_mib: needed.div_ceil(MIB),
                    available_mib: available / MIB,
                });
            }
        }
    }
    Ok(())
}

impl SystemLimits {
    /// Reads the limits of the running system.
    pub fn read() -> anyhow::Result<Self> {
        let memory = match read_number("/proc/sys/vm/overcommit_memory")? {
            2 => Memory::Strict {
                commit_free: meminfo("CommitLimit")?.saturating_sub(meminfo("Committed_AS")?),
            },
            _ => Memory::Overcommit { available: meminfo("MemAvailable")? },
        };
        Ok(Self {
            threads_max: read_number("/proc/sys/kernel/threads-max")?,
            pid_max: read_number("/proc/sys/kernel/pid_max")?,
            tasks_now: tasks_now()?,
            nproc: nproc()?,
            stack_bytes: default_stack::bytes().context("reading RLIMIT_STACK")?,
            memory,
        })
    }
}

fn read_number(path: &str) -> anyhow::Result<u64> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    text.trim().parse().with_context(|| format!("{path} holds {text:?}, not a number"))
}

/// A /proc/meminfo field, in bytes.
fn meminfo(field: &str) -> anyhow::Result<u64> {
    let text = fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    parse_meminfo(&text, field).with_context(|| format!("/proc/meminfo has no {field}"))
}

fn parse_meminfo(text: &str, field: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib << 10)
}

/// Every task on the system: the denominator of `/proc/loadavg`'s fourth field.
fn tasks_now() -> anyhow::Result<u64> {
    let text = fs::read_to_string("/proc/loadavg").context("reading /proc/loadavg")?;
    parse_loadavg_tasks(&text).with_context(|| format!("unexpected /proc/loadavg: {text:?}"))
}

fn parse_loadavg_tasks(text: &str) -> Option<u64> {
    text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

/// RLIMIT_NPROC and this user's task count, when the kernel would enforce it on our forks.
fn nproc() -> anyhow::Result<Option<(u64, u64)>> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid == 0 || privileges::has_capability(privileges::CAP_SYS_RESOURCE) {
        return Ok(None);
    }
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid rlimit to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &raw mut limit) } != 0 {
        return Err(io::Error::last_os_error()).context("reading RLIMIT_NPROC");
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        return Ok(None);
    }
    Ok(Some((limit.rlim_cur, user_tasks(uid))))
}

/// Tasks (threads included) whose real user is `uid`.
fn user_tasks(uid: u32) -> u64 {
    let Ok(dir) = fs::read_dir("/proc") else { return 0 };
    dir.filter_map(Result::ok)
        .filter_map(|e| fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|status| {
            let field = |name: &str| {
                status.lines().find_map(|l| l.strip_prefix(name)).map(str::split_whitespace)
            };
            let real_uid: u32 = field("Uid:")?.next()?.parse().ok()?;
            let threads: u64 = field("Threads:")?.next()?.parse().ok()?;
            (real_uid == uid).then_some(threads)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roomy() -> SystemLimits {
        SystemLimits {
            threads_max: 192_726,
            pid_max: 32_768,
            tasks_now: 134,
            nproc: None,
            stack_bytes: 8 << 20,
            memory: Memory::Overcommit { available: 22 << 30 },
        }
    }

    fn threads(threads: u32) -> Storm {
        Storm::Threads(ThreadsParams { threads, reps: 10, stagger_us: 2, rate: None })
    }

    #[test]
    fn the_longest_sleep_of_a_threads_storm_is_bounded() {
        let storm = |threads, stagger_us| {
            Storm::Threads(ThreadsParams { threads, reps: 1, stagger_us, rate: None })
        };
        assert_eq!(check(&storm(1000, 60_000), &roomy()), Ok(()));
        let err = check(&storm(1000, 60_001), &roomy()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--stagger-us 60001 with 1000 threads: the first would sleep 60.0 s before it exits, \
             each rep; the longest sleep, threads x stagger, is at most 60 s"
        );
        // No overflow at the extremes.
        assert!(check(&storm(u32::MAX, u32::MAX), &roomy()).is_err());
    }

    fn ipcns(count: u32, parallel: u32) -> Storm {
        Storm::Ipcns(ForkParams { count, parallel })
    }

    #[test]
    fn the_2006_and_2012_storms_fit() {
        check(&threads(1000), &roomy()).unwrap();
        check(&ipcns(1024, 1), &roomy()).unwrap();
    }

    #[test]
    fn thread_counts_are_bounded_by_the_kernel() {
        let err = check(&threads(192_600), &roomy()).unwrap_err();
        assert!(matches!(err, LimitError::ThreadsMax { needed: 192_601, .. }), "{err}");
        // Below threads-max but above what pid_max leaves.
        let err = check(&threads(32_700), &roomy()).unwrap_err();
        assert!(matches!(err, LimitError::PidMax { .. }), "{err}");
        let err = check(&ipcns(10, 16_384), &roomy()).unwrap_err();
        assert!(matches!(err, LimitError::PidMax { needed: 32_768, .. }), "{err}");
        assert!(err.to_string().contains("--parallel 16384"), "{err}");
    }

    #[test]
    fn rlimit_nproc_counts_the_users_tasks() {
        let limits = SystemLimits { nproc: Some((4096, 100)), ..roomy() };
        check(&threads(3995), &limits).unwrap();
        let err = check(&threads(3996), &limits).unwrap_err();
        assert!(matches!(err, LimitError::Nproc { needed: 3997, limit: 4096, now: 100, .. }));
    }

    #[test]
    fn stacks_need_memory_as_the_overcommit_policy_counts_it() {
        // 3000 default stacks reserve 24 GiB, more than is available, and run fine: only
        // their resident part must exist.
        check(&threads(3000), &roomy()).unwrap();
        let tight = SystemLimits { memory: Memory::Overcommit { available: 16 << 20 }, ..roomy() };
        let err = check(&threads(1000), &tight).unwrap_err();
        assert!(matches!(err, LimitError::Memory { needed_mib: 32, .. }), "{err}");
        let strict = SystemLimits { memory: Memory::Strict { commit_free: 4 << 30 }, ..roomy() };
        check(&threads(500), &strict).unwrap();
        let err = check(&threads(600), &strict).unwrap_err();
        assert!(matches!(err, LimitError::CommitLimit { needed_mib: 4800, .. }), "{err}");
    }

    #[test]
    fn fork_counts_are_not_bounded_by_following_them() {
        // Followed processes are marked in their own task-local storage: no map to fill.
        check(&ipcns(1_000_000, 1), &roomy()).unwrap();
        let big_pids = SystemLimits { pid_max: 4_194_304, ..roomy() };
        check(&ipcns(1_000_000, 1), &big_pids).unwrap();
    }

    #[test]
    fn proc_files_are_parsed() {
        let meminfo = "MemTotal:       24591028 kB\nMemAvailable:   23452460 kB\n";
        assert_eq!(parse_meminfo(meminfo, "MemAvailable"), Some(23_452_460 << 10));
        assert_eq!(parse_meminfo(meminfo, "Mem"), None);
        assert_eq!(parse_loadavg_tasks("4.28 4.67 2.81 5/134 32765\n"), Some(134));
    }

    #[test]
    fn this_system_can_be_read() {
        let limits = SystemLimits::read().unwrap();
        assert!(limits.threads_max > 0 && limits.pid_max > 0 && limits.tasks_now > 0);
        assert!(limits.stack_bytes >= 16 << 10, "stack {} bytes", limits.stack_bytes);
    }
}
