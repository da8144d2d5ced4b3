//! Every count exitprof keeps of what it could not keep, and of what it did besides recording
//! exits: one table, from which the kernel side's counter indices, userspace's counts, the JSON
//! document's keys, the Prometheus labels and help, and the documentation's table come.
//!
//! The kernel side counts the first part of the table in its per-CPU `COUNTERS` map, at the
//! indices named here (each entry's constant); userspace counts the rest itself. A count added
//! here is read, reported, exported and served everywhere with no other change (but the line
//! the docs' table needs, which a unit test asks for).

/// What a count says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Exits lost, each counted once under one cause: with the exits recorded they make every
    /// exit of the target.
    ExitLost,
    /// Something lost that is not a whole exit: a record of deferred work or a stack, probe hits
    /// of a recorded exit, what tells exits apart.
    PartLost,
    /// Not a loss: what happened, for a person looking into a run.
    Diagnostic,
    /// The kernel side's own tally of exits opened and ended, which tells userspace how many are
    /// in progress: reported nowhere.
    Bookkeeping,
}

/// One count.
#[derive(Clone, Copy, Debug)]
pub struct Count {
    /// Its key in the JSON document, its label in Prometheus (`cause` of
    /// `exitprof_losses_total`, `counter` of `exitprof_diagnostics_total`), its name in a record
    /// file.
    pub key: &'static str,
    /// What it counts, in a few words, as the terminal report lists it ("3 ring buffer full").
    pub what: &'static str,
    /// What it counts, in a sentence: the documentation's and the Prometheus help's.
    pub help: &'static str,
    pub kind: Kind,
}

/// Declares the table: a `u32` constant per count (its index: the kernel's counts from 0 in
/// order, then userspace's), [`KERNEL`] and [`USERSPACE`], and their numbers.
macro_rules! counts {
    (
        kernel { $($(#[$kdoc:meta])* $kname:ident: $kkind:ident, $kkey:literal, $kwhat:literal, $khelp:literal;)+ }
        userspace { $($(#[$udoc:meta])* $uname:ident: $ukind:ident, $ukey:literal, $uwhat:literal, $uhelp:literal;)+ }
    ) => {
        /// The kernel side's counts in declaration order.
        #[allow(
            non_camel_case_types,
            clippy::upper_case_acronyms,
            reason = "named as the constants they number (allowed, not expected: whether a name \
                      is one word depends on the table)"
        )]
        #[repr(u32)]
        enum KernelIndex { $($kname,)+ End }

        /// Userspace's counts in declaration order.
        #[allow(
            non_camel_case_types,
            clippy::upper_case_acronyms,
            reason = "named as the constants they number (allowed, not expected: whether a name \
                      is one word depends on the table)"
        )]
        #[repr(u32)]
        enum UserIndex { $($uname,)+ End }

        /// Number of the kernel side's counters: the size of its `COUNTERS` map.
        pub const COUNT: u32 = KernelIndex::End as u32;
        /// Number of counts in all.
        pub const ALL_COUNT: usize = COUNT as usize + UserIndex::End as usize;

        $($(#[$kdoc])* pub const $kname: u32 = KernelIndex::$kname as u32;)+
        $($(#[$udoc])* pub const $uname: u32 = COUNT + UserIndex::$uname as u32;)+

        /// The kernel side's counts, by index.
        pub const KERNEL: [Count; COUNT as usize] =
            [$(Count { key: $kkey, what: $kwhat, help: $khelp, kind: Kind::$kkind }),+];
        /// Userspace's counts, by index less [`COUNT`].
        pub const USERSPACE: [Count; UserIndex::End as usize] =
            [$(Count { key: $ukey, what: $uwhat, help: $uhelp, kind: Kind::$ukind }),+];
    };
}

counts! {
    kernel {
        /// An exit record that did not fit in the ring buffer.
        RINGBUF_FULL: ExitLost, "ringbuf_full", "ring buffer full",
            "Exits lost because the exit-record ring buffer was full (--ringbuf-bytes).";
        /// An exit that found both slots it could take held by other exits: counted once per
        /// exit (remembered as refused, it is not opened again later).
        STATE_FULL: ExitLost, "state_map_full", "no free exit slot",
            "Exits lost because both slots they could take were held by other exits in \
             progress (--exit-slots).";
        /// An exit whose following could not be decided (no mark within the generations of
        /// ancestors looked through, of a process older than the target's marks, or one created
        /// below such a process), and that nothing else chose: counted once, as
        /// `STATE_FULL`.
        FOLLOW_UNKNOWN: ExitLost, "follow_unknown", "exits not known to be followed",
            "Exits lost because whether they are followed could not be decided: no mark within \
             the generations of ancestors looked through (64; 24 with the compat object) of a \
             process already there when the target's marks were set.";
        /// A deferred-work record that did not fit in its ring buffer.
        DEFERRED_RINGBUF_FULL: PartLost, "deferred_ringbuf_full", "deferred-work records dropped",
            "Records of deferred work (IPC namespace frees, reaps, task frees) dropped because \
             their ring buffer was full.";
        /// An exit whose record was still open when its task started an exit again or was
        /// freed: its end was never seen, and it is dropped.
        STALE_RECORD: ExitLost, "stale_records", "ends never seen",
            "Exits lost because their end was never seen: their task started an exit again, or \
             was freed, with the record still open.";
        /// A followed exit back on a CPU without a `sched_switch` naming it as the next task
        /// (seen on v6.18 after blocking on a rwsem): its off-CPU interval was closed at its next
        /// probe point or at its final switch-out, late.
        UNSEEN_RETURN: Diagnostic, "unseen_returns", "returns to a CPU unseen",
            "Times a recorded exit was back on a CPU with no sched_switch showing it: its \
             off-CPU interval closed late, at its next probe point or its end.";
        /// Exit records opened.
        EXITS_OPENED: Bookkeeping, "exits_opened", "exits opened", "Exit records opened.";
        /// Exit records of the current run ended: sent, or dropped and counted under
        /// `RINGBUF_FULL` or `STALE_RECORD` (exits opened in an earlier run end under
        /// `STRAY_ENDS`).
        EXITS_ENDED: Bookkeeping, "exits_ended", "exits ended",
            "Exit records of the run ended: sent, or dropped and counted lost.";
        /// A block whose kernel stack was walked.
        STACKS_WALKED: Diagnostic, "stacks_walked", "block stacks walked",
            "Blocks of recorded exits whose kernel stack was walked.";
        /// A block that would have been the longest of its exit so far, whose stack was not
        /// walked because its CPU had used its budget of walks.
        STACKS_SKIPPED: Diagnostic, "stacks_skipped", "block stacks skipped",
            "Blocks whose kernel stack was not walked: their CPU had used its budget of walks a \
             second.";
        /// An on-CPU sample of a followed exit sent.
        SAMPLES: Diagnostic, "samples", "on-CPU samples",
            "On-CPU samples of recorded exits taken.";
        /// An on-CPU sample that did not fit in its ring buffer.
        SAMPLES_LOST: PartLost, "samples_lost", "on-CPU samples dropped",
            "On-CPU samples dropped because their ring buffer was full.";
        /// Deferred work in progress that could not be noted (its map was full): a `free_ipc`
        /// run, a reap, or an awaited task free that goes unreported.
        DEFERRED_STATE_FULL: PartLost, "deferred_state_full", "deferred work not noted",
            "Deferred work in progress that could not be noted (its map was full): an IPC \
             namespace free, a reap or a task free goes unreported.";
        /// A block's kernel stack that did not fit in its ring buffer: the exit is recorded,
        /// the block's time goes without its stack.
        BLOCK_STACKS_LOST: PartLost, "block_stacks_lost", "block stacks dropped",
            "Kernel stacks of blocks dropped because their ring buffer was full: the exits are \
             recorded, those blocks' time goes without a stack.";
        /// A refused exit (`STATE_FULL`, `FOLLOW_UNKNOWN`) that could not be remembered as such
        /// (the map of refused exits was full): it may have been counted again, or recorded, at
        /// a later point.
        REFUSALS_FORGOTTEN: PartLost, "refusals_forgotten", "lost exits perhaps counted twice",
            "Lost exits that could not be remembered as lost (their map was full): each may \
             have been counted again, or recorded, later.";
        /// An exit opened in an earlier run that ended in this one: neither recorded nor lost
        /// here (its run counted it unfinished).
        STRAY_ENDS: Diagnostic, "stray_ends", "ends of an earlier run's exits",
            "Exits opened in an earlier run (which counted them unfinished) that ended in this \
             one: neither recorded nor lost here.";
        /// A followed process whose mark could not be kept for a thread that takes it over by
        /// exec (the map of such marks was full): its exits after the exec may go unrecorded,
        /// uncounted.
        MARKS_NOT_PASSED: PartLost, "marks_not_passed", "processes not followed through an exec",
            "Followed processes whose mark could not be kept for a thread that takes them over \
             by exec: their exits after the exec may be missing, uncounted.";
        /// A cgroup made or removed whose path could not be sent (the ring buffer was full):
        /// exits in it are grouped under its id, not its name.
        CGROUP_NAMES_LOST: PartLost, "cgroup_names_lost", "cgroups left unnamed",
            "Cgroups made or removed whose path could not be sent: their exits are grouped \
             under the cgroup's id, not its name.";
        /// A refusal (`STATE_FULL`, `FOLLOW_UNKNOWN`) found at the address of a task other than
        /// the one refused: the refused task's end and free both went unseen. Forgotten when
        /// found, so that the exit now at that address is recorded or counted lost.
        STALE_REFUSALS: Diagnostic, "stale_refusals", "refusals found stale",
            "Refusals of lost exits found at the address of another task (the refused task's \
             end and free both went unseen), forgotten then: the new exit is recorded or lost.";
        /// A process created during a run whose decision (followed or not) could not be kept
        /// (its mark could not be made: the compat object's map of marks was full): from then on
        /// processes are no longer decided as they are created, and exits deeper than the walk
        /// up the ancestry may be counted `FOLLOW_UNKNOWN`.
        MARKS_NOT_INHERITED: Diagnostic, "marks_not_inherited", "processes created undecided",
            "Processes created during the run whose parent's mark could not be passed on (the \
             map of marks was full): from then on exits are decided by the walk up the ancestry \
             alone, and those deeper than it are lost as follow_unknown.";
    }
    userspace {
        /// An exit record that could not be decoded.
        UNDECODABLE: ExitLost, "undecodable", "undecodable",
            "Exit records that could not be decoded.";
        /// An exit still in progress when the run ended.
        UNFINISHED: ExitLost, "unfinished", "unfinished",
            "Exits still in progress when the run ended.";
        /// A deferred-work record that could not be decoded.
        UNDECODABLE_DEFERRED: PartLost, "undecodable_deferred", "undecodable deferred-work records",
            "Records of deferred work that could not be decoded.";
        /// A kernel-stack record that could not be decoded.
        UNDECODABLE_STACKS: PartLost, "undecodable_stacks", "undecodable stacks",
            "Kernel stacks (on-CPU samples, blocks) that could not be decoded.";
        /// A probe hit that did not fit in its exit's record.
        HITS: PartLost, "hits", "probe hits over the per-exit limit",
            "Probe hits that did not fit in their exit's record: the exit is recorded, flagged \
             truncated.";
        /// A probe hit the kernel dropped (a kprobe miss, BPF recursion).
        PROBE_MISSES: PartLost, "probe_misses", "probe hits missed by the kernel",
            "Probe hits the kernel dropped (kprobe misses, BPF recursion): their exits are \
             recorded with a point missing.";
        /// An exit whose hits were clamped into order.
        CLAMPED_EXITS: Diagnostic, "clamped_exits", "exits with hits out of order",
            "Exits whose hits went back in time or past the exit's end, or whose off-CPU time \
             grew faster than the time (a clock read behind on another CPU, or a damaged \
             record): clamped into order, so that their stages still sum to the exit.";
        /// An exit that left its network or user namespace without a reference, whose
        /// teardown (a `cleanup_net` or `free_user_ns` run) was not seen.
        TEARDOWNS_NOT_SEEN: PartLost, "teardowns_not_seen", "namespace teardowns not seen",
            "Exits that left their network or user namespace without a reference whose \
             teardown (cleanup_net, free_user_ns) was not seen.";
        /// A `cleanup_net` run whose walk of the kernel's network namespaces for its batch
        /// stopped at its bound: namespaces it tore down may have gone unseen.
        TEARDOWN_WALKS_TRUNCATED: PartLost, "teardown_walks_truncated",
            "teardown batches walked in part",
            "Runs of cleanup_net whose walk for the namespaces they tear down stopped at its \
             bound: some of their teardowns may have gone unseen.";
        /// A namespace teardown whose namespace outlived its last recorded exit (other tasks,
        /// sockets, bind mounts or devices held it): not joined to an exit.
        TEARDOWNS_OUTLIVED: Diagnostic, "teardowns_outlived", "namespace teardowns outlived",
            "Network and user namespace teardowns whose namespace outlived its last recorded \
             exit (other tasks, sockets, mounts or devices held it): joined to no exit.";
        /// A namespace teardown of a namespace no recorded exit was in.
        TEARDOWNS_WITHOUT_EXIT: Diagnostic, "teardowns_without_exit",
            "namespace teardowns without an exit",
            "Network and user namespace teardowns of namespaces no recorded exit was in.";
    }
}

/// Every count, by index.
pub fn all() -> impl Iterator<Item = (u32, &'static Count)> {
    (0..).zip(KERNEL.iter().chain(USERSPACE.iter()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_the_table() {
        assert_eq!(KERNEL[RINGBUF_FULL as usize].key, "ringbuf_full");
        assert_eq!(KERNEL[STALE_REFUSALS as usize].key, "stale_refusals");
        assert_eq!(USERSPACE[(UNDECODABLE - COUNT) as usize].key, "undecodable");
        assert_eq!(USERSPACE[(PROBE_MISSES - COUNT) as usize].key, "probe_misses");
        assert_eq!(all().count(), ALL_COUNT);
        assert!(all().all(|(i, c)| i < ALL_COUNT as u32 && !c.key.is_empty()));
    }

    #[test]
    fn keys_are_unique_label_values() {
        for (i, a) in all() {
            assert!(a.key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{}", a.key);
            assert!(a.help.ends_with('.'), "{}", a.key);
            assert!(all().all(|(j, b)| i == j || a.key != b.key), "{} twice", a.key);
        }
    }
}
