//! Checks that exitprof may load eBPF programs, before anything else happens.

use std::fs;

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
