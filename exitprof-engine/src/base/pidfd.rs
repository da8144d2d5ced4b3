//! Process file descriptors: signalling and watching a process without racing pid reuse.

use std::{
    io,
    os::fd::{AsFd, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

use tokio::io::unix::AsyncFd;

/// A pidfd: it always names the process it was opened for, even once its pid is reused.
pub struct PidFd(OwnedFd);

impl PidFd {
    /// Opens a pidfd for `pid`, which must exist now (Linux 5.3+).
    pub fn open(pid: u32) -> io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just created and is owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Sends `signal`; a process that already ended is not an error.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        // SAFETY: pidfd_send_signal on our descriptor, no siginfo, no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        match rc {
            0 => Ok(()),
            _ => match io::Error::last_os_error() {
                e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                e => Err(e),
            },
        }
    }

    /// Resolves once the process has exited (a pidfd polls readable then).
    pub async fn exited(self) -> io::Result<()> {
        // SAFETY: the AsyncFd owns the descriptor, so it outlives its registration.
        let fd = unsafe { AsyncFd::register_with_interest(self.0, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        let _ready = fd.readable().await?;
        Ok(())
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
