//! What one run collects: every record from the kernel, folded as it arrives, leaving out what
//! is not part of the target.

use crate::{
    analysis::{
        blocking::Blocking,
        deferred::DeferredWork,
        profile::Profile,
        records::{Exit, decode_deferred},
    },
    probes::plan::Plan,
};

/// The records of one run, folded into the profile and the deferred-work joins.
pub struct Session {
    pub profile: Profile,
    pub deferred: DeferredWork,
    /// Where the exits blocked.
    pub blocking: Blocking,
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
            blocking: Blocking::default(),
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
                self.blocking.exit(&exit);
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

#[cfg(test)]
mod tests {
    use exitprof_common::point::Marker;
    use proptest::{collection::vec, prelude::*};

    use super::*;
    use crate::{
        analysis::{
            records::tests::{any_deferred, any_exit, encode_deferred, encode_exit},
            stages::tests::plan,
        },
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    /// Exit records as the ring buffer may carry them: any exit (pids, tgids and namespaces from
    /// a small range, so that deferred records join them), or bytes that are no record.
    fn any_exit_bytes() -> impl Strategy<Value = Vec<u8>> {
        let exit = any_exit().prop_map(|mut e| {
            (e.pid, e.tgid, e.ipc_ns) = (e.pid % 8, e.tgid % 8, e.ipc_ns % 8);
            encode_exit(&e)
        });
        prop_oneof![4 => exit, 1 => vec(any::<u8>(), 0..600)]
    }

    fn any_deferred_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![4 => any_deferred().prop_map(|r| encode_deferred(&r)), 1 => vec(any::<u8>(), 0..64)]
    }

    proptest! {
        // Each case builds histograms for up to hundreds of stages: fewer cases than the default.
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the kernel sends, in whatever order — hits in any order at any times,
        /// deferred work before or after its exit, bytes that are no record — the session folds
        /// it without a panic and counts every exit record as recorded or undecodable.
        #[test]
        fn any_records_are_folded_or_counted(
            records in vec((any_exit_bytes(), any_deferred_bytes()), 0..40),
            ipc_exact in any::<bool>(),
        ) {
            let plan = plan(
                KernelVersion::new(6, 18, 0),
                &[
                    (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                    (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
                ],
            );
            let mut session = Session::new(&plan);
            session.deferred = DeferredWork::new(ipc_exact, ipc_exact);
            // No tgid of the records is exitprof's.
            session.exclusion.own_tgid = u32::MAX;
            for (exit, deferred) in &records {
                session.exit_record(exit);
                session.deferred_record(deferred);
            }
            let exits = records.iter().filter(|(e, _)| Exit::decode(e).is_ok()).count() as u64;
            let undecodable = records.iter().filter(|(e, _)| Exit::decode(e).is_err()).count()
                + records.iter().filter(|(_, d)| decode_deferred(d).is_none()).count();
            prop_assert_eq!(session.profile.exits, exits);
            prop_assert_eq!(session.undecodable, undecodable as u64);
            let _ = (session.deferred.report(), session.profile.exit().summary());
            for row in session.profile.rows() {
                let _ = row.latency.summary();
            }
        }
    }
}
