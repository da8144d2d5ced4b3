//! The cgroups made and removed while exitprof runs, named for the exits in them: an exit
//! record carries its cgroup's id only, and a short-lived cgroup (a container's) is often gone
//! before userspace could look its path up.

/// Bytes of a cgroup's path kept, its NUL included (a Kubernetes container's is some 170).
pub const CGROUP_PATH_LEN: usize = 240;

/// What happened to the cgroup of a [`CgroupRecord`].
pub const CGROUP_MADE: u32 = 1;
pub const CGROUP_REMOVED: u32 = 2;

/// A cgroup of the v2 hierarchy made (`cgroup:cgroup_mkdir`) or removed (`cgroup:cgroup_rmdir`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgroupRecord {
    /// Its id: the inode number of its directory, as exit records carry it.
    pub id: u64,
    /// `CGROUP_MADE` or `CGROUP_REMOVED`.
    pub event: u32,
    pub reserved: u32,
    /// Its path from the hierarchy's root, NUL-terminated (cut short past `CGROUP_PATH_LEN`).
    pub path: [u8; CGROUP_PATH_LEN],
}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers and bytes without padding; any bit pattern is valid.
unsafe impl aya::Pod for CgroupRecord {}

const _: () = assert!(size_of::<CgroupRecord>() == 16 + CGROUP_PATH_LEN);
