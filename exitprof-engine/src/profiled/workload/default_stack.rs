//! The stack size of the threads storm's threads: glibc's default, which the program of the 2006
//! LKML benchmark of taskstats' cost per exit had, whichever libc exitprof is linked against.
//! musl (the static binary) gives threads 128 KiB where glibc takes `RLIMIT_STACK` (8 MiB), and
//! the size changes the storm: that program under `ulimit -s 128` spends 0.85 times the system
//! time.

use std::{io, mem::MaybeUninit};

/// glibc's `ARCH_STACK_DEFAULT_SIZE` on x86_64: its default when `RLIMIT_STACK` is unlimited.
const UNLIMITED_DEFAULT: u64 = 32 << 20;

/// The stack size glibc gives a thread with default attributes (nptl's
/// `__pthread_initialize_minimal`): `RLIMIT_STACK`'s soft limit, or 32 MiB when it is
/// unlimited, at least `PTHREAD_STACK_MIN`, in whole pages.
pub fn bytes() -> io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid pointer to a local rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &raw mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let size =
        if limit.rlim_cur == libc::RLIM_INFINITY { UNLIMITED_DEFAULT } else { limit.rlim_cur };
    // In whole pages of the machine's size: 4 KiB on x86_64, 4, 16 or 64 KiB on arm64.
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    Ok(size.max(libc::PTHREAD_STACK_MIN as u64).next_multiple_of(page.max(1)))
}

/// Thread attributes with [`bytes`] of stack, destroyed when dropped.
pub struct DefaultStackAttributes(libc::pthread_attr_t);

impl DefaultStackAttributes {
    pub fn new() -> io::Result<Self> {
        let mut attr = MaybeUninit::uninit();
        // SAFETY: pthread_attr_init initialises the attributes it is given.
        let rc = unsafe { libc::pthread_attr_init(attr.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: initialised just above.
        let mut attributes = Self(unsafe { attr.assume_init() });
        // SAFETY: initialised attributes; the size is at least PTHREAD_STACK_MIN.
        let rc =
            unsafe { libc::pthread_attr_setstacksize(&raw mut attributes.0, bytes()? as usize) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(attributes)
    }

    pub fn as_ptr(&self) -> *const libc::pthread_attr_t {
        &raw const self.0
    }
}

impl Drop for DefaultStackAttributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::pthread_attr_destroy(&raw mut self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_glibcs_default() {
        // The unit tests are linked against glibc: its own default is the oracle.
        let mut attr = MaybeUninit::uninit();
        let mut default = 0;
        // SAFETY: initialised before it is read, destroyed after.
        unsafe {
            assert_eq!(libc::pthread_attr_init(attr.as_mut_ptr()), 0);
            assert_eq!(libc::pthread_attr_getstacksize(attr.as_ptr(), &raw mut default), 0);
            libc::pthread_attr_destroy(attr.as_mut_ptr());
        }
        assert_eq!(bytes().unwrap(), default as u64);
        let mut size = 0;
        let attrs = DefaultStackAttributes::new().unwrap();
        // SAFETY: initialised attributes.
        assert_eq!(unsafe { libc::pthread_attr_getstacksize(attrs.as_ptr(), &raw mut size) }, 0);
        assert_eq!(size, default);
    }
}
