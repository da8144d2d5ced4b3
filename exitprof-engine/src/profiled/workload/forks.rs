//! The 2012 CLONE_NEWIPC thread's storm: a sequential loop of fork; the child (optionally)
//! unshares its IPC namespace, or its network namespace and fills it with devices, and exits;
//! the parent waits for it before the next fork.

use std::io;

use super::{
    DriverReport,
    netns::{FailurePipe, Requests, unshare_and_fill},
};

/// What each forked child does before it exits.
#[derive(Clone, Copy)]
pub enum Child<'a> {
    /// Exits at once (`fork`).
    Exit,
    /// `unshare(CLONE_NEWIPC)`, then exits (`ipcns`): its exit tears a fresh IPC namespace down.
    NewIpcNamespace,
    /// `unshare(CLONE_NEWNET)`, makes the devices of the requests, then exits (`netns`): its
    /// exit leaves the namespace to `cleanup_net`.
    NewNetNamespace(&'a Requests),
}

/// Runs `count` forks, one after the other, in the calling process.
pub fn run(count: u32, child: Child<'_>) -> io::Result<DriverReport> {
    let mut report = DriverReport::default();
    let pipe = matches!(child, Child::NewNetNamespace(_)).then(FailurePipe::new).transpose()?;
    for _ in 0..count {
        // SAFETY: the child only makes async-signal-safe calls (unshare, socket, send, recv,
        // write, _exit), so forking is sound even if this process had other threads.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            in_child(child, pipe.as_ref());
        }
        if pid < 0 {
            let err = io::Error::last_os_error();
            return Err(io::Error::new(
                err.kind(),
                format!("fork failed after {} children: {err}", report.created),
            ));
        }
        report.created += 1;
        let status = wait(pid)?;
        report.exited += 1;
        if status != 0 {
            if let Some(failure) = pipe.as_ref().and_then(FailurePipe::take) {
                return Err(io::Error::other(failure.describe()));
            }
            return Err(child_failure(child, status));
        }
    }
    Ok(report)
}

/// The forked child: never returns. It reports a failed unshare through its exit status (the
/// errno), or its pipe, the only channels an async-signal-safe child has.
fn in_child(child: Child<'_>, pipe: Option<&FailurePipe>) -> ! {
    let mut code = 0;
    match child {
        Child::Exit => {}
        // SAFETY: unshare touches no memory of ours.
        Child::NewIpcNamespace => unsafe {
            if libc::unshare(libc::CLONE_NEWIPC) != 0 {
                code = *libc::__errno_location();
            }
        },
        Child::NewNetNamespace(requests) => {
            if let Err(failure) = unshare_and_fill(requests) {
                if let Some(pipe) = pipe {
                    pipe.report(failure);
                }
                code = 1;
            }
        }
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(code) }
}

/// Waits for our child `pid`; returns its wait status.
fn wait(pid: libc::pid_t) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: a valid pointer to a local; `pid` is our own unreaped child.
        if unsafe { libc::waitpid(pid, &raw mut status, 0) } >= 0 {
            return Ok(status);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn child_failure(child: Child<'_>, status: i32) -> io::Error {
    if matches!(child, Child::NewIpcNamespace) && libc::WIFEXITED(status) {
        let errno = io::Error::from_raw_os_error(libc::WEXITSTATUS(status));
        return io::Error::new(
            errno.kind(),
            format!(
                "unshare(CLONE_NEWIPC) failed in a forked child: {errno} (it needs CAP_SYS_ADMIN)"
            ),
        );
    }
    io::Error::other(format!("a forked child ended with wait status {status:#x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_child_is_forked_and_waited_for() {
        let report = run(5, Child::Exit).unwrap();
        assert_eq!((report.created, report.exited), (5, 5));
    }
}
