//! SIGINT and SIGTERM, handled so that a run ends through its normal path: it reports what it
//! has and drops its guards (probes, conditions) instead of dying where it stands.

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGINT and SIGTERM, handled from [`Signals::new`] on.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    /// Handles both signals from now on.
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("handling SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
        })
    }

    /// The next signal's number.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    if signal == libc::SIGINT { "interrupted (SIGINT)" } else { "terminated (SIGTERM)" }
}

/// The name of a signal, `SIGSEGV (signal 11)`, as a report says it.
pub fn describe(signal: i32) -> String {
    // The standard signals' numbers on Linux (x86 and most architectures); real-time signals
    // have numbers only.
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match usize::try_from(signal).ok().and_then(|n| NAMES.get(n.wrapping_sub(1))) {
        Some(name) => format!("{name} (signal {signal})"),
        None => format!("signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_as_libc_numbers_them() {
        for (signal, name) in [
            (libc::SIGINT, "SIGINT"),
            (libc::SIGKILL, "SIGKILL"),
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGTERM, "SIGTERM"),
            (libc::SIGSYS, "SIGSYS"),
        ] {
            assert_eq!(describe(signal), format!("{name} (signal {signal})"));
        }
        assert_eq!(describe(0), "signal 0");
        assert_eq!(describe(libc::SIGRTMIN()), format!("signal {}", libc::SIGRTMIN()));
    }
}
