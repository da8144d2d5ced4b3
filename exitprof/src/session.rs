//! What one run collects: every record from the kernel, folded as it arrives, leaving out what
//! is not part of the target.

use crate::{
    collect::decode_deferred, deferred::DeferredWork, exits::Exit, plan::Plan, profile::Profile,
};

/// The records of one run, folded into the profile and the deferred-work joins.
pub struct Session {
    pub profile: Profile,
    pub deferred: DeferredWork,
    /// Records that could not be decoded.
    pub undecodable: u64,
    pub exclusion: Exclusion,
    /// Exits that start after this are outside the run (CLOCK_MONOTONIC ns).
    pub stop_ns: u64,
}

/// Exits that are never part of a target. (A storm driver's own exit is left out in the
/// kernel: see `exitprof_common::tracked::DRIVER`.)
#[derive(Clone)]
pub struct Exclusion {
    /// exitprof's own process (seen with --all).
    pub own_tgid: u32,
}

impl Exclusion {
    pub fn excludes(&self, tgid: u32) -> bool {
        tgid == self.own_tgid
    }
}

impl Session {
    pub fn new(plan: &Plan) -> Self {
        Self {
            profile: Profile::new(plan),
            deferred: DeferredWork::new(plan.sees_every_ipc_ns_free(), plan.measures_rcu_wait()),
            undecodable: 0,
            exclusion: Exclusion { own_tgid: std::process::id() },
            stop_ns: u64::MAX,
        }
    }

    /// One exit record.
    pub fn exit_record(&mut self, bytes: &[u8]) {
        match Exit::decode(bytes) {
            Ok(exit) if self.exclusion.excludes(exit.tgid) => {
                log::trace!("excluded exit of {}/{}: {:?}", exit.tgid, exit.pid, exit.hits);
            }
            Ok(exit) if exit.hits.first().is_some_and(|h| h.ts_ns > self.stop_ns) => {}
            Ok(exit) => {
                log::trace!("exit of {}/{}: {:?}", exit.tgid, exit.pid, exit.hits);
                self.profile.add(&exit);
                self.deferred.exit(&exit);
            }
            Err(e) => {
                self.undecodable += 1;
                log::warn!("undecodable exit record: {e}");
            }
        }
    }

    /// One deferred-work record.
    pub fn deferred_record(&mut self, bytes: &[u8]) {
        match decode_deferred(bytes) {
            Some(record) => self.deferred.record(&record),
            None => {
                self.undecodable += 1;
                log::warn!("undecodable deferred-work record of {} bytes", bytes.len());
            }
        }
    }
}
