//! The socket between exitprof and a workload child: exitprof opens the child's gate through it
//! once its probes are attached, and the child sends its report back through it at the end.

use std::{
    io::{self, Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
        unix::net::UnixStream,
    },
};

use exitprof_core::profiled::workload::DriverReport;

/// exitprof's end of the channel.
pub struct ParentEnd(UnixStream);

/// The child's end, inherited across exec as a plain descriptor.
pub struct ChildEnd(UnixStream);

/// A connected pair; both ends close on exec until [`inheritable`] says otherwise for the child.
pub fn pair() -> io::Result<(ParentEnd, OwnedFd)> {
    let (parent, child) = UnixStream::pair()?;
    Ok((ParentEnd(parent), OwnedFd::from(child)))
}

/// Lets `fd` survive exec; for use between fork and exec (fcntl is async-signal-safe).
pub fn inheritable(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number, no memory involved.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl ParentEnd {
    /// Lets the child start its storm.
    pub fn open_gate(&mut self) -> io::Result<()> {
        self.0.write_all(b"g")
    }

    /// The child's report, once it has been reaped; `None` when it sent none (it was killed,
    /// failed, or became another program). Reads only what is there: a descendant that inherited
    /// the socket could keep it open.
    pub fn report(mut self) -> io::Result<Option<DriverReport>> {
        self.0.set_nonblocking(true)?;
        let mut text = Vec::new();
        match self.0.read_to_end(&mut text) {
            // A child killed before it read its gate: its socket closed with our byte unread.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        if text.is_empty() {
            return Ok(None);
        }
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

impl ChildEnd {
    /// Takes over the descriptor exitprof passed, and closes it on exec from now on.
    ///
    /// # Safety
    /// `fd` must be an open socket that nothing else in this process owns.
    pub unsafe fn from_raw_fd(fd: RawFd) -> io::Result<Self> {
        // SAFETY: the caller's promise.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        // SAFETY: fcntl on our own open descriptor.
        if unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(stream))
    }

    /// Blocks until exitprof opens the gate.
    pub fn wait_gate(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        if self.0.read(&mut byte)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "exitprof went away before the storm started",
            ));
        }
        Ok(())
    }

    pub fn send(mut self, report: &DriverReport) -> io::Result<()> {
        let text = serde_json::to_string(report).map_err(io::Error::other)?;
        self.0.write_all(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::IntoRawFd as _;

    use super::*;

    #[test]
    fn a_report_comes_back_whole() {
        let (mut parent, child) = pair().unwrap();
        // SAFETY: the descriptor was just created and is handed over whole.
        let mut child = unsafe { ChildEnd::from_raw_fd(child.into_raw_fd()) }.unwrap();
        parent.open_gate().unwrap();
        child.wait_gate().unwrap();
        let sent = DriverReport { created: 3, exited: 2, staggers_ns: vec![1_500] };
        child.send(&sent).unwrap();
        assert_eq!(parent.report().unwrap(), Some(sent));
    }

    #[test]
    fn a_child_gone_before_reading_its_gate_sent_no_report() {
        let (mut parent, child) = pair().unwrap();
        parent.open_gate().unwrap();
        // Closed with the gate's byte unread, as when the child is killed at the gate: the
        // kernel resets the connection.
        drop(child);
        assert_eq!(parent.report().unwrap(), None);
    }
}
