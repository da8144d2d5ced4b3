//! Workloads run in a child process, so that its user and sys time come from `wait4` rusage
//! exactly as `/usr/bin/time` measured them in the seeds.
//!
//! The child is exitprof itself, started with a hidden subcommand. It waits at a gate (a pipe)
//! until the parent has attached its probes and registered the child's pid, then runs the storm.

mod threads;

use std::{
    fs::File,
    io::{self, Read as _, Write as _},
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::cli::{ChildWorkload, RunArgs, WorkloadChild, WorkloadKind};

/// What a storm is expected to produce.
#[derive(Clone, Debug)]
pub struct Expectation {
    /// Exits the workload creates (not counting the driver process itself).
    pub exits: u64,
}

/// The expected exits of a run.
pub fn expectation(run: &RunArgs) -> Expectation {
    match run.workload {
        WorkloadKind::Threads => {
            Expectation { exits: u64::from(run.threads.threads) * u64::from(run.threads.reps) }
        }
    }
}

/// A workload child waiting at its gate.
pub struct GatedChild {
    pub pid: u32,
    gate: File,
}

/// A workload child that has been let through its gate.
#[derive(Clone, Copy)]
pub struct RunningChild {
    pub pid: u32,
    pub started: Instant,
}

/// How the workload child ended, as `wait4` reported it.
#[derive(Clone, Copy, Debug)]
pub struct ChildOutcome {
    /// Raw wait status.
    pub status: i32,
    pub user: Duration,
    pub sys: Duration,
    /// From the gate opening to the child being reaped.
    pub elapsed: Duration,
}

impl ChildOutcome {
    /// `None` when the child exited with status 0, else what happened to it.
    pub fn failure(&self) -> Option<String> {
        let s = self.status;
        if libc::WIFEXITED(s) {
            let code = libc::WEXITSTATUS(s);
            (code != 0).then(|| format!("exited with status {code}"))
        } else if libc::WIFSIGNALED(s) {
            Some(format!("was killed by signal {}", libc::WTERMSIG(s)))
        } else {
            Some(format!("ended with wait status {s:#x}"))
        }
    }
}

/// Starts the workload child; it waits at its gate until [`GatedChild::open`].
pub fn spawn(run: &RunArgs) -> anyhow::Result<GatedChild> {
    let (gate_read, gate_write) = pipe().context("creating the workload gate pipe")?;
    let exe = std::env::current_exe().context("locating exitprof's own executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("__workload").arg("--gate-fd").arg(gate_read.as_raw_fd().to_string());
    match run.workload {
        WorkloadKind::Threads => {
            let p = run.threads;
            cmd.args(["threads", "--threads", &p.threads.to_string()])
                .args(["--reps", &p.reps.to_string()])
                .args(["--stagger-us", &p.stagger_us.to_string()]);
        }
    }
    cmd.stdin(Stdio::null());
    let read_fd = gate_read.as_raw_fd();
    // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(read_fd, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().context("starting the workload child process")?;
    drop(gate_read);
    Ok(GatedChild { pid: child.id(), gate: File::from(gate_write) })
}

impl GatedChild {
    /// Lets the child start its storm.
    pub fn open(mut self) -> anyhow::Result<RunningChild> {
        let started = Instant::now();
        self.gate.write_all(b"g").context("opening the workload gate")?;
        Ok(RunningChild { pid: self.pid, started })
    }
}

impl RunningChild {
    /// Blocks until the child ends; reaps it.
    pub fn wait(&self) -> anyhow::Result<ChildOutcome> {
        let mut status = 0;
        // SAFETY: rusage is plain data, filled in by the kernel.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: valid pointers to locals; the pid is our own unreaped child.
            let rc = unsafe { libc::wait4(self.pid as i32, &mut status, 0, &mut usage) };
            if rc >= 0 {
                break;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err).context(format!("waiting for workload child {}", self.pid));
            }
        }
        let elapsed = self.started.elapsed();
        Ok(ChildOutcome {
            status,
            user: timeval(usage.ru_utime),
            sys: timeval(usage.ru_stime),
            elapsed,
        })
    }

    /// Kills the child (it is reaped by [`RunningChild::wait`]).
    pub fn kill(&self) {
        // SAFETY: signalling our own child, which stays unreaped until `wait`.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000)
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The child side: waits at the gate, then runs the storm. Returns the process exit code.
pub fn run_child(child: WorkloadChild) -> anyhow::Result<()> {
    if let Some(gate_fd) = child.gate_fd {
        // SAFETY: the parent passed us this descriptor, open and owned by nobody else here.
        let mut gate = unsafe { File::from_raw_fd(gate_fd) };
        let mut byte = [0u8; 1];
        if gate.read(&mut byte).context("waiting at the workload gate")? == 0 {
            bail!("exitprof went away before the storm started");
        }
    }
    match child.workload {
        ChildWorkload::Threads(params) => {
            threads::run(params).context("threads storm")?;
        }
    }
    Ok(())
}
