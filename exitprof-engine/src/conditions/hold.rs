//! `exitprof __condition NAME on|off [-- COMMAND...]`: holds one side of a condition while a
//! command runs, or until SIGINT or SIGTERM, then restores it and prints what it saw as one
//! JSON line (after the command's own output). Hidden: the integration tests drive the
//! conditions through it.

use anyhow::Context as _;
use serde::Serialize;

use crate::{
    base::signals::{Signals, signal_name},
    conditions::{Condition, ConditionOptions, Side, taskstats_listener::ListenerCounts},
};

#[derive(Debug, Serialize)]
struct HoldReport {
    condition: Condition,
    side: Side,
    probes_attached: bool,
    /// The command, when there was one.
    child: Option<ChildReport>,
    /// The signal that ended the hold, if one did.
    interrupted: Option<i32>,
    listener: Option<ListenerCounts>,
}

#[derive(Debug, Serialize)]
struct ChildReport {
    pid: u32,
    /// `None` when a signal ended it.
    exit_code: Option<i32>,
}

/// Holds `side` of `condition` while `command` runs (none: until SIGINT or SIGTERM).
pub fn run(
    condition: Condition,
    side: Side,
    options: ConditionOptions,
    command: &[String],
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = runtime.block_on(hold(condition, side, options, command))?;
    println!("{}", serde_json::to_string(&report)?);
    if let Some(signal) = report.interrupted {
        std::process::exit(128 + signal);
    }
    match report.child.map(|child| child.exit_code) {
        None | Some(Some(0)) => Ok(()),
        Some(Some(code)) => anyhow::bail!("the command exited with status {code}"),
        Some(None) => anyhow::bail!("the command was killed by a signal"),
    }
}

async fn hold(
    condition: Condition,
    side: Side,
    options: ConditionOptions,
    command: &[String],
) -> anyhow::Result<HoldReport> {
    // Before the condition is set: from here on a signal ends the hold by the normal path.
    let mut signals = Signals::new()?;
    let what = format!("{} {}", condition.name(), if side == Side::On { "on" } else { "off" });
    let guard = super::set(condition, side, options).with_context(|| format!("setting {what}"))?;
    let mut interrupted = None;
    let child = match command.split_first() {
        Some((program, rest)) => {
            let mut child = tokio::process::Command::new(program)
                .args(rest)
                .spawn()
                .with_context(|| format!("starting {program}"))?;
            let pid = child.id().context("the command has no pid")?;
            let exit_code = tokio::select! {
                status = child.wait() => status.with_context(|| format!("waiting for {program}"))?.code(),
                signal = signals.next() => {
                    interrupted = Some(signal);
                    child.kill().await.with_context(|| format!("killing {program}"))?;
                    None
                }
            };
            Some(ChildReport { pid, exit_code })
        }
        None => {
            interrupted = Some(signals.next().await);
            None
        }
    };
    if let Some(signal) = interrupted {
        eprintln!("exitprof: {}: restoring {what}", signal_name(signal));
    }
    let probes_attached = guard.probes_attached();
    let restored = guard.restore().with_context(|| format!("restoring {what}"))?;
    Ok(HoldReport {
        condition,
        side,
        probes_attached,
        child,
        interrupted,
        listener: restored.listener,
    })
}
