//! Checks that exitprof may load eBPF programs, before anything else happens.

use std::fs;

use super::kprobe_events::KprobeEventError;

/// Capability numbers (include/uapi/linux/capability.h).
pub const CAP_SYS_RESOURCE: u32 = 24;
pub const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Debug, thiserror::Error)]
pub enum MissingPrivilege {
    #[error(
        "exitprof needs root, or the capabilities CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), to \
         load its eBPF programs; this process lacks {0}. Run it as root (e.g. with sudo)."
    )]
    Capabilities(String),
    #[error(
        "exitprof runs in a user namespace of its own (a rootless container, `unshare --user`), \
         where the kernel refuses to load eBPF programs whatever capabilities the namespace \
         grants: run it on the host, or in a container that shares the host's user namespace \
         and has CAP_BPF and CAP_PERFMON (a PID namespace of its own is fine)"
    )]
    UserNamespace,
}

/// The initial user namespace's inode (`PROC_USER_INIT_INO`, include/linux/proc_ns.h).
const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;

/// Whether this process is in the initial user namespace, where capabilities can load BPF.
fn in_initial_user_namespace() -> bool {
    use std::os::linux::fs::MetadataExt as _;
    // Unreadable: assume the initial namespace; loading then says what is wrong.
    fs::metadata("/proc/self/ns/user").map_or(true, |ns| ns.st_ino() == PROC_USER_INIT_INO)
}

/// The effective capability set of this process, as a bit mask.
fn effective_capabilities() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Whether this process holds `cap` (and CAP_SYS_ADMIN, which implies most).
pub fn has_capability(cap: u32) -> bool {
    let caps = effective_capabilities();
    caps & (1 << cap) != 0 || caps & (1 << CAP_SYS_ADMIN) != 0
}

/// `error`, from attaching, with why where the kernel refused a perf event (`EACCES`) to a process
/// without CAP_SYS_ADMIN at a `kernel.perf_event_paranoid` above 2: the level Debian's and
/// Ubuntu's kernels add, and default to, which opens no perf event to any other process (CAP_PERFMON
/// is not enough). Kprobes, `syscalls:` tracepoints and the CPU sampler need perf events; fentry
/// and BTF tracepoints do not.
pub fn explain_perf_refusal(error: anyhow::Error) -> anyhow::Error {
    use aya::programs::ProgramError;
    let refused = |e: &std::io::Error| e.raw_os_error() == Some(libc::EACCES);
    let perf_refused = error.chain().any(|cause| {
        let aya = matches!(
            cause.downcast_ref::<ProgramError>(),
            Some(ProgramError::SyscallError(e)) if e.call.starts_with("perf_event_open") && refused(&e.io_error)
        );
        let kprobe = matches!(
            cause.downcast_ref::<KprobeEventError>(),
            Some(KprobeEventError::PerfOpen { source, .. }) if refused(source)
        );
        aya || kprobe
    });
    let paranoid: Option<i32> = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|level| level.trim().parse().ok());
    match paranoid {
        Some(level) if perf_refused && level > 2 && !has_capability(CAP_SYS_ADMIN) => error
            .context(format!(
                "the kernel opens no perf event to this process: kernel.perf_event_paranoid is \
                 {level}, at which Debian's and Ubuntu's kernels open them to CAP_SYS_ADMIN only \
                 (CAP_PERFMON is not enough). Kprobes, syscall tracepoints and CPU samples need \
                 them: use --attach fentry and --no-cpu-stacks, or set \
                 kernel.perf_event_paranoid=2, or run as root"
            )),
        _ => error,
    }
}

/// Fails with a message naming the missing capabilities, or the user namespace that withholds
/// them from BPF.
pub fn check() -> Result<(), MissingPrivilege> {
    if !in_initial_user_namespace() {
        return Err(MissingPrivilege::UserNamespace);
    }
    check_mask(effective_capabilities())
}

fn check_mask(caps: u64) -> Result<(), MissingPrivilege> {
    let has = |cap: u32| caps & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(cap, _)| !has(cap))
        .map(|(_, name)| name)
        .collect();
    Err(MissingPrivilege::Capabilities(missing.join(" and ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_is_missing() {
        assert!(check_mask(1 << CAP_SYS_ADMIN).is_ok());
        assert!(check_mask((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_ok());
        let missing = |caps| match check_mask(caps) {
            Err(MissingPrivilege::Capabilities(missing)) => missing,
            other => panic!("{other:?}"),
        };
        assert_eq!(missing(0), "CAP_BPF and CAP_PERFMON");
        assert_eq!(missing(1 << CAP_BPF), "CAP_PERFMON");
    }
}
