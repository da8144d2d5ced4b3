//! exitprof confined as it is deployed: root with only some capabilities, under a locked-memory
//! limit, without new privileges (as systemd runs a unit, or a container runtime a container);
//! or as pid 1 of a PID namespace of its own (as a container without the host's PIDs). Set up
//! in the child between fork and exec, by the system calls themselves: the guests of the VM
//! tests have neither `setpriv` nor `prlimit` nor `unshare`.

use std::{io, os::unix::process::CommandExt as _, process::Command};

/// A locked-memory limit for which the kernel charged BPF maps before 5.11: the default of
/// Linux before 5.16, which systemd leaves a service (Debian 11, Amazon Linux 2) and containerd
/// and Docker a container, unless told otherwise.
pub const DEFAULT_MEMLOCK: u64 = 64 << 10;

/// How a command is confined.
#[derive(Clone, Debug)]
pub struct Confinement {
    /// The capabilities left (numbers); every other one is dropped from the bounding set, so
    /// that root's exec gets these alone.
    pub capabilities: Vec<u32>,
    /// RLIMIT_MEMLOCK, soft and hard alike (`libc::RLIM_INFINITY`: unlimited).
    pub memlock: u64,
    /// `PR_SET_NO_NEW_PRIVS` (systemd's `NoNewPrivileges=`, Kubernetes'
    /// `allowPrivilegeEscalation: false`).
    pub no_new_privileges: bool,
}

impl Confinement {
    /// This confinement as far as this test process can give it, saying what it cannot: no
    /// capability it lacks itself, and (without CAP_SYS_RESOURCE) no locked-memory limit above
    /// its own hard limit. The guests' root has all; a container's may not (our CI host's
    /// root lacks CAP_SYS_RESOURCE).
    pub fn as_far_as_possible(&self) -> Self {
        let (capabilities, missing): (Vec<u32>, Vec<u32>) =
            self.capabilities.iter().partition(|&&cap| can_grant(cap));
        if !missing.is_empty() {
            eprintln!("this test process cannot grant capabilities {missing:?}: left out");
        }
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: a valid rlimit to fill.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut limit) }, 0);
        let can_raise = own_capabilities("CapEff:") & 1 << capability("SYS_RESOURCE") != 0;
        let memlock = if can_raise { self.memlock } else { self.memlock.min(limit.rlim_max) };
        if memlock != self.memlock {
            eprintln!(
                "this test process cannot raise RLIMIT_MEMLOCK to {}: {memlock} instead",
                self.memlock
            );
        }
        Self { capabilities, memlock, no_new_privileges: self.no_new_privileges }
    }

    /// Runs `command` so confined. The test process must have the capabilities and may not
    /// raise the limit without CAP_SYS_RESOURCE: see [`Confinement::as_far_as_possible`].
    pub fn apply(&self, command: &mut Command) {
        let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .expect("/proc/sys/kernel/cap_last_cap")
            .trim()
            .parse()
            .expect("a capability number");
        let dropped: Vec<u32> = (0..=last).filter(|c| !self.capabilities.contains(c)).collect();
        let (memlock, no_new_privileges) = (self.memlock, self.no_new_privileges);
        let prepare = move || -> io::Result<()> {
            let limit = libc::rlimit { rlim_cur: memlock, rlim_max: memlock };
            // SAFETY: setrlimit and prctl with plain arguments, async-signal-safe.
            unsafe {
                check(libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const limit))?;
                check(libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))?;
                for &cap in &dropped {
                    check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
                }
                if no_new_privileges {
                    check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                }
            }
            Ok(())
        };
        // SAFETY: the closure makes system calls only, on values moved into it.
        unsafe { command.pre_exec(prepare) };
    }

    /// The effective capabilities the confined exitprof is to have, as `/proc/PID/status`'s
    /// `CapEff` shows them.
    pub fn mask(&self) -> u64 {
        self.capabilities.iter().fold(0, |mask, cap| mask | 1 << cap)
    }
}

/// Whether this test process can give its children capability `cap` (it is in its bounding set).
pub fn can_grant(cap: u32) -> bool {
    own_capabilities("CapBnd:") & 1 << cap != 0
}

/// A capability set of this test process (`key`: `CapBnd:`, `CapEff:` of `/proc/self/status`).
fn own_capabilities(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let hex = status.lines().find_map(|l| l.strip_prefix(key)).expect(key);
    u64::from_str_radix(hex.trim(), 16).expect("a hex mask")
}

/// The capabilities of a process (`CapEff` of `/proc/PID/status`).
pub fn effective_capabilities(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a running process");
    let caps = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("CapEff");
    u64::from_str_radix(caps.trim(), 16).expect("a hex mask")
}

/// Runs `command` as pid 1 of a new PID namespace: its child unshares the namespace and forks
/// again; the grandchild, the namespace's first process, goes on to exec `command`, and the
/// child waits for it and exits with its status. (`/proc` is left as it is.)
pub fn in_new_pid_namespace(command: &mut Command) {
    let prepare = || -> io::Result<()> {
        // SAFETY: unshare, fork, close_range, waitpid and _exit, async-signal-safe, in the
        // child std forked (single-threaded).
        unsafe {
            check(libc::unshare(libc::CLONE_NEWPID))?;
            let pid = libc::fork();
            if pid < 0 {
                return Err(io::Error::last_os_error());
            }
            if pid == 0 {
                return Ok(());
            }
            // Let go of every descriptor but the standard ones: std's spawn waits for the
            // end of a pipe this process holds, which the grandchild closes as it execs.
            libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0);
            let mut status = 0;
            while libc::waitpid(pid, &raw mut status, 0) < 0 {}
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            };
            libc::_exit(code)
        }
    };
    // SAFETY: the closure makes system calls only.
    unsafe { command.pre_exec(prepare) };
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A capability's number from its name, with or without `CAP_` (`CAP_BPF`, `SYS_RESOURCE`);
/// include/uapi/linux/capability.h.
pub fn capability(name: &str) -> u32 {
    const NAMES: [&str; 41] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let bare = name.trim().to_ascii_uppercase();
    let bare = bare.strip_prefix("CAP_").unwrap_or(&bare);
    NAMES.iter().position(|n| *n == bare).unwrap_or_else(|| panic!("{name} is not a capability"))
        as u32
}
