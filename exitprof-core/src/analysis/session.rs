//! What one run collects: every record from the kernel, folded as it arrives. What is not part
//! of the target never reaches it: the kernel side leaves out exitprof's own exits, a storm
//! driver's, and exits that start after the target ended.

use crate::{
    analysis::{
        blocking::Blocking,
        deferred::DeferredWork,
        exit_stacks::ExitStacks,
        groups::{GroupOptions, Groups},
        kept_exits::{KeptExits, Pick},
        probe_effect::ProbeRuns,
        profile::Profile,
        records::{Exit, StackOwner, decode_deferred, decode_stack, stack_owner},
        teardown::Teardowns,
    },
    probes::plan::Plan,
};

/// The records of one run, folded into the profile and the deferred-work joins.
pub struct Session {
    /// The run's number: records of exits opened in an earlier run are not this run's.
    epoch: u32,
    pub profile: Profile,
    pub deferred: DeferredWork,
    /// Namespace teardowns joined to their exits.
    pub teardowns: Teardowns,
    /// How often the exits blocked.
    pub blocking: Blocking,
    /// Where the exits computed and blocked: kernel stacks by stage.
    pub stacks: ExitStacks,
    /// exitprof's own program runs inside the exits.
    pub probe_runs: ProbeRuns,
    /// Records that could not be decoded.
    pub undecodable: Undecodable,
    /// Records of exits opened in an earlier run (the kernel side sends none; a record that
    /// says so was damaged).
    pub stray: u64,
    /// The exits by workload, where they are grouped.
    pub groups: Option<Groups>,
    /// Exits kept whole, one by one (`--slower-than`, a report of one exit).
    pub kept: Option<KeptExits>,
}

/// Records that could not be decoded, by ring buffer: an exit record's is a lost exit, the
/// others are not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Undecodable {
    pub exits: u64,
    pub deferred: u64,
    pub stacks: u64,
}

impl Session {
    pub fn new(plan: &Plan, groups: Option<GroupOptions>) -> Self {
        Self {
            epoch: 0,
            profile: Profile::new(plan),
            deferred: DeferredWork::new(
                plan.sees_every_ipc_ns_free(),
                plan.measures_rcu_wait(),
                plan.reaps_from_wait4(),
            ),
            teardowns: Teardowns::new(plan.sees_net_teardowns(), plan.sees_user_ns_teardowns()),
            blocking: Blocking::default(),
            stacks: ExitStacks::default(),
            probe_runs: ProbeRuns::new(plan),
            undecodable: Undecodable::default(),
            stray: 0,
            groups: groups.map(Groups::new),
            kept: None,
        }
    }

    /// Keeps the exits `pick` chooses whole, each with its stacks.
    pub fn keep_exits(&mut self, pick: Pick) {
        self.kept = Some(KeptExits::new(pick));
    }

    /// The records that follow are of run `epoch` (a compare folds several runs into one
    /// session).
    pub fn begin_run(&mut self, epoch: u32) {
        self.epoch = epoch;
    }

    /// One exit record.
    pub fn exit_record(&mut self, bytes: &[u8]) {
        match Exit::decode(bytes) {
            Ok(exit) if exit.epoch != self.epoch => {
                self.stray += 1;
                log::warn!("exit record of run {} in run {}", exit.epoch, self.epoch);
            }
            Ok(exit) => {
                log::trace!("exit of {}/{}: {:?}", exit.tgid, exit.pid, exit.hits);
                let spans = self.profile.add(&exit);
                let keep = self.kept.as_ref().is_some_and(|k| k.picks(&exit));
                let stacks = self.stacks.exit(&exit, &spans, keep);
                self.probe_runs.exit(&exit, &spans);
                self.deferred.exit(&exit);
                self.teardowns.exit(&exit);
                self.blocking.exit(&exit);
                if let Some(groups) = &mut self.groups {
                    groups.add(&exit, &self.profile, &spans);
                }
                if keep && let Some(kept) = &mut self.kept {
                    kept.keep(exit, spans, stacks);
                }
            }
            Err(e) => {
                self.undecodable.exits += 1;
                log::warn!("undecodable exit record: {e}");
            }
        }
    }

    /// One kernel stack of an exit (or of a teardown's kworker): an on-CPU sample, or where it
    /// blocked.
    pub fn stack_record(&mut self, bytes: &[u8]) {
        match decode_stack(bytes).zip(stack_owner(bytes)) {
            Some((stack, StackOwner::Exit)) => {
                self.stacks.record(&stack);
                if let Some(kept) = &mut self.kept {
                    kept.stack(&stack);
                }
            }
            Some((stack, StackOwner::Teardown)) => self.teardowns.stack(&stack),
            None => {
                self.undecodable.stacks += 1;
                log::warn!("undecodable kernel stack record of {} bytes", bytes.len());
            }
        }
    }

    /// One record of a cgroup made or removed (kept only where exits are grouped by cgroup).
    pub fn cgroup_record(&mut self, bytes: &[u8]) {
        if let Some(groups) = &mut self.groups {
            groups.cgroup_paths.record(bytes);
        }
    }

    /// One deferred-work record.
    pub fn deferred_record(&mut self, bytes: &[u8]) {
        match decode_deferred(bytes) {
            Some(record) => {
                self.deferred.record(&record);
                self.teardowns.record(&record);
            }
            None => {
                self.undecodable.deferred += 1;
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
        analysis::records::{
            ExitKey, KernelStack, StackKind,
            tests::{any_deferred, any_exit, encode_deferred, encode_exit, encode_stack},
        },
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    /// Exit records as the ring buffer may carry them: any exit (pids, tgids and namespaces from
    /// a small range, so that deferred records join them), or bytes that are no record.
    fn any_exit_bytes() -> impl Strategy<Value = Vec<u8>> {
        let exit = any_exit().prop_map(|mut e| {
            (e.pid, e.tgid, e.ipc_ns, e.epoch) = (e.pid % 8, e.tgid % 8, e.ipc_ns % 8, e.epoch % 2);
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
            let plan = Plan::with_sites(
                KernelVersion::new(6, 18, 0),
                &[
                    (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                    (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
                ],
            );
            let mut session = Session::new(&plan, None);
            session.begin_run(1);
            session.deferred = DeferredWork::new(ipc_exact, ipc_exact, ipc_exact);
            // Samples of the records' exits (by index), read before or after them; or junk.
            let sample_of = |(index, before, n_hits): (u32, bool, u8)| {
                let exit = Exit::decode(&records.get(index as usize % records.len().max(1))?.0).ok()?;
                let start = exit.hits.first().map_or(0, |h| h.ts_ns);
                let sample = KernelStack {
                    kind: if n_hits % 2 == 0 { StackKind::OnCpu } else { StackKind::Blocked },
                    exit: ExitKey { pid: exit.pid, start_ns: start },
                    n_hits: u32::from(n_hits % 8),
                    ts_ns: start,
                    ns: u64::from(n_hits),
                    stack: vec![u64::from(n_hits)],
                };
                Some((index as usize % records.len(), before, encode_stack(&sample)))
            };
            let samples: Vec<(usize, bool, Vec<u8>)> =
                samples.into_iter().filter_map(sample_of).collect();
            for (i, (exit, deferred)) in records.iter().enumerate() {
                for (_, _, bytes) in samples.iter().filter(|s| s.0 == i && s.1) {
                    session.stack_record(bytes);
                }
                session.exit_record(exit);
                session.deferred_record(deferred);
                for (_, _, bytes) in samples.iter().filter(|s| s.0 == i && !s.1) {
                    session.stack_record(bytes);
                }
            }
            session.stack_record(&[0; 7]);
            session.stacks.finish();
            let (s, b) = (session.stacks.samples, session.stacks.blocks);
            let stacks = s.joined + s.unjoined + s.unplaced + b.joined + b.unjoined + b.unplaced;
            prop_assert_eq!(stacks, samples.len() as u64);
            let decoded = records.iter().filter_map(|(e, _)| Exit::decode(e).ok());
            let (exits, stray) = decoded.fold((0, 0), |(n, s), e| {
                if e.epoch == 1 { (n + 1, s) } else { (n, s + 1) }
            });
            prop_assert_eq!(session.stray, stray);
            let undecodable = Undecodable {
                exits: records.iter().filter(|(e, _)| Exit::decode(e).is_err()).count() as u64,
                deferred: records.iter().filter(|(_, d)| decode_deferred(d).is_none()).count()
                    as u64,
                stacks: 1,
            };
            prop_assert_eq!(session.profile.exits, exits);
            prop_assert_eq!(session.undecodable, undecodable);
            let _ = (session.deferred.report(), session.profile.exit().summary());
            for row in session.profile.rows() {
                let _ = row.latency.summary();
            }
        }
    }
}
