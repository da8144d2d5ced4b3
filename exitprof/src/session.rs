//! What one run collects: every record from the kernel, folded as it arrives.

use crate::{
    collect::decode_deferred, deferred::DeferredWork, exits::Exit, plan::Plan, profile::Profile,
};

/// The records of one run, folded into the profile and the deferred-work joins.
pub struct Session {
    pub profile: Profile,
    pub deferred: DeferredWork,
    /// Records that could not be decoded.
    pub undecodable: u64,
    /// Exits that are not part of the storm (the workload driver's own).
    excluded: Box<dyn Fn(&Exit) -> bool + Send>,
}

impl Session {
    pub fn new(plan: &Plan, excluded: impl Fn(&Exit) -> bool + Send + 'static) -> Self {
        Self {
            profile: Profile::new(plan),
            deferred: DeferredWork::new(plan.sees_every_ipc_ns_free()),
            undecodable: 0,
            excluded: Box::new(excluded),
        }
    }

    /// One exit record.
    pub fn exit_record(&mut self, bytes: &[u8]) {
        match Exit::decode(bytes) {
            Ok(exit) if (self.excluded)(&exit) => {
                log::trace!("excluded exit of {}/{}: {:?}", exit.tgid, exit.pid, exit.hits);
            }
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
