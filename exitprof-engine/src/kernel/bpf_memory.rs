//! Where the running kernel charges the memory of BPF maps and programs. Before Linux 5.11 it
//! charges them to the locked memory of the user that makes them (`user->locked_vm`, summed over
//! all of that user's processes), against the RLIMIT_MEMLOCK of the process making one, and
//! refuses a map or program past that limit with `EPERM`; since 5.11 it charges the memory
//! cgroup instead, and the limit no longer applies (the "bpf: switch to memcg-based memory
//! accounting" series).
//!
//! Asked of the kernel, not read from its version (distributions backport BPF): a one-entry map
//! made while this process may lock nothing is refused only where maps are charged to the limit.

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

/// Where the running kernel charges the memory of BPF maps and programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BpfMemory {
    /// To the locked memory of their user, against RLIMIT_MEMLOCK (before 5.11).
    Memlock,
    /// To the memory cgroup (5.11 and later).
    MemoryCgroup,
}

impl BpfMemory {
    /// Asks the kernel: makes a one-entry array map while this process's RLIMIT_MEMLOCK is 0
    /// (lowering one's own soft limit needs no privilege), then puts the limit back. (Not
    /// through aya, which raises the limit and tries again where a map is refused.)
    pub fn of_running_kernel() -> io::Result<Self> {
        let limit = MemlockLimit::read()?;
        MemlockLimit { soft: 0, hard: limit.hard }.set()?;
        let made = create_smallest_map();
        limit.set()?;
        match made {
            Ok(_) => Ok(Self::MemoryCgroup),
            // With CAP_BPF (checked before), a map this small is refused for its charge alone.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(Self::Memlock),
            Err(e) => Err(e),
        }
    }
}

/// Makes the smallest array map there is; closed when dropped.
fn create_smallest_map() -> io::Result<OwnedFd> {
    /// `union bpf_attr` for `BPF_MAP_CREATE` up to the flags: the kernel takes the union cut
    /// short, the rest zero.
    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }
    /// `BPF_MAP_CREATE` and `BPF_MAP_TYPE_ARRAY` (include/uapi/linux/bpf.h).
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    let attr = MapCreate {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: 8,
        max_entries: 1,
        map_flags: 0,
    };
    // SAFETY: BPF_MAP_CREATE reads `size` bytes of a valid attr.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, &raw const attr, size_of::<MapCreate>())
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: a descriptor the kernel just made for this process, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// This process's RLIMIT_MEMLOCK, in bytes (`libc::RLIM_INFINITY`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemlockLimit {
    pub soft: u64,
    pub hard: u64,
}

impl MemlockLimit {
    pub fn read() -> io::Result<Self> {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: a valid rlimit to fill.
        if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { soft: limit.rlim_cur, hard: limit.rlim_max })
    }

    /// Sets it: lowering either is always allowed, raising the hard limit needs
    /// CAP_SYS_RESOURCE.
    pub fn set(self) -> io::Result<()> {
        let limit = libc::rlimit { rlim_cur: self.soft, rlim_max: self.hard };
        // SAFETY: a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
