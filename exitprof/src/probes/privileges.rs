//! Checks that exitprof may load eBPF programs, before anything else happens.

use std::fs;

/// Capability numbers (include/uapi/linux/capability.h).
pub const CAP_SYS_RESOURCE: u32 = 24;
pub const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Debug, thiserror::Error)]
#[error(
    "exitprof needs root, or the capabilities CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), to load \
     its eBPF programs; this process lacks {missing}. Run it as root (e.g. with sudo)."
)]
pub struct MissingPrivilege {
    pub missing: String,
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

/// Fails with a message naming the missing capabilities.
pub fn check() -> Result<(), MissingPrivilege> {
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
    Err(MissingPrivilege { missing: missing.join(" and ") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_is_missing() {
        assert!(check_mask(1 << CAP_SYS_ADMIN).is_ok());
        assert!(check_mask((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_ok());
        assert_eq!(check_mask(0).unwrap_err().missing, "CAP_BPF and CAP_PERFMON");
        assert_eq!(check_mask(1 << CAP_BPF).unwrap_err().missing, "CAP_PERFMON");
    }
}
