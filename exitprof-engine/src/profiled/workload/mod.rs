//! Workloads run in child processes, so that their user and sys time come from `wait4` rusage
//! exactly as `/usr/bin/time` measured them in the 2006 and 2012 LKML threads that exitprof's
//! storms come from.
//!
//! A child is exitprof itself, started with a hidden subcommand. It waits at a gate until the
//! parent has attached its probes and registered the child's pid, then runs its storm — or, for
//! `-- CMD`, executes CMD in place, keeping its pid. `--parallel P` starts P such children.
//!
//! Each child leads a process group of its own, so that stopping the workload (Ctrl-C, SIGTERM)
//! stops everything it started: a driver's fork in flight, the processes a command runs. The
//! exception is a command started from a terminal, which stays in the terminal's foreground
//! group so that it can read it (and Ctrl-C reaches it and its descendants from the terminal).

pub mod channel;
pub mod command;
mod default_stack;
mod forks;
pub mod limits;
mod netns;
mod pacer;
pub mod threads;

use std::{
    ffi::OsString,
    io::{self, IsTerminal as _},
    os::{
        fd::{AsFd as _, AsRawFd as _},
        unix::process::CommandExt as _,
    },
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;

pub use exitprof_core::profiled::workload::{ChildOutcome, DriverReport, Workload, exit_rate};

use self::channel::{ChildEnd, ParentEnd};
use crate::{
    base::{pidfd::PidFd, signals},
    profiled::{ForkParams, Storm, ThreadsParams},
};

/// The `__workload` argument lists, one per child process.
fn child_args(workload: &Workload) -> Vec<Vec<OsString>> {
    let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
    match workload {
        Workload::Storm(Storm::Threads(ThreadsParams { threads, reps, stagger_us, rate })) => {
            let mut a = args(&["threads", "--threads", &threads.to_string()]);
            a.extend(args(&["--reps", &reps.to_string()]));
            a.extend(match rate {
                Some(rate) => args(&["--rate", &rate.to_string()]),
                None => args(&["--stagger-us", &stagger_us.to_string()]),
            });
            vec![a]
        }
        Workload::Storm(Storm::Fork(f)) => fork_loops(*f, "fork", &args),
        Workload::Storm(Storm::Ipcns(f)) => fork_loops(*f, "ipcns", &args),
        Workload::Storm(Storm::Netns(n)) => {
            let mut loops = fork_loops(n.forks, "netns", &args);
            for a in &mut loops {
                a.extend(args(&["--veth-pairs", &n.veth_pairs.to_string()]));
            }
            loops
        }
        Workload::Command { program, argv } => {
            let mut a = args(&["exec", "--program"]);
            a.push(program.clone().into());
            a.push("--".into());
            a.extend(argv.iter().cloned());
            vec![a]
        }
    }
}

/// `--count` shared out over `--parallel` loops (the first ones take the remainder); loops that
/// would fork nothing are not started.
fn fork_loops(
    f: ForkParams,
    kind: &str,
    args: &dyn Fn(&[&str]) -> Vec<OsString>,
) -> Vec<Vec<OsString>> {
    split(f.count, f.parallel)
        .into_iter()
        .map(|count| args(&[kind, "--count", &count.to_string()]))
        .collect()
}

fn split(count: u32, parts: u32) -> Vec<u32> {
    (0..parts.min(count)).map(|i| count / parts + u32::from(i < count % parts)).collect()
}

/// Workload children waiting at their gates.
pub struct Gated {
    children: Vec<Child>,
}

struct Child {
    pid: u32,
    stop: Stoppable,
    channel: ParentEnd,
}

/// What stopping a workload child kills.
struct Stoppable {
    pidfd: PidFd,
    /// The child's pid when it leads a process group of its own.
    group: Option<u32>,
}

/// Workload children let through their gates.
pub struct Running {
    children: Vec<(u32, ParentEnd)>,
    killer: Killer,
    started: Instant,
}

/// Kills the workload's children and their process groups from anywhere, safely after they were
/// reaped too.
#[derive(Clone)]
pub struct Killer(Arc<Vec<Stoppable>>);

/// `None` when every workload child exited with status 0, else what happened to the first that did
/// not.
pub fn failure(outcome: &ChildOutcome) -> Option<String> {
    outcome.statuses.iter().find_map(|&(_, s)| {
        if libc::WIFEXITED(s) {
            let code = libc::WEXITSTATUS(s);
            (code != 0).then(|| format!("exited with status {code}"))
        } else if libc::WIFSIGNALED(s) {
            let core = if libc::WCOREDUMP(s) { ", core dumped" } else { "" };
            Some(format!("was killed by {}{core}", signals::describe(libc::WTERMSIG(s))))
        } else {
            Some(format!("ended with wait status {s:#x}"))
        }
    })
}

/// Starts the workload's children; they wait at their gates until [`Gated::open`]. With
/// `quiet_stdout`, a command's stdout goes to stderr (stdout carries exitprof's JSON).
pub fn spawn(workload: &Workload, quiet_stdout: bool) -> anyhow::Result<Gated> {
    let exe = std::env::current_exe().context("locating exitprof's own executable")?;
    let mut children = Vec::new();
    for args in child_args(workload) {
        let (channel, child_end) = channel::pair().context("creating the workload channel")?;
        let child_fd = child_end.as_raw_fd();
        let mut cmd = Command::new(&exe);
        cmd.arg("__workload").arg("--channel-fd").arg(child_fd.to_string()).args(args);
        let own_group = match workload {
            Workload::Storm(_) => true,
            Workload::Command { .. } => !io::stdin().is_terminal(),
        };
        if own_group {
            cmd.process_group(0);
        }
        match workload {
            Workload::Storm(_) => {
                cmd.stdin(Stdio::null());
            }
            Workload::Command { .. } if quiet_stdout => {
                let stderr =
                    io::stderr().as_fd().try_clone_to_owned().context("duplicating stderr")?;
                cmd.stdout(stderr);
            }
            Workload::Command { .. } => {}
        }
        // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || channel::inheritable(child_fd));
        }
        let child = cmd.spawn().context("starting a workload child process")?;
        let pid = child.id();
        let pidfd =
            PidFd::open(pid).with_context(|| format!("pidfd_open of workload child {pid}"))?;
        let stop = Stoppable { pidfd, group: own_group.then_some(pid) };
        children.push(Child { pid, stop, channel });
    }
    Ok(Gated { children })
}

impl Gated {
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.pid).collect()
    }

    /// Lets every child start.
    pub fn open(self) -> anyhow::Result<Running> {
        let started = Instant::now();
        let mut children = Vec::with_capacity(self.children.len());
        let mut stops = Vec::with_capacity(self.children.len());
        for Child { pid, stop, mut channel } in self.children {
            channel
                .open_gate()
                .with_context(|| format!("opening the gate of workload child {pid}"))?;
            children.push((pid, channel));
            stops.push(stop);
        }
        Ok(Running { children, killer: Killer(Arc::new(stops)), started })
    }
}

impl Running {
    pub fn killer(&self) -> Killer {
        self.killer.clone()
    }

    /// Blocks until every child has ended; reaps them.
    pub fn wait(self) -> anyhow::Result<ChildOutcome> {
        let mut outcome = ChildOutcome {
            statuses: Vec::new(),
            user: Duration::ZERO,
            sys: Duration::ZERO,
            elapsed: Duration::ZERO,
            report: Some(DriverReport::default()),
        };
        let mut channels = Vec::new();
        for (pid, channel) in self.children {
            let (status, usage) = wait4(pid)?;
            outcome.statuses.push((pid, status));
            outcome.user += timeval(usage.ru_utime);
            outcome.sys += timeval(usage.ru_stime);
            channels.push(channel);
        }
        outcome.elapsed = self.started.elapsed();
        for channel in channels {
            let report = channel.report().context("reading a workload driver's report")?;
            outcome.report = match (outcome.report, report) {
                (Some(total), Some(r)) => Some(total.plus(r)),
                _ => None,
            };
        }
        Ok(outcome)
    }
}

impl Killer {
    /// SIGKILL to every child and to everything in its process group.
    pub fn kill(&self) {
        for Stoppable { pidfd, group } in self.0.iter() {
            if let Some(pgid) = group {
                // The group's id stays taken while the group has a member or its leader is
                // unreaped, so this reaches no other group.
                // SAFETY: kill takes plain integers.
                if unsafe { libc::kill(-(*pgid as libc::pid_t), libc::SIGKILL) } != 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        log::warn!("could not kill the process group {pgid} of the workload: {e}");
                    }
                }
            }
            if let Err(e) = pidfd.signal(libc::SIGKILL) {
                log::warn!("could not kill a workload child: {e}");
            }
        }
    }
}

/// Reaps our child `pid`; its wait status and rusage.
fn wait4(pid: u32) -> anyhow::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to locals; the pid is our own unreaped child.
        if unsafe { libc::wait4(pid as i32, &raw mut status, 0, &raw mut usage) } >= 0 {
            return Ok((status, usage));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err).context(format!("waiting for workload child {pid}"));
        }
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000)
}

/// What one workload child runs once its gate opens.
#[derive(Debug)]
pub enum Driver {
    Threads(ThreadsParams),
    /// A sequential fork loop of `count` children that exit at once.
    Fork {
        count: u32,
    },
    /// A sequential fork loop of `count` children that unshare their IPC namespace and exit.
    Ipcns {
        count: u32,
    },
    /// A sequential fork loop of `count` children that unshare their network namespace, make
    /// `veth_pairs` veth pairs in it and exit.
    Netns {
        count: u32,
        veth_pairs: u32,
    },
    /// Executes `program` in place of the child, keeping its pid; `argv` is the command line
    /// as given, CMD first.
    Exec {
        program: OsString,
        argv: Vec<OsString>,
    },
}

/// The child side: waits at the gate (the socket `channel_fd`, when exitprof passed one), then
/// runs the storm or becomes the command.
pub fn run_child(channel_fd: Option<i32>, driver: Driver) -> anyhow::Result<()> {
    let mut channel = match channel_fd {
        // SAFETY: exitprof passed this socket to us alone.
        Some(fd) => Some(unsafe { ChildEnd::from_raw_fd(fd) }.context("the workload channel")?),
        None => None,
    };
    if let Some(channel) = &mut channel {
        channel.wait_gate().context("waiting at the workload gate")?;
    }
    let report = match driver {
        Driver::Threads(params) => threads::run(params).context("threads storm")?,
        Driver::Fork { count } => forks::run(count, forks::Child::Exit).context("fork storm")?,
        Driver::Ipcns { count } => {
            forks::run(count, forks::Child::NewIpcNamespace).context("ipcns storm")?
        }
        Driver::Netns { count, veth_pairs } => {
            let requests = netns::Requests::veth_pairs(veth_pairs);
            forks::run(count, forks::Child::NewNetNamespace(&requests)).context("netns storm")?
        }
        Driver::Exec { program, argv } => {
            drop(channel);
            let err = command::exec(program.as_ref(), &argv);
            return Err(err).with_context(|| format!("executing {}", program.display()));
        }
    };
    if let Some(channel) = channel {
        channel.send(&report).context("sending the storm's report")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiled::NetnsParams;

    #[test]
    fn counts_are_shared_out() {
        assert_eq!(split(1024, 1), [1024]);
        assert_eq!(split(10, 3), [4, 3, 3]);
        assert_eq!(split(2, 4), [1, 1]);
    }

    #[test]
    fn children_get_their_share() {
        let w = Workload::Storm(Storm::Ipcns(ForkParams { count: 5, parallel: 2 }));
        assert_eq!(w.expected_exits(), Some(5));
        let args = child_args(&w);
        assert_eq!(args, [["ipcns", "--count", "3"], ["ipcns", "--count", "2"]]);
        let forks = ForkParams { count: 3, parallel: 2 };
        let w = Workload::Storm(Storm::Netns(NetnsParams { forks, veth_pairs: 8 }));
        assert_eq!(
            child_args(&w),
            [
                ["netns", "--count", "2", "--veth-pairs", "8"],
                ["netns", "--count", "1", "--veth-pairs", "8"]
            ]
        );
        let w =
            Workload::Command { program: "/bin/sh".into(), argv: vec!["sh".into(), "-c".into()] };
        assert_eq!(w.expected_exits(), None);
        assert_eq!(child_args(&w), [["exec", "--program", "/bin/sh", "--", "sh", "-c"]]);
        let rate = ThreadsParams { threads: 4, reps: 2, stagger_us: 2, rate: Some(100) };
        let args = child_args(&Workload::Storm(Storm::Threads(rate)));
        assert_eq!(args, [["threads", "--threads", "4", "--reps", "2", "--rate", "100"]]);
    }
}
