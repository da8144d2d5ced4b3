//! Conditions for A/B runs: things exitprof switches on or off around a workload to compare its
//! exits with and without them, like the 2006 taskstats thread's Yes/No/Ovhd table.
//!
//! [`set`] puts one [`Side`] in place and returns a [`ConditionGuard`], which
//! restores what was there before: explicitly with [`ConditionGuard::restore`] (which reports
//! failures and what the side measured), or when it is dropped — at the end of a scope, on an
//! early `?` return, or while a panic unwinds. Guards are `Send`: a caller can hold them across
//! an async run.
//!
//! Signals: SIGINT and SIGTERM end a process without running destructors unless it handles
//! them. A caller installs its handlers ([`crate::base::signals::Signals`]) *before* it sets a
//! condition and ends its run normally on a signal, so that its guards are dropped. SIGKILL
//! cannot be handled: a killed run leaves `kernel.task_delayacct` changed, and the next run that
//! sets it finds the original value on record and restores it (see [`delayacct`]); its taskstats
//! listener goes with its socket (the kernel drops a listener whose socket is closed at the next
//! exit it would have sent it).
//!
//! `hold` is the hidden `__condition` command. Of the rest of exitprof, conditions use only
//! `base`'s signal handling: a condition is set and restored the same whether probes are
//! attached or not.

pub mod delayacct;
pub mod hold;
pub mod taskstats_listener;

pub use exitprof_core::conditions::{Condition, Side};
use serde::Serialize;

use self::{
    delayacct::{DelayacctError, DelayacctGuard},
    taskstats_listener::{Listener, ListenerCounts, ListenerError},
};

/// Settings of the conditions.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConditionOptions {
    /// Receive buffer of exitprof's taskstats listener socket, in bytes; `None`: the system's
    /// default (net.core.rmem_default).
    pub rcvbuf: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConditionError {
    #[error("taskstats listener: {0}")]
    Listener(ListenerError),
    #[error("delayacct: {0}")]
    Delayacct(DelayacctError),
}

/// Puts `side` of `condition` in place until the returned guard restores what was there.
pub fn set(
    condition: Condition,
    side: Side,
    options: ConditionOptions,
) -> Result<ConditionGuard, ConditionError> {
    let held = match (condition, side) {
        (Condition::TaskstatsListener, Side::On) => {
            Held::Listener(Listener::start(options.rcvbuf).map_err(ConditionError::Listener)?)
        }
        (Condition::Delayacct, side) => {
            Held::Delayacct(delayacct::set(side == Side::On).map_err(ConditionError::Delayacct)?)
        }
        // Off means no listener of exitprof's; other programs' listeners are theirs. The
        // runner attaches its probes or not, as `probes_attached` says, and which ones.
        (Condition::TaskstatsListener, Side::Off)
        | (Condition::Probes | Condition::PointSet, _) => Held::Nothing,
    };
    Ok(ConditionGuard { condition, side, held: Some(held) })
}

/// One side of a condition, in place until restored or dropped.
#[must_use = "dropping the guard restores the condition at once"]
pub struct ConditionGuard {
    condition: Condition,
    side: Side,
    /// `None` once restored.
    held: Option<Held>,
}

/// What a side holds that must be given back.
enum Held {
    Listener(Listener),
    Delayacct(DelayacctGuard),
    Nothing,
}

/// What a side measured while it was in place.
#[derive(Debug, Default, Serialize)]
pub struct Restored {
    /// The taskstats listener's counts, when this side ran one.
    pub listener: Option<ListenerCounts>,
}

impl ConditionGuard {
    /// Whether the runner attaches its probes under this side: always, except `probes off`.
    pub fn probes_attached(&self) -> bool {
        !(self.condition == Condition::Probes && self.side == Side::Off)
    }

    /// Restores what was there before the side was set.
    pub fn restore(mut self) -> Result<Restored, ConditionError> {
        self.held.take().map_or(Ok(Restored::default()), Held::restore)
    }
}

impl Held {
    fn restore(self) -> Result<Restored, ConditionError> {
        match self {
            Held::Listener(listener) => {
                let counts = listener.stop().map_err(ConditionError::Listener)?;
                Ok(Restored { listener: Some(counts) })
            }
            Held::Delayacct(guard) => {
                guard.restore().map_err(ConditionError::Delayacct)?;
                Ok(Restored::default())
            }
            Held::Nothing => Ok(Restored::default()),
        }
    }
}

impl Drop for ConditionGuard {
    fn drop(&mut self) {
        if let Some(held) = self.held.take()
            && let Err(e) = held.restore()
        {
            log::error!("could not restore {}: {e}", self.condition.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_probes_off_detaches_the_probes() {
        let options = ConditionOptions::default();
        for side in [Side::On, Side::Off] {
            let guard = set(Condition::Probes, side, options).unwrap();
            assert_eq!(guard.probes_attached(), side == Side::On);
        }
        let guard = set(Condition::TaskstatsListener, Side::Off, options).unwrap();
        assert!(guard.probes_attached());
        assert!(guard.restore().unwrap().listener.is_none());
    }
}
