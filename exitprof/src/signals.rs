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
