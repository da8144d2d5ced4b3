//! What one run collects: every record from the kernel, folded as it arrives. What is not part
//! of the target never reaches it: the kernel side leaves out exitprof's own exits, a storm
//! driver's, and exits that start after the target ended.

use crate::{
    analysis::{
        blocking::Blocking,
        deferred::DeferredWork,
        on_cpu::OnCpu,
        probe_effect::ProbeRuns,
        profile::Profile,
        records::{Exit, decode_deferred, decode_sample},
    },
    probes::plan::Plan,
};

/// The records of one run, folded into the profile and the deferred-work joins.
pub struct Session {
    pub profile: Profile,
    pub deferred: DeferredWork,
    /// Where the exits blocked.
    pub blocking: Blocking,
    /// Where the exits computed: sampled kernel stacks by stage.
    pub on_cpu: OnCpu,
    /// exitprof's own program runs inside the exits.
    pub probe_runs: ProbeRuns,
    /// Records that could not be decoded.
    pub undecodable: u64,
}

impl Session {
    pub fn new(plan: &Plan) -> Self {
        Self {
            profile: Profile::new(plan),
            deferred: DeferredWork::new(
                plan.sees_every_ipc_ns_free(),
                plan.measures_rcu_wait(),
                plan.reaps_from_wait4(),
            ),
            blocking: Blocking::default(),
            on_cpu: OnCpu::default(),
            probe_runs: ProbeRuns::new(plan),
            undecodable: 0,
        }
    }

    /// One exit record.
    pub fn exit_record(&mut self, bytes: &[u8]) {
        match Exit::decode(bytes) {
            Ok(exit) => {
                log::trace!("exit of {}/{}: {:?}", exit.tgid, exit.pid, exit.hits);
                let spans = self.profile.add(&exit);
                self.on_cpu.exit(&exit, &spans);
                self.probe_runs.exit(&exit, &spans);
                self.deferred.exit(&exit);
                self.blocking.exit(&exit, &spans);
            }
            Err(e) => {
                self.undecodable += 1;
                log::warn!("undecodable exit record: {e}");
            }
        }
    }

    /// One on-CPU sample of an exit.
    pub fn sample_record(&mut self, bytes: &[u8]) {
        match decode_sample(bytes) {
            Some(sample) => self.on_cpu.sample(&sample),
            None => {
                self.undecodable += 1;
                log::warn!("undecodable on-CPU sample of {} bytes", bytes.len());
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
            records::{
                CpuSample,
                tests::{any_deferred, any_exit, encode_deferred, encode_exit, encode_sample},
            },
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
        /// deferred work before or after its exit, samples before or after their exit's record,
        /// bytes that are no record — the session folds it without a panic, counts every exit
        /// record as recorded or undecodable, and every sample as joined, unjoined or unplaced.
        #[test]
        fn any_records_are_folded_or_counted(
            records in vec((any_exit_bytes(), any_deferred_bytes()), 0..40),
            samples in vec((any::<u32>(), any::<bool>(), any::<u8>()), 0..40),
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
            session.deferred = DeferredWork::new(ipc_exact, ipc_exact, ipc_exact);
            // Samples of the records' exits (by index), read before or after them; or junk.
            let sample_of = |(index, before, n_hits): (u32, bool, u8)| {
                let exit = Exit::decode(&records.get(index as usize % records.len().max(1))?.0).ok()?;
                let start = exit.hits.first().map_or(0, |h| h.ts_ns);
                let sample = CpuSample {
                    pid: exit.pid,
                    n_hits: u32::from(n_hits % 8),
                    exit_start_ns: start,
                    ts_ns: start,
                    stack: vec![u64::from(n_hits)],
                };
                Some((index as usize % records.len(), before, encode_sample(&sample)))
            };
            let samples: Vec<(usize, bool, Vec<u8>)> =
                samples.into_iter().filter_map(sample_of).collect();
            for (i, (exit, deferred)) in records.iter().enumerate() {
                for (_, _, bytes) in samples.iter().filter(|s| s.0 == i && s.1) {
                    session.sample_record(bytes);
                }
                session.exit_record(exit);
                session.deferred_record(deferred);
                for (_, _, bytes) in samples.iter().filter(|s| s.0 == i && !s.1) {
                    session.sample_record(bytes);
                }
            }
            session.sample_record(&[0; 7]);
            session.on_cpu.finish();
            let n = session.on_cpu.sampled;
            prop_assert_eq!(n.joined + n.unjoined + n.unplaced, samples.len() as u64);
            let exits = records.iter().filter(|(e, _)| Exit::decode(e).is_ok()).count() as u64;
            let undecodable = records.iter().filter(|(e, _)| Exit::decode(e).is_err()).count()
                + records.iter().filter(|(_, d)| decode_deferred(d).is_none()).count()
                + 1;
            prop_assert_eq!(session.profile.exits, exits);
            prop_assert_eq!(session.undecodable, undecodable as u64);
            let _ = (session.deferred.report(), session.profile.exit().summary());
            for row in session.profile.rows() {
                let _ = row.latency.summary();
            }
        }
    }
}
